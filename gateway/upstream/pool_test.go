package upstream_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/gateway/upstream"
)

// The pool tests put a Client between two real servers: a front
// (httptest) whose handler forwards every request through it, so that
// Forward sees true server requests, and a scripted upstream on a raw
// listener that answers byte by byte and records what the pool did to it:
// the connections it opened, the requests sent on each, and which of them
// the client closed. Every assertion is on those records or on what the
// front's client got, never on how long something took; a wait for
// something expected is bounded by patience and fails the test past it.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// patience bounds every wait for an expected event (a request arriving, a
// connection closed): far longer than it takes on a loaded machine, and
// reached only when the behaviour is wrong.
const patience = 10 * time.Second

// scriptedUpstream is an upstream on 127.0.0.1:0 whose connections are
// each served, on their own goroutine, by the test's serve function.
type scriptedUpstream struct {
	url   *url.URL
	ln    net.Listener
	serve func(*scriptedConn)
	done  chan struct{} // closed by shutdown: a serve function waiting on the test gives up
	stop  sync.Once
	wg    sync.WaitGroup

	mu       sync.Mutex
	shut     bool
	conns    []*scriptedConn // in the order accepted
	requests []string        // "<conn> <method> <path>", in the order read
	changed  chan struct{}   // closed (and replaced) at every change of the above or of a conn's gone
}

// scriptedConn is one connection of a scriptedUpstream.
type scriptedConn struct {
	index    int // in the order accepted, from 0
	nc       net.Conn
	br       *bufio.Reader
	up       *scriptedUpstream
	gone     chan struct{} // closed once a read found the connection ended
	goneOnce sync.Once
}

func newScriptedUpstream(t *testing.T, serve func(*scriptedConn)) *scriptedUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &scriptedUpstream{
		url: &url.URL{Scheme: "http", Host: ln.Addr().String()}, ln: ln, serve: serve,
		done: make(chan struct{}), changed: make(chan struct{}),
	}
	u.wg.Go(u.accept)
	t.Cleanup(func() { u.shutdown(); u.wg.Wait() })
	return u
}

func (u *scriptedUpstream) accept() {
	for {
		nc, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		c := &scriptedConn{index: len(u.conns), nc: nc, br: bufio.NewReader(nc), up: u, gone: make(chan struct{})}
		u.conns = append(u.conns, c)
		if u.shut { // accepted as shutdown closed the others
			nc.Close()
		}
		u.changedLocked()
		u.mu.Unlock()
		u.wg.Go(func() { u.serve(c) })
	}
}

// shutdown closes the listener and every connection, and ends the waits
// of the serve functions: idempotent.
func (u *scriptedUpstream) shutdown() {
	u.stop.Do(func() {
		close(u.done)
		u.ln.Close()
		u.mu.Lock()
		u.shut = true
		for _, c := range u.conns {
			c.nc.Close()
		}
		u.mu.Unlock()
	})
}

// changedLocked wakes the waitFor calls. u.mu is held.
func (u *scriptedUpstream) changedLocked() {
	close(u.changed)
	u.changed = make(chan struct{})
}

// waitFor returns once cond holds, re-checked at each change of what the
// upstream records; it fails the test past patience.
func (u *scriptedUpstream) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(patience)
	defer deadline.Stop()
	for {
		u.mu.Lock()
		changed := u.changed
		u.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("gave up after %v waiting for %s", patience, what)
		}
	}
}

// accepted is how many connections the upstream accepted so far.
func (u *scriptedUpstream) accepted() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.conns)
}

// log is the requests read so far, as "<conn> <method> <path>".
func (u *scriptedUpstream) log() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.requests)
}

// conn is the i-th connection accepted, waited for.
func (u *scriptedUpstream) conn(t *testing.T, i int) *scriptedConn {
	t.Helper()
	u.waitFor(t, fmt.Sprintf("connection %d", i), func() bool { return u.accepted() > i })
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns[i]
}

// goneCount is how many connections were found ended.
func (u *scriptedUpstream) goneCount() int {
	u.mu.Lock()
	conns := slices.Clone(u.conns)
	u.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.isGone() {
			n++
		}
	}
	return n
}

// waitGone waits until the client closed the i-th connection.
func (u *scriptedUpstream) waitGone(t *testing.T, i int) {
	t.Helper()
	c := u.conn(t, i)
	u.waitFor(t, fmt.Sprintf("the client to close connection %d", i), c.isGone)
}

// settle returns how many connections the client had opened to the
// upstream by now, all of them accepted: it opens one itself and waits for
// the listener to accept it, and the kernel hands connections to Accept in
// the order they were established. It is how a test knows that a request
// was not sent again on a new connection: such a dial happens before
// Forward returns, but its Accept may come later.
func (u *scriptedUpstream) settle(t *testing.T) int {
	t.Helper()
	nc, err := net.Dial("tcp", u.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	marker := nc.LocalAddr().String()
	n := -1
	u.waitFor(t, "the marker connection", func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		for i, c := range u.conns {
			if c.nc.RemoteAddr().String() == marker {
				n = i
				return true
			}
		}
		return false
	})
	return n
}

// readRequest reads the next request's head (those the pool sends have
// no body) and records it; false once the connection ended.
func (c *scriptedConn) readRequest() (*http.Request, bool) {
	r, err := http.ReadRequest(c.br)
	if err != nil {
		c.markGone()
		return nil, false
	}
	c.up.mu.Lock()
	c.up.requests = append(c.up.requests, fmt.Sprintf("%d %s %s", c.index, r.Method, r.URL.Path))
	c.up.changedLocked()
	c.up.mu.Unlock()
	return r, true
}

// send writes raw bytes; false when the connection is no longer writable.
func (c *scriptedConn) send(raw string) bool {
	_, err := io.WriteString(c.nc, raw)
	return err == nil
}

// drain reads until the connection ends, as an upstream that never
// answers does, and marks it gone.
func (c *scriptedConn) drain() {
	_, _ = io.Copy(io.Discard, c.br)
	c.markGone()
}

// watch drains in the background, for a serve function busy writing.
func (c *scriptedConn) watch() { c.up.wg.Go(c.drain) }

func (c *scriptedConn) markGone() {
	c.goneOnce.Do(func() {
		close(c.gone)
		c.up.mu.Lock()
		c.up.changedLocked()
		c.up.mu.Unlock()
	})
}

func (c *scriptedConn) isGone() bool {
	select {
	case <-c.gone:
		return true
	default:
		return false
	}
}

// answering serves each request on its connection with what answer
// returns for it, until the connection ends.
func answering(answer func(c *scriptedConn, r *http.Request) string) func(*scriptedConn) {
	return func(c *scriptedConn) {
		for {
			r, ok := c.readRequest()
			if !ok || !c.send(answer(c, r)) {
				return
			}
		}
	}
}

// answerOK is a keep-alive 200 whose body is the request's path, so that
// each answer says which request it is for.
func answerOK(_ *scriptedConn, r *http.Request) string { return respond(r, "HTTP/1.1 200 OK\r\n") }

// respond completes head (a status line and any fields) with a
// Content-Length and the request's path as body (no body to a HEAD).
func respond(r *http.Request, head string) string {
	body := r.URL.Path
	raw := head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if r.Method != http.MethodHead {
		raw += body
	}
	return raw
}

// rendezvous holds requests at the upstream until n of them are waiting,
// then lets all of them go: n connections are then in use at once.
type rendezvous struct {
	mu      sync.Mutex
	n       int
	waiting int
	open    chan struct{}
}

func newRendezvous(n int) *rendezvous { return &rendezvous{n: n, open: make(chan struct{})} }

func (rv *rendezvous) arrive(done <-chan struct{}) {
	rv.mu.Lock()
	open := rv.open
	rv.waiting++
	if rv.waiting == rv.n {
		close(rv.open)
		rv.open, rv.waiting = make(chan struct{}), 0
	}
	rv.mu.Unlock()
	select {
	case <-open:
	case <-done:
	}
}

// proxyFront is the front server: its handler forwards every request
// through client, answering 502 (and recording the error) when Forward
// fails.
type proxyFront struct {
	client *upstream.Client
	srv    *httptest.Server

	mu   sync.Mutex
	errs []error
}

func newProxyFront(t *testing.T, c *upstream.Client) *proxyFront {
	t.Helper()
	f := &proxyFront{client: c}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.Forward(w, r); err != nil {
			f.mu.Lock()
			f.errs = append(f.errs, err)
			f.mu.Unlock()
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	t.Cleanup(func() { f.srv.Close(); c.CloseIdle() })
	return f
}

// newClient is upstream.New with the gateway's Rewrite and, unless opts
// set it, a Wait no passing test reaches.
func newClient(t *testing.T, opts upstream.Options) *upstream.Client {
	t.Helper()
	target := opts.Target
	if opts.Rewrite == nil {
		opts.Rewrite = func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() }
	}
	if opts.Wait == 0 {
		opts.Wait = patience
	}
	c, err := upstream.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newPool is the usual setup: a scripted upstream served by serve, a
// Client to it with opts, and the front.
func newPool(t *testing.T, opts upstream.Options, serve func(*scriptedConn)) (*scriptedUpstream, *proxyFront) {
	t.Helper()
	up := newScriptedUpstream(t, serve)
	opts.Target = up.url
	f := newProxyFront(t, newClient(t, opts))
	// Run first at cleanup: a handler still waiting on the upstream (the
	// test failed) ends, so that closing the front does not wait for it.
	t.Cleanup(up.shutdown)
	return up, f
}

// reply is what the front's client got.
type reply struct {
	status int
	header http.Header
	body   string
}

func (f *proxyFront) request(t *testing.T, method, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func (f *proxyFront) fetch(req *http.Request) (reply, error) {
	res, err := f.srv.Client().Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header, string(body)}, err
}

// get sends method path through the front and returns the reply.
func (f *proxyFront) get(t *testing.T, method, path string) reply {
	t.Helper()
	r, err := f.fetch(f.request(t, method, path))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// wantOK fails the test unless GET path is answered 200 with its path.
func (f *proxyFront) wantOK(t *testing.T, path string) {
	t.Helper()
	if r := f.get(t, http.MethodGet, path); r.status != http.StatusOK || r.body != path {
		t.Fatalf("GET %s: %d %q, want 200 %q", path, r.status, r.body, path)
	}
}

// wantOKAtOnce sends a GET of every path at the same time and fails the
// test unless each is answered 200 with its path.
func (f *proxyFront) wantOKAtOnce(t *testing.T, paths ...string) {
	t.Helper()
	errs := make(chan error, len(paths))
	for _, p := range paths {
		req := f.request(t, http.MethodGet, p)
		go func() {
			r, err := f.fetch(req)
			if err == nil && (r.status != http.StatusOK || r.body != p) {
				err = fmt.Errorf("GET %s: %d %q, want 200 %q", p, r.status, r.body, p)
			}
			errs <- err
		}()
	}
	for range paths {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// lastError is the last error Forward returned.
func (f *proxyFront) lastError(t *testing.T) error {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) == 0 {
		t.Fatal("Forward returned no error")
	}
	return f.errs[len(f.errs)-1]
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isDial(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func wantLog(t *testing.T, up *scriptedUpstream, want ...string) {
	t.Helper()
	if got := up.log(); !slices.Equal(got, want) {
		t.Errorf("the upstream read %q, want %q", got, want)
	}
}

func wantAccepted(t *testing.T, up *scriptedUpstream, want int) {
	t.Helper()
	if got := up.accepted(); got != want {
		t.Errorf("the upstream accepted %d connections, want %d", got, want)
	}
}

// TestReusesOneConnection: sequential requests all go over the one
// connection the first opened.
func TestReusesOneConnection(t *testing.T) {
	t.Parallel()
	up, f := newPool(t, upstream.Options{}, answering(answerOK))
	for i := range 20 {
		f.wantOK(t, fmt.Sprintf("/%d", i))
	}
	wantAccepted(t, up, 1)
	if got := len(up.log()); got != 20 {
		t.Errorf("the upstream read %d requests, want 20", got)
	}
}

// TestAnswerEndingTheConnectionIsNotReused: an answer saying the
// connection ends (Connection: close, or HTTP/1.0 without keep-alive)
// leaves it closed by the client, and the next request opens another.
// The upstream goes on serving it regardless, so that a client reusing it
// would be answered and caught; the keep-alive answers are the controls.
func TestAnswerEndingTheConnectionIsNotReused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, head string
		wantConns  int
	}{
		{"HTTP/1.1", "HTTP/1.1 200 OK\r\n", 1},
		{"HTTP/1.1 Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\n", 2},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\n", 2},
		{"HTTP/1.0 Connection: keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, f := newPool(t, upstream.Options{}, answering(func(_ *scriptedConn, r *http.Request) string {
				return respond(r, tc.head)
			}))
			f.wantOK(t, "/first")
			f.wantOK(t, "/second")
			wantAccepted(t, up, tc.wantConns)
			if tc.wantConns == 2 {
				up.waitGone(t, 0)
				wantLog(t, up, "0 GET /first", "1 GET /second")
			}
		})
	}
}

// TestRetriesOnceWhenIdleConnectionWasClosed: the upstream closes a
// connection the pool holds, after answering on it with keep-alive; the
// next request fails on it without an answer, and goes again, once, on a
// new connection. An answer cut short is not retried (the control: the
// upstream may have acted on the request).
func TestRetriesOnceWhenIdleConnectionWasClosed(t *testing.T) {
	t.Parallel()
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			closeIdle, closed := make(chan struct{}), make(chan struct{})
			up, f := newPool(t, upstream.Options{}, func(c *scriptedConn) {
				if c.index > 0 {
					answering(answerOK)(c)
					return
				}
				r, ok := c.readRequest()
				if !ok || !c.send(answerOK(c, r)) {
					return
				}
				select { // the answer is read and the connection pooled
				case <-closeIdle:
				case <-c.up.done:
				}
				c.nc.Close()
				close(closed)
			})
			f.wantOK(t, "/first")
			close(closeIdle)
			select {
			case <-closed:
			case <-time.After(patience):
				t.Fatal("the upstream did not close its idle connection")
			}
			want := "/second"
			if method == http.MethodHead {
				want = ""
			}
			if r := f.get(t, method, "/second"); r.status != http.StatusOK || r.body != want {
				t.Fatalf("%s /second: %d %q, want 200 %q", method, r.status, r.body, want)
			}
			wantAccepted(t, up, 2)
			wantLog(t, up, "0 GET /first", "1 "+method+" /second")
		})
	}
	t.Run("answer cut short", func(t *testing.T) {
		t.Parallel()
		up, f := newPool(t, upstream.Options{}, func(c *scriptedConn) {
			if c.index > 0 {
				answering(answerOK)(c) // a retry would be answered here
				return
			}
			r, ok := c.readRequest()
			if !ok || !c.send(answerOK(c, r)) {
				return
			}
			if _, ok := c.readRequest(); ok {
				c.send("HTTP/1.1 200 OK\r\nContent-Le")
			}
			c.nc.Close()
		})
		f.wantOK(t, "/first")
		if r := f.get(t, http.MethodGet, "/second"); r.status != http.StatusBadGateway {
			t.Fatalf("GET /second: %d %q, want 502", r.status, r.body)
		}
		if n := up.settle(t); n != 1 {
			t.Errorf("the client opened %d connections, want 1 (no retry)", n)
		}
		wantLog(t, up, "0 GET /first", "0 GET /second")
	})
}

// TestIdleConnectionAnswered408IsNotUsed: some servers, closing a
// connection idle for too long, first send "408 Request Timeout" on it
// (http.Transport recognises it and discards the connection). That answer
// was asked by no request: the next request must not get it, but its own
// answer, on a new connection. The negative control, a client that reuses
// idle connections without the check, hands the 408 to the next request.
func TestIdleConnectionAnswered408IsNotUsed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		unchecked bool
		wantOK    bool
	}{{"checked", false, true}, {"not checked (control)", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			timedOut, closed := make(chan struct{}), make(chan struct{})
			up, f := newPool(t, upstream.Options{}, func(c *scriptedConn) {
				if c.index > 0 {
					answering(answerOK)(c)
					return
				}
				r, ok := c.readRequest()
				if !ok || !c.send(answerOK(c, r)) {
					return
				}
				select { // the answer is read and the connection pooled
				case <-timedOut:
				case <-c.up.done:
				}
				c.send("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
				c.nc.Close()
				close(closed)
			})
			if tc.unchecked {
				upstream.SkipIdleCheck(f.client)
			}
			f.wantOK(t, "/first")
			close(timedOut)
			select {
			case <-closed:
			case <-time.After(patience):
				t.Fatal("the upstream did not close its idle connection")
			}
			r := f.get(t, http.MethodGet, "/second")
			if !tc.wantOK {
				if r.status != http.StatusRequestTimeout {
					t.Fatalf("GET /second without the check: %d %q, want the 408 sent to no request", r.status, r.body)
				}
				return
			}
			if r.status != http.StatusOK || r.body != "/second" {
				t.Fatalf("GET /second: %d %q, want 200 %q (the 408 was sent before it, to no request)", r.status, r.body, "/second")
			}
			wantLog(t, up, "0 GET /first", "1 GET /second")
		})
	}
}

// TestTimeoutIsNotRetried: an upstream that reads the request and never
// answers makes Forward fail, past Wait, with a timeout (not a dial
// error), and the request is not sent again, whether its connection was
// new or reused.
func TestTimeoutIsNotRetried(t *testing.T) {
	t.Parallel()
	stallOn := func(c *scriptedConn) {
		for {
			r, ok := c.readRequest()
			if !ok {
				return
			}
			if r.URL.Path == "/stall" {
				c.drain()
				return
			}
			if !c.send(answerOK(c, r)) {
				return
			}
		}
	}
	for _, tc := range []struct {
		name   string
		before []string // answered first, on the same connection
	}{
		{"new connection", nil},
		{"reused connection", []string{"/ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, f := newPool(t, upstream.Options{Wait: 200 * time.Millisecond}, stallOn)
			var want []string
			for _, p := range tc.before {
				f.wantOK(t, p)
				want = append(want, "0 GET "+p)
			}
			if r := f.get(t, http.MethodGet, "/stall"); r.status != http.StatusBadGateway {
				t.Fatalf("GET /stall: %d, want 502", r.status)
			}
			err := f.lastError(t)
			if !isTimeout(err) || isDial(err) {
				t.Errorf("Forward: %v (%T), want a timeout net.Error that is not a dial error", err, err)
			}
			if n := up.settle(t); n != 1 {
				t.Errorf("the client opened %d connections, want 1 (no retry)", n)
			}
			up.waitGone(t, 0)
			wantLog(t, up, append(want, "0 GET /stall")...)
		})
	}
}

// TestDialFailure: an upstream nobody listens on makes Forward fail with
// a *net.OpError whose Op is "dial".
func TestDialFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	ln.Close()
	f := newProxyFront(t, newClient(t, upstream.Options{Target: target}))
	if r := f.get(t, http.MethodGet, "/"); r.status != http.StatusBadGateway {
		t.Fatalf("GET /: %d, want 502", r.status)
	}
	if err := f.lastError(t); !isDial(err) || isTimeout(err) {
		t.Errorf("Forward: %v (%T), want a *net.OpError with Op \"dial\"", err, err)
	}
}

// TestHeadTooLarge: an answer whose head exceeds MaxHeaderBytes fails
// (502) and its connection is closed; one under it passes, fields intact.
func TestHeadTooLarge(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("a", 10<<10)
	fits := strings.Repeat("a", 3<<10)
	var many strings.Builder // 10 KiB in ten fields, none too large alone
	for i := range 10 {
		fmt.Fprintf(&many, "X-Many-%d: %s\r\n", i, strings.Repeat("a", 1<<10))
	}
	up, f := newPool(t, upstream.Options{MaxHeaderBytes: 4 << 10}, answering(func(_ *scriptedConn, r *http.Request) string {
		switch r.URL.Path {
		case "/big":
			return respond(r, "HTTP/1.1 200 OK\r\nX-Big: "+big+"\r\n")
		case "/many":
			return respond(r, "HTTP/1.1 200 OK\r\n"+many.String())
		default:
			return respond(r, "HTTP/1.1 200 OK\r\nX-Big: "+fits+"\r\n")
		}
	}))
	if r := f.get(t, http.MethodGet, "/fits"); r.status != http.StatusOK || r.body != "/fits" || r.header.Get("X-Big") != fits {
		t.Fatalf("GET /fits: %d %q, X-Big of %d bytes; want 200 with all %d", r.status, r.body, len(r.header.Get("X-Big")), len(fits))
	}
	for i, path := range []string{"/big", "/many"} {
		if r := f.get(t, http.MethodGet, path); r.status != http.StatusBadGateway {
			t.Errorf("GET %s: %d, want 502", path, r.status)
		}
		up.waitGone(t, i)
	}
	f.wantOK(t, "/fits")
	wantAccepted(t, up, 3)
}

// TestSwitchingProtocolsRefused: a 101 to a request that asked for no
// upgrade fails (502), and its connection is not used again. The upstream
// goes on serving it, so that reusing it would be caught.
func TestSwitchingProtocolsRefused(t *testing.T) {
	t.Parallel()
	up, f := newPool(t, upstream.Options{}, answering(func(_ *scriptedConn, r *http.Request) string {
		if r.URL.Path == "/upgrade" {
			return "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
		}
		return answerOK(nil, r)
	}))
	if r := f.get(t, http.MethodGet, "/upgrade"); r.status != http.StatusBadGateway {
		t.Fatalf("GET /upgrade: %d, want 502", r.status)
	}
	up.waitGone(t, 0)
	f.wantOK(t, "/after")
	wantAccepted(t, up, 2)
	wantLog(t, up, "0 GET /upgrade", "1 GET /after")
}

// TestInformationalAnswers: the upstream's 1xx answers before its final
// one reach the client as 1xx answers (100 too, as httputil.ReverseProxy
// forwards it: RFC 9110 15.2), their fields not kept for the final
// answer; five pass, a sixth fails the exchange.
func TestInformationalAnswers(t *testing.T) {
	t.Parallel()
	hint := "HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
	for _, tc := range []struct {
		name       string
		before     string // sent before a 200
		wantStatus int
		want1xx    []string // "<code> <Link>", as the client saw them
	}{
		{"103", hint, 200, []string{"103 </a>; rel=preload"}},
		{"100", "HTTP/1.1 100 Continue\r\n\r\n", 200, []string{"100 "}},
		{"five", strings.Repeat(hint, 5), 200, slices.Repeat([]string{"103 </a>; rel=preload"}, 5)},
		{"six", strings.Repeat(hint, 6), 502, slices.Repeat([]string{"103 </a>; rel=preload"}, 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, f := newPool(t, upstream.Options{}, answering(func(_ *scriptedConn, r *http.Request) string {
				return tc.before + answerOK(nil, r)
			}))
			var mu sync.Mutex
			var got1xx []string
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				mu.Lock()
				defer mu.Unlock()
				got1xx = append(got1xx, fmt.Sprintf("%d %s", code, h.Get("Link")))
				return nil
			}}
			req := f.request(t, http.MethodGet, "/hinted")
			r, err := f.fetch(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
			if err != nil {
				t.Fatal(err)
			}
			if r.status != tc.wantStatus || tc.wantStatus == 200 && r.body != "/hinted" {
				t.Errorf("GET /hinted: %d %q, want %d", r.status, r.body, tc.wantStatus)
			}
			if link := r.header.Get("Link"); link != "" {
				t.Errorf("the final answer has Link %q, sent only with a 1xx", link)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got1xx, tc.want1xx) {
				t.Errorf("the client got the 1xx answers %q, want %q", got1xx, tc.want1xx)
			}
		})
	}
}

// TestClientGoneMidBodyClosesUpstream: the client closes its connection
// while an endless body streams to it; the upstream connection is closed
// (and no goroutine is left: TestMain).
func TestClientGoneMidBodyClosesUpstream(t *testing.T) {
	t.Parallel()
	up, f := newPool(t, upstream.Options{}, func(c *scriptedConn) {
		if _, ok := c.readRequest(); !ok {
			return
		}
		if !c.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") {
			return
		}
		c.watch()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for c.send("5\r\nchunk\r\n") {
			select {
			case <-tick.C:
			case <-c.gone:
				return
			}
		}
	})
	nc, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(patience))
	if _, err := io.WriteString(nc, "GET /stream HTTP/1.1\r\nHost: front\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 5)
	if _, err := io.ReadFull(res.Body, chunk); err != nil || string(chunk) != "chunk" {
		t.Fatalf("the first chunk: %q, %v", chunk, err)
	}
	if up.conn(t, 0).isGone() {
		t.Fatal("the upstream connection was closed while the client was reading")
	}
	nc.Close()
	up.waitGone(t, 0)
}

// TestClientCancelWhileWaitingForHead: the client gives up on a request
// the upstream holds without answering, long before Wait; the request's
// context ending interrupts the exchange and closes the upstream
// connection.
func TestClientCancelWhileWaitingForHead(t *testing.T) {
	t.Parallel()
	up, f := newPool(t, upstream.Options{Wait: 30 * time.Second}, func(c *scriptedConn) {
		if _, ok := c.readRequest(); ok {
			c.drain()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := f.request(t, http.MethodGet, "/held").WithContext(ctx)
	fetched := make(chan error, 1)
	go func() {
		_, err := f.fetch(req)
		fetched <- err
	}()
	up.waitFor(t, "the request to reach the upstream", func() bool { return len(up.log()) == 1 })
	if up.conn(t, 0).isGone() {
		t.Fatal("the upstream connection was closed before the client gave up")
	}
	cancel()
	select {
	case err := <-fetched:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the client's request: %v, want context.Canceled", err)
		}
	case <-time.After(patience):
		t.Fatal("the client's request did not end when canceled")
	}
	up.waitGone(t, 0)
}

// TestCloseIdle: CloseIdle closes the pooled connections; a request after
// it is forwarded on a new connection, closed after its answer.
func TestCloseIdle(t *testing.T) {
	t.Parallel()
	two := newRendezvous(2)
	up, f := newPool(t, upstream.Options{}, answering(func(c *scriptedConn, r *http.Request) string {
		if strings.HasPrefix(r.URL.Path, "/two/") {
			two.arrive(c.up.done)
		}
		return answerOK(c, r)
	}))
	f.wantOKAtOnce(t, "/two/a", "/two/b")
	wantAccepted(t, up, 2)
	if up.goneCount() != 0 {
		t.Fatal("a pooled connection was closed before CloseIdle")
	}
	f.client.CloseIdle()
	up.waitGone(t, 0)
	up.waitGone(t, 1)
	f.wantOK(t, "/after")
	wantAccepted(t, up, 3)
	up.waitGone(t, 2)
}

// TestIdleTimeout: a connection idle for longer than IdleTimeout is
// closed rather than used; under the default (90 s) it is used.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		idle      time.Duration
		wantConns int
	}{
		{"expired", 50 * time.Millisecond, 2},
		{"default", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, f := newPool(t, upstream.Options{IdleTimeout: tc.idle}, answering(answerOK))
			f.wantOK(t, "/first")
			time.Sleep(150 * time.Millisecond) // three of the short IdleTimeout
			f.wantOK(t, "/second")
			wantAccepted(t, up, tc.wantConns)
			if tc.wantConns == 2 {
				up.waitGone(t, 0)
			}
		})
	}
}

// TestIdleTimeoutAppliesToEveryIdleConnection: of two pooled connections,
// the one left idle is closed once idle past IdleTimeout, although
// requests keep coming over the other (the most recently used).
func TestIdleTimeoutAppliesToEveryIdleConnection(t *testing.T) {
	t.Parallel()
	const idle = 100 * time.Millisecond
	two := newRendezvous(2)
	up, f := newPool(t, upstream.Options{IdleTimeout: idle}, answering(func(c *scriptedConn, r *http.Request) string {
		if strings.HasPrefix(r.URL.Path, "/two/") {
			two.arrive(c.up.done)
		}
		return answerOK(c, r)
	}))
	f.wantOKAtOnce(t, "/two/a", "/two/b")
	for start := time.Now(); time.Since(start) < 5*idle; {
		f.wantOK(t, "/next") // well within idle of the one before
		time.Sleep(idle / 5)
	}
	a, b := up.conn(t, 0), up.conn(t, 1)
	up.waitFor(t, "the connection left idle to be closed", func() bool { return a.isGone() || b.isGone() })
	wantAccepted(t, up, 2)
}

// TestMaxIdle: of five connections in use at once, MaxIdle (2) are kept
// when their answers are done, the others closed; the next two requests
// at once use the two kept.
func TestMaxIdle(t *testing.T) {
	t.Parallel()
	five, two := newRendezvous(5), newRendezvous(2)
	up, f := newPool(t, upstream.Options{MaxIdle: 2}, answering(func(c *scriptedConn, r *http.Request) string {
		switch {
		case strings.HasPrefix(r.URL.Path, "/five/"):
			five.arrive(c.up.done)
		case strings.HasPrefix(r.URL.Path, "/two/"):
			two.arrive(c.up.done)
		}
		return answerOK(c, r)
	}))
	f.wantOKAtOnce(t, "/five/a", "/five/b", "/five/c", "/five/d", "/five/e")
	wantAccepted(t, up, 5)
	up.waitFor(t, "three connections closed", func() bool { return up.goneCount() >= 3 })
	f.wantOKAtOnce(t, "/two/a", "/two/b")
	wantAccepted(t, up, 5)
	if n := up.goneCount(); n != 3 {
		t.Errorf("%d connections closed, want 3", n)
	}
}

// TestHandles: Forward takes the requests without a body whose method
// may be sent again, asking for no upgrade and no 100-continue.
func TestHandles(t *testing.T) {
	t.Parallel()
	target := &url.URL{Scheme: "http", Host: "127.0.0.1:1"}
	c := newClient(t, upstream.Options{Target: target})
	for _, tc := range []struct {
		raw  string // as a client sends it, parsed by net/http's server parser
		want bool
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true},
		{"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", true},
		{"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", true},
		{"TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", true},
		{"GET / HTTP/1.0\r\n\r\n", true},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false},
		{"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false},
		{"DELETE / HTTP/1.1\r\nHost: a\r\n\r\n", false},
		{"PATCH / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false},
		{"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", false},
		{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n", false},
	} {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tc.raw)))
		if err != nil {
			t.Fatalf("%q: %v", tc.raw, err)
		}
		if got := c.Handles(r); got != tc.want {
			t.Errorf("Handles(%q) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

// TestNewRefusesBadOptions: New names the option at fault; valid options
// (the control) pass.
func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	valid := func() upstream.Options {
		target := &url.URL{Scheme: "http", Host: "127.0.0.1:8080"}
		return upstream.Options{
			Target:  target,
			Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
			Wait:    time.Second,
		}
	}
	for _, tc := range []struct {
		name    string
		change  func(*upstream.Options)
		wantErr string // "" when New must succeed
	}{
		{"valid", func(*upstream.Options) {}, ""},
		{"nil Target", func(o *upstream.Options) { o.Target = nil }, "Target"},
		{"https Target", func(o *upstream.Options) { o.Target = &url.URL{Scheme: "https", Host: "a:443"} }, "Target"},
		{"Target without host", func(o *upstream.Options) { o.Target = &url.URL{Scheme: "http", Path: "/a"} }, "Target"},
		{"nil Rewrite", func(o *upstream.Options) { o.Rewrite = nil }, "Rewrite"},
		{"zero Wait", func(o *upstream.Options) { o.Wait = 0 }, "Wait"},
		{"negative Wait", func(o *upstream.Options) { o.Wait = -time.Second }, "Wait"},
	} {
		opts := valid()
		tc.change(&opts)
		c, err := upstream.New(opts)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: New: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: New: %v, want an error naming %s", tc.name, err, tc.wantErr)
		case tc.wantErr != "" && c != nil:
			t.Errorf("%s: New returned a Client with its error", tc.name)
		}
	}
}
