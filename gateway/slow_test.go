package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway/config"
)

// The bounds of the tests' server: section, small so that each test runs
// in a few seconds, and the slack a close may take past its bound on a
// shared machine under -race.
const (
	headerBound = 300 * time.Millisecond
	readBound   = 600 * time.Millisecond
	writeBound  = time.Second
	idleBound   = 500 * time.Millisecond
	maxBody     = 1024
	slack       = time.Second
)

// slowConfig is a gateway whose /shut/ rule has spent its one request an
// hour (so that it answers 429) and whose other paths are allowed; extra
// goes into its server: section.
func slowConfig(extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
server: {read_header_timeout: %v, read_timeout: %v, write_timeout: %v, idle_timeout: %v, max_body_bytes: %d%s}
limits:
  - {name: one, quota: 1, window: 1h}
  - {name: many, quota: 100000, window: 1m}
rules:
  - {name: shut, match: {path: /shut/}, quotas: [{limit: one, key: global}]}
  - {name: open, match: {path: /}, quotas: [{limit: many, key: ip}]}
`, headerBound, readBound, writeBound, idleBound, maxBody, extra)
}

// conns records what the gateway's public server does with each
// connection (by the client's address): when it accepted and closed it,
// and how many it held at most at once.
type conns struct {
	mu             sync.Mutex
	opened, closed map[string]time.Time
	active, most   int
}

func (c *conns) track(nc net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := nc.RemoteAddr().String()
	switch s {
	case http.StateNew:
		c.opened[addr] = time.Now()
		c.active++
		c.most = max(c.most, c.active)
	case http.StateClosed, http.StateHijacked:
		c.closed[addr] = time.Now()
		c.active--
	}
}

// closedAt waits (until deadline) for the gateway to close the connection
// of the client at addr.
func (c *conns) closedAt(addr string, deadline time.Time) (time.Time, bool) {
	for {
		c.mu.Lock()
		at, ok := c.closed[addr]
		c.mu.Unlock()
		if ok {
			return at, true
		}
		if time.Now().After(deadline) {
			return time.Now(), false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runSlow starts a gateway of the configuration in front of upstream and
// stops it at the end of the test; it records the public server's
// connections.
func runSlow(t *testing.T, yaml, upstream string, log *slog.Logger) (*Gateway, *conns) {
	t.Helper()
	cfg, err := config.Parse("slow.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Config: cfg, Upstream: upstream, Logger: log, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs := &conns{opened: map[string]time.Time{}, closed: map[string]time.Time{}}
	g.public.ConnState = cs.track
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return g, cs
}

// dial opens a raw connection to the gateway, closed at the end of the
// test.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// trickle writes one byte of b to c every interval, from a goroutine that
// ends with the test or at the first failed write.
func trickle(t *testing.T, c net.Conn, b []byte, every time.Duration) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write(b[i%len(b) : i%len(b)+1]); err != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// readToClose reads c until the gateway closes it (EOF, or a reset),
// giving up at deadline; it returns what it read, when the read ended and
// whether it ended on a close.
func readToClose(c net.Conn, deadline time.Time) ([]byte, time.Time, bool) {
	c.SetReadDeadline(deadline)
	var got bytes.Buffer
	_, err := io.Copy(&got, c)
	return got.Bytes(), time.Now(), !errors.Is(err, os.ErrDeadlineExceeded)
}

// checkBound fails the test unless a close at `at` came within bound of
// start (plus the slack), and not before it.
func checkBound(t *testing.T, what string, start, at time.Time, closed bool, bound time.Duration) {
	t.Helper()
	switch took := at.Sub(start); {
	case !closed:
		t.Errorf("%s: still open %v after it started (bound %v + slack %v)", what, took.Round(time.Millisecond), bound, slack)
	case took < bound:
		t.Errorf("%s: closed after %v, before its bound %v", what, took.Round(time.Millisecond), bound)
	case took > bound+slack:
		t.Errorf("%s: closed after %v, later than its bound %v + slack %v", what, took.Round(time.Millisecond), bound, slack)
	}
}

// slowUpstream answers /big with 64 MiB, and the rest with "ok" once it
// has read the whole body.
func slowUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			w.Header().Set("Content-Length", fmt.Sprint(1024*len(chunk)))
			for range 1024 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	return up
}

// The probe's attack, with real slow sockets: clients that trickle their
// headers (slowloris), trickle a body to a rule that answers 429 or to
// the upstream, keep a connection idle after an answer, or never read a
// large answer. Each connection is closed within its configured bound
// (and not before it), while a normal request answers 200.
func TestSlowClientsAreClosedInBound(t *testing.T) {
	up := slowUpstream(t)
	g, cs := runSlow(t, slowConfig(""), up.URL, nil)
	if r, err := http.Get("http://" + g.Addr() + "/shut/spend"); err != nil {
		t.Fatal(err)
	} else {
		r.Body.Close() // the rule's one request: from here on it answers 429
	}
	type attack struct {
		name  string
		bound time.Duration
		// send writes the attack to c; the bound counts from the moment
		// before the connection was dialled.
		send func(t *testing.T, c net.Conn)
		// want is the start of what the gateway answers before it
		// closes ("" when it answers nothing).
		want string
		// reader: the client never reads; the close is seen on the
		// gateway's side, then the client drains to EOF.
		reader bool
	}
	const each = 5
	attacks := []attack{
		{name: "slow headers", bound: headerBound, send: func(t *testing.T, c net.Conn) {
			io.WriteString(c, "GET /api HTTP/1.1\r\nHost: gw\r\n")
			trickle(t, c, []byte("X-Slow: yes\r\n"), 100*time.Millisecond)
		}},
		{name: "slow body to a 429", bound: readBound, want: "HTTP/1.1 429", send: func(t *testing.T, c net.Conn) {
			io.WriteString(c, "POST /shut/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n")
			trickle(t, c, []byte("b"), 200*time.Millisecond)
		}},
		{name: "slow body to the upstream", bound: readBound, want: "HTTP/1.1 408", send: func(t *testing.T, c net.Conn) {
			io.WriteString(c, "POST /up HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n")
			trickle(t, c, []byte("b"), 200*time.Millisecond)
		}},
		{name: "idle after an answer", bound: idleBound, want: "HTTP/1.1 200", send: func(t *testing.T, c net.Conn) {
			io.WriteString(c, "GET /up HTTP/1.1\r\nHost: gw\r\n\r\n")
		}},
		{name: "never reads a large answer", bound: writeBound, reader: true, send: func(t *testing.T, c net.Conn) {
			io.WriteString(c, "GET /big HTTP/1.1\r\nHost: gw\r\n\r\n")
		}},
	}
	var wg, ready sync.WaitGroup
	for _, a := range attacks {
		for i := range each {
			start := time.Now()
			c := dial(t, g.Addr())
			ready.Add(1)
			wg.Go(func() {
				a.send(t, c)
				ready.Done()
				what := fmt.Sprintf("%s #%d", a.name, i)
				deadline := start.Add(a.bound + slack)
				if a.reader {
					at, closed := cs.closedAt(c.LocalAddr().String(), deadline)
					checkBound(t, what, start, at, closed, a.bound)
					got, _, closed := readToClose(c, time.Now().Add(5*time.Second))
					if !closed || len(got) >= 64<<20 {
						t.Errorf("%s: the client read %d bytes, closed %v: want the answer cut short", what, len(got), closed)
					}
					return
				}
				got, at, closed := readToClose(c, deadline)
				checkBound(t, what, start, at, closed, a.bound)
				if !bytes.HasPrefix(got, []byte(a.want)) {
					t.Errorf("%s: the gateway answered %q, want %q…", what, firstLine(got), a.want)
				}
			})
		}
	}
	ready.Wait()
	// During the attack, a normal client is served.
	r, err := http.Post("http://"+g.Addr()+"/up", "text/plain", strings.NewReader("a normal body"))
	if err != nil {
		t.Fatalf("a normal request during the attack: %v", err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || string(b) != "ok" {
		t.Errorf("a normal request during the attack: %d %q, want 200 ok", r.StatusCode, b)
	}
	wg.Wait()
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	return string(line)
}

// With max_connections N and N clients that send nothing, the gateway
// holds N connections at most: the next client waits in the listener's
// backlog until the header timeout has closed an attacker, and is then
// served.
func TestConnectionCapIsFreedByTimeouts(t *testing.T) {
	up := slowUpstream(t)
	const n = 3
	g, cs := runSlow(t, slowConfig(fmt.Sprintf(", max_connections: %d", n)), up.URL, nil)
	var attackers []net.Conn
	start := time.Now()
	for range n {
		attackers = append(attackers, dial(t, g.Addr()))
	}
	// The gateway has accepted all n before the normal client comes.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cs.mu.Lock()
		active := cs.active
		cs.mu.Unlock()
		if active == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway accepted %d of the %d attackers", active, n)
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	r, err := client.Get("http://" + g.Addr() + "/up")
	if err != nil {
		t.Fatalf("the normal client: %v", err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Errorf("the normal client: %d, want 200", r.StatusCode)
	}
	for i, c := range attackers {
		_, at, closed := readToClose(c, start.Add(headerBound+slack))
		checkBound(t, fmt.Sprintf("attacker %d", i), start, at, closed, headerBound)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.most > n {
		t.Errorf("the gateway held %d connections at once, over max_connections %d", cs.most, n)
	}
	first := time.Time{}
	for _, c := range attackers {
		if at, ok := cs.closed[c.LocalAddr().String()]; ok && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	normal := time.Time{}
	for addr, at := range cs.opened {
		if !isAttacker(addr, attackers) {
			normal = at
		}
	}
	if normal.Before(first) {
		t.Errorf("the normal client was accepted %v before a slot was freed", first.Sub(normal))
	}
}

func isAttacker(addr string, cs []net.Conn) bool {
	for _, c := range cs {
		if c.LocalAddr().String() == addr {
			return true
		}
	}
	return false
}

// A body over max_body_bytes is refused with 413 and a JSON reason: before
// the upstream is called when its Content-Length says so, and with 413
// (not 502) when a chunked body crosses the bound on its way to the
// upstream. A body of exactly the bound reaches the upstream whole.
func TestBodyOverTheMaximum(t *testing.T) {
	var mu sync.Mutex
	var hits []int
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		mu.Lock()
		hits = append(hits, len(b))
		mu.Unlock()
		if err == nil {
			fmt.Fprint(w, len(b))
		}
	}))
	t.Cleanup(up.Close)
	g, _ := runSlow(t, slowConfig(""), up.URL, nil)
	post := func(body io.Reader, length int64) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+g.Addr()+"/up", body)
		req.ContentLength = length
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	const want = `{"error":"body_too_large","reason":"a request body is at most 1024 bytes (server.max_body_bytes)","retryable":false}`
	if code, body := post(bytes.NewReader(make([]byte, maxBody+1)), maxBody+1); code != 413 || strings.TrimSpace(body) != want {
		t.Errorf("Content-Length %d: %d %s, want 413 %s", maxBody+1, code, body, want)
	}
	mu.Lock()
	if len(hits) != 0 {
		t.Errorf("the upstream was called for a Content-Length over the bound: %v", hits)
	}
	mu.Unlock()
	chunked := io.MultiReader(bytes.NewReader(make([]byte, maxBody)), strings.NewReader("one byte too many"))
	if code, body := post(chunked, -1); code != 413 || strings.TrimSpace(body) != want {
		t.Errorf("a chunked body over the bound: %d %s, want 413 %s", code, body, want)
	}
	if code, body := post(io.MultiReader(bytes.NewReader(make([]byte, maxBody))), -1); code != 200 || body != fmt.Sprint(maxBody) {
		t.Errorf("a chunked body of the bound: %d %s, want 200 %d", code, body, maxBody)
	}
	if series := `sluice_requests_refused_total{reason="body_too_large"} 2`; !strings.Contains(scrape(t, g), series+"\n") {
		t.Errorf("the two 413s are not counted as refused: no %s in /metrics", series)
	}
}

// scrape is the gateway's /metrics.
func scrape(t *testing.T, g *Gateway) string {
	t.Helper()
	r, err := http.Get("http://" + g.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	m, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(m)
}

// records is a slog.Handler that keeps what is logged.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append(h.list, r.Clone())
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// find waits (5 s at most) for a record with the message, and returns its
// level.
func (h *records) find(msg string) (slog.Level, bool) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		for _, r := range h.list {
			if r.Message == msg {
				h.mu.Unlock()
				return r.Level, true
			}
		}
		h.mu.Unlock()
	}
	return 0, false
}

func (h *records) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ms []string
	for _, r := range h.list {
		ms = append(ms, r.Level.String()+" "+r.Message)
	}
	return ms
}

// A client that goes away while the upstream is answering is not an
// upstream failure: it is logged as such, below warning level; a real
// upstream failure is still a warning and a 502; an upstream that does
// not answer within write_timeout (less a tenth) is a warning and a 504.
func TestProxyErrorsSayWhoFailed(t *testing.T) {
	arrived := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // an upstream that never answers
	}))
	t.Cleanup(up.Close)
	t.Run("client gone", func(t *testing.T) {
		log := &records{}
		g, _ := runSlow(t, slowConfig(""), up.URL, slog.New(log))
		c := dial(t, g.Addr())
		io.WriteString(c, "GET /up HTTP/1.1\r\nHost: gw\r\n\r\n")
		<-arrived
		c.Close()
		level, ok := log.find("client went away")
		if !ok || level >= slog.LevelWarn {
			t.Errorf("a client that went away: logged %q, want \"client went away\" below warning", log.messages())
		}
		for _, m := range log.messages() {
			if strings.Contains(m, "upstream") {
				t.Errorf("a client that went away was logged as %q", m)
			}
		}
	})
	t.Run("upstream down", func(t *testing.T) {
		log := &records{}
		closed := httptest.NewServer(http.NotFoundHandler())
		closed.Close()
		g, _ := runSlow(t, slowConfig(""), closed.URL, slog.New(log))
		r, err := http.Get("http://" + g.Addr() + "/up")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 502 || strings.TrimSpace(string(b)) != `{"error":"upstream_unavailable","retryable":true}` {
			t.Errorf("upstream down: %d %s, want 502 upstream_unavailable", r.StatusCode, b)
		}
		if level, ok := log.find("upstream unreachable"); !ok || level != slog.LevelWarn {
			t.Errorf("upstream down: logged %q, want a warning \"upstream unreachable\"", log.messages())
		}
	})
	t.Run("upstream too slow", func(t *testing.T) {
		log := &records{}
		g, _ := runSlow(t, slowConfig(""), up.URL, slog.New(log))
		c := dial(t, g.Addr())
		start := time.Now()
		io.WriteString(c, "GET /up HTTP/1.1\r\nHost: gw\r\n\r\n")
		<-arrived
		// The upstream has write_timeout less a tenth to answer; then the
		// gateway answers 504 before the connection's write deadline.
		c.SetReadDeadline(start.Add(writeBound + slack))
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a request to an upstream that never answers: %v", err)
		}
		b, _ := io.ReadAll(r.Body)
		checkBound(t, "the 504", start, time.Now(), true, upstreamWait(writeBound))
		if r.StatusCode != 504 || strings.TrimSpace(string(b)) != `{"error":"upstream_timeout","retryable":true}` {
			t.Errorf("upstream too slow: %d %s, want 504 upstream_timeout", r.StatusCode, b)
		}
		if level, ok := log.find("upstream timed out"); !ok || level != slog.LevelWarn {
			t.Errorf("upstream too slow: logged %q, want a warning \"upstream timed out\"", log.messages())
		}
	})
}
