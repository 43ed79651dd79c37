package upstream_test

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway/upstream"
)

// The differential tests hold upstream.Client to httputil.ReverseProxy
// over an http.Transport (the gateway's other engine, and what it used
// for every request before): the same request, sent by a client byte for
// byte to a front running each engine, must reach the upstream as the
// same request line and the same header fields, and the same answer of
// the upstream must reach the client as the same bytes.

// rawUpstream is an upstream on a raw listener: it records the head of
// every request it reads and answers each with answer (closing the
// connection after it when close is set; its head alone to a HEAD, unless
// headBody is set).
type rawUpstream struct {
	ln       net.Listener
	answer   string
	close    bool
	headBody bool
	mu       sync.Mutex
	heads    []string
	wg       sync.WaitGroup
}

func newRawUpstream(t testing.TB, answer string, closeAfter bool) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, answer: answer, close: closeAfter}
	u.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Go(func() { u.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); u.wg.Wait() })
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		var head strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			if line == "\r\n" {
				break
			}
		}
		u.mu.Lock()
		u.heads = append(u.heads, head.String())
		u.mu.Unlock()
		answer := u.answer
		if strings.HasPrefix(head.String(), "HEAD ") && !u.headBody {
			answer, _, _ = strings.Cut(answer, "\r\n\r\n")
			answer += "\r\n\r\n"
		}
		if _, err := io.WriteString(c, answer); err != nil || u.close {
			return
		}
	}
}

func (u *rawUpstream) lastHead(t *testing.T) string {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.heads) == 0 {
		t.Fatal("the upstream received no request")
	}
	return u.heads[len(u.heads)-1]
}

// fronts are the two engines in front of one upstream, each with rewrite.
type fronts struct{ proxy, fast *httptest.Server }

func newFronts(t *testing.T, target *url.URL, rewrite func(*httputil.ProxyRequest)) fronts {
	t.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(transport.CloseIdleConnections)
	rp := &httputil.ReverseProxy{Rewrite: rewrite, Transport: transport, ErrorLog: discardLog}
	c, err := upstream.New(upstream.Options{Target: target, Rewrite: rewrite, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdle)
	fast := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.Handles(r) {
			t.Errorf("Handles declined %s %s", r.Method, r.URL)
			rp.ServeHTTP(w, r)
			return
		}
		if err := c.Forward(w, r); err != nil {
			t.Errorf("Forward: %v", err)
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	f := fronts{httptest.NewServer(rp), httptest.NewServer(fast)}
	t.Cleanup(f.proxy.Close)
	t.Cleanup(f.fast.Close)
	return f
}

// exchange sends raw (a request whose Host is replaced by the front's
// address when it holds HOST) to addr on a new connection and returns
// all it reads until the front closes (the request asks it to).
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, strings.ReplaceAll(raw, "HOST", addr)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the answer: %v (read %q)", err, b)
	}
	return string(b)
}

// normalHead is a request head as compared: the request line, then the
// header lines sorted, without the Accept-Encoding: gzip that
// http.Transport adds when the client asked for none (on purpose, the
// fast engine does not: see the package comment), and with the front's
// varying port written PORT.
func normalHead(head string, clientAsked bool) string {
	lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
	fields := lines[1:]
	if !clientAsked {
		fields = slices.DeleteFunc(fields, func(l string) bool { return l == "Accept-Encoding: gzip" })
	}
	slices.Sort(fields)
	return ports.ReplaceAllString(lines[0]+"\n"+strings.Join(fields, "\n"), ":PORT")
}

var ports = regexp.MustCompile(`:\d{2,5}\b`)

var discardLog = log.New(io.Discard, "", 0)

// requests is what a client may send that the fast engine takes, each
// chosen for a rule of what reaches the upstream.
var requests = []struct{ name, raw string }{
	{"plain", "GET / HTTP/1.1\r\nHost: HOST\r\n"},
	{"path and query", "GET /a/b?x=1&y=2 HTTP/1.1\r\nHost: HOST\r\n"},
	{"escaped path", "GET /caf%C3%A9/x%2Fy/%7Euser HTTP/1.1\r\nHost: HOST\r\n"},
	{"query with a semicolon", "GET /q?a=1;b=2&c=3 HTTP/1.1\r\nHost: HOST\r\n"},
	{"query with a bad escape", "GET /q?a=%zz&b=1 HTTP/1.1\r\nHost: HOST\r\n"},
	{"query escapes kept", "GET /q?a=%2e%2e/&b=%41 HTTP/1.1\r\nHost: HOST\r\n"},
	{"empty query", "GET /q? HTTP/1.1\r\nHost: HOST\r\n"},
	{"fields named by Connection", "GET / HTTP/1.1\r\nHost: HOST\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n"},
	{"hop-by-hop fields", "GET / HTTP/1.1\r\nHost: HOST\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nTrailer: X-T\r\n"},
	{"TE with trailers", "GET / HTTP/1.1\r\nHost: HOST\r\nTE: trailers, deflate\r\n"},
	{"TE without trailers", "GET / HTTP/1.1\r\nHost: HOST\r\nTE: deflate\r\n"},
	{"forwarding fields of the client", "GET / HTTP/1.1\r\nHost: HOST\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Host: evil.test\r\nX-Forwarded-Proto: https\r\nForwarded: for=10.0.0.1\r\n"},
	{"a trusted chain", "GET / HTTP/1.1\r\nHost: HOST\r\nX-Trusted: yes\r\nX-Forwarded-For: 10.0.0.1, 10.0.0.2\r\nX-Forwarded-For: 10.0.0.3\r\n"},
	{"repeated fields", "GET / HTTP/1.1\r\nHost: HOST\r\nX-Multi: a\r\nX-Multi: b\r\nCookie: a=1\r\nCookie: b=2\r\n"},
	{"user agent", "GET / HTTP/1.1\r\nHost: HOST\r\nUser-Agent: curl/8.0\r\nAccept: */*\r\n"},
	{"accept-encoding of the client", "GET / HTTP/1.1\r\nHost: HOST\r\nAccept-Encoding: br, gzip\r\n"},
	{"range", "GET /f HTTP/1.1\r\nHost: HOST\r\nRange: bytes=0-10\r\n"},
	{"another host", "GET / HTTP/1.1\r\nHost: Example.COM:80\r\n"},
	{"empty field", "GET / HTTP/1.1\r\nHost: HOST\r\nX-Empty:\r\n"},
	{"content-length 0", "GET / HTTP/1.1\r\nHost: HOST\r\nContent-Length: 0\r\n"},
	{"HEAD", "HEAD /h?x=1 HTTP/1.1\r\nHost: HOST\r\n"},
	{"OPTIONS", "OPTIONS /o HTTP/1.1\r\nHost: HOST\r\nOrigin: https://a.test\r\n"},
	{"HTTP/1.0 client", "GET /old HTTP/1.0\r\nHost: HOST\r\n"},
}

// rewriteLikeTheGateway is the gateway's Rewrite, with "X-Trusted: yes"
// standing for a peer among trusted_proxies.
func rewriteLikeTheGateway(target *url.URL) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 && pr.In.Header.Get("X-Trusted") == "yes" {
			pr.Out.Header["X-Forwarded-For"] = xff
		}
		pr.SetXForwarded()
	}
}

func TestSameRequestAsReverseProxy(t *testing.T) {
	for _, base := range []string{"", "/base", "/base/?k=v"} {
		up := newRawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false)
		target, _ := url.Parse("http://" + up.ln.Addr().String() + base)
		f := newFronts(t, target, rewriteLikeTheGateway(target))
		for _, rq := range requests {
			t.Run(fmt.Sprintf("target %q/%s", base, rq.name), func(t *testing.T) {
				raw := rq.raw + "Connection: close\r\n\r\n"
				if strings.Contains(rq.raw, "\nConnection:") { // one Connection field, not two
					raw = strings.Replace(rq.raw, "\nConnection: ", "\nConnection: close, ", 1) + "\r\n"
				}
				asked := strings.Contains(rq.raw, "Accept-Encoding") || strings.Contains(rq.raw, "Range") || strings.HasPrefix(rq.raw, "HEAD")
				a := exchange(t, f.proxy.Listener.Addr().String(), raw)
				want := normalHead(up.lastHead(t), asked)
				b := exchange(t, f.fast.Listener.Addr().String(), raw)
				got := normalHead(up.lastHead(t), asked)
				if got != want {
					t.Errorf("the upstream received\n%s\nfrom the fast engine, and from ReverseProxy\n%s", got, want)
				}
				if !strings.HasPrefix(a, "HTTP/1.1 200 ") && !strings.HasPrefix(a, "HTTP/1.0 200 ") || a[8:] != b[8:] && dates.ReplaceAllString(a, "") != dates.ReplaceAllString(b, "") {
					t.Errorf("answers:\n%s\n%s", a, b)
				}
			})
		}
	}
}

// answers is what an upstream may answer, each chosen for a rule of what
// reaches the client.
var answers = []struct {
	name, raw string
	close     bool // the body ends when the connection does
	method    string
}{
	{name: "length", raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"},
	{name: "chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"},
	// A body of unknown length has its header flushed before it; ReverseProxy
	// does so from a timer racing its first write, and when the write wins,
	// net/http sniffs a Content-Type from it. With one given, both are the
	// same whichever wins.
	{name: "announced trailer", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 42\r\n\r\n"},
	{name: "unannounced trailer", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n2\r\nok\r\n0\r\nX-Late: 1\r\n\r\n"},
	{name: "hop-by-hop fields", raw: "HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nUpgrade: foo\r\nX-Ok: 1\r\nContent-Length: 2\r\n\r\nok"},
	{name: "until close", raw: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\nuntil the end", close: true},
	{name: "HTTP/1.0", raw: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", close: true},
	{name: "204", raw: "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"},
	{name: "304", raw: "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n"},
	{name: "404 with a body", raw: "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"error\":404}"},
	{name: "event stream", raw: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n7\r\ndata: 1\r\n7\r\ndata: 2\r\n0\r\n\r\n"},
	{name: "early hints", raw: "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
	{name: "100 continue unasked", raw: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
	{name: "cookies", raw: "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n"},
	{name: "HEAD", raw: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: text/plain\r\n\r\n", method: "HEAD"},
	{name: "server", raw: "HTTP/1.1 500 Internal Server Error\r\nServer: up/1\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: 3\r\n\r\nbad"},
}

// dates are the Date fields the fronts write themselves.
var dates = regexp.MustCompile(`(?m)^Date: [^\r]*\r\n`)

func TestSameAnswerAsReverseProxy(t *testing.T) {
	for _, an := range answers {
		t.Run(an.name, func(t *testing.T) {
			up := newRawUpstream(t, an.raw, an.close)
			target, _ := url.Parse("http://" + up.ln.Addr().String())
			f := newFronts(t, target, rewriteLikeTheGateway(target))
			method := cmp.Or(an.method, "GET")
			raw := method + " / HTTP/1.1\r\nHost: HOST\r\nTE: trailers\r\nConnection: close\r\n\r\n"
			want := exchange(t, f.proxy.Listener.Addr().String(), raw)
			got := exchange(t, f.fast.Listener.Addr().String(), raw)
			if an.name != "server" { // the upstream's own Date passes through both
				want, got = dates.ReplaceAllString(want, ""), dates.ReplaceAllString(got, "")
			}
			if got != want {
				t.Errorf("the client received\n%q\nfrom the fast engine, and from ReverseProxy\n%q", got, want)
			}
		})
	}
}

// TestTheComparisonCanFail is the differential tests' negative control: a
// front whose Rewrite forgets to set the forwarding fields, or an upstream
// whose answer differs, is caught by the same comparisons.
func TestTheComparisonCanFail(t *testing.T) {
	up := newRawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false)
	target, _ := url.Parse("http://" + up.ln.Addr().String())
	good := newFronts(t, target, rewriteLikeTheGateway(target))
	forgetful := newFronts(t, target, func(pr *httputil.ProxyRequest) { pr.SetURL(target) })
	raw := "GET /a?b=1 HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n"
	exchange(t, good.proxy.Listener.Addr().String(), raw)
	want := normalHead(up.lastHead(t), false)
	exchange(t, forgetful.fast.Listener.Addr().String(), raw)
	if got := normalHead(up.lastHead(t), false); got == want {
		t.Errorf("a Rewrite without SetXForwarded sent the same request:\n%s", got)
	}
}

// TestBodyToAHeadIsNotTheNextAnswer: an upstream that wrongly sends a body
// with its answer to a HEAD leaves bytes no request asked for on the
// connection; the connection is closed rather than reused, so the next
// request is not answered by them.
func TestBodyToAHeadIsNotTheNextAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &rawUpstream{ln: ln, answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", headBody: true}
	up.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up.wg.Go(func() { up.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); up.wg.Wait() })
	target, _ := url.Parse("http://" + ln.Addr().String())
	f := newFronts(t, target, rewriteLikeTheGateway(target))
	front := f.fast.Listener.Addr().String()
	exchange(t, front, "HEAD / HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n")
	if got := exchange(t, front, "GET / HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200 OK") || !strings.HasSuffix(got, "\r\n\r\nok") {
		t.Errorf("the GET after a HEAD answered with a body got %q", got)
	}
}

// FuzzSameRequestAsReverseProxy is TestSameRequestAsReverseProxy on
// requests the fuzzer writes: a path, a query and one more header field.
// Whatever the front's server accepts reaches the upstream the same way
// through both engines.
func FuzzSameRequestAsReverseProxy(f *testing.F) {
	f.Add("/a/b", "x=1&y=2", "X-A", "1")
	f.Add("/caf%C3%A9", "a=1;b=2", "Connection", "X-A")
	f.Add("/%2e%2e/x", "a=%zz", "Te", "trailers")
	f.Add("//x", "", "X-Forwarded-For", "1.2.3.4")
	f.Add("/", "q=%2F", "Proxy-Authorization", "x")
	up := newRawUpstream(f, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false)
	target, _ := url.Parse("http://" + up.ln.Addr().String() + "/base/")
	rewrite := rewriteLikeTheGateway(target)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: rewrite, Transport: transport, ErrorLog: discardLog})
	defer proxy.Close()
	c, err := upstream.New(upstream.Options{Target: target, Rewrite: rewrite, Wait: 10 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	defer c.CloseIdle()
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.Handles(r) {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		if err := c.Forward(w, r); err != nil {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer fast.Close()
	heads := func() int { up.mu.Lock(); defer up.mu.Unlock(); return len(up.heads) }
	f.Fuzz(func(t *testing.T, path, query, name, value string) {
		if strings.ContainsAny(path+query+name+value, "\r\n") || strings.ContainsAny(path+query, " #") || !strings.HasPrefix(path, "/") ||
			name == "" || strings.EqualFold(name, "Host") || strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Transfer-Encoding") ||
			strings.EqualFold(name, "Upgrade") || strings.EqualFold(name, "Expect") || strings.EqualFold(name, "Connection") && strings.Contains(strings.ToLower(value), "close") {
			return
		}
		raw := "GET " + path + "?" + query + " HTTP/1.1\r\nHost: HOST\r\n" + name + ": " + value + "\r\nConnection: close\r\n\r\n"
		asked := strings.EqualFold(name, "Accept-Encoding") || strings.EqualFold(name, "Range")
		n := heads()
		a := exchange(t, proxy.Listener.Addr().String(), raw)
		if heads() == n {
			// The server refused it (400), or ReverseProxy did not send it:
			// the fast front must not have sent it either.
			exchange(t, fast.Listener.Addr().String(), raw)
			if heads() != n {
				t.Fatalf("the fast engine sent a request ReverseProxy did not (%q): %q", a, up.lastHead(t))
			}
			return
		}
		want := normalHead(up.lastHead(t), asked)
		exchange(t, fast.Listener.Addr().String(), raw)
		if heads() != n+2 {
			t.Fatalf("the fast engine did not send what ReverseProxy sent:\n%s", want)
		}
		if got := normalHead(up.lastHead(t), asked); got != want {
			t.Fatalf("the upstream received\n%s\nfrom the fast engine, and from ReverseProxy\n%s", got, want)
		}
	})
}
