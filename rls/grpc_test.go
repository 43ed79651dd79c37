package rls_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/rls"
)

// slack is what a bound may be overrun by on a shared machine under -race.
const slack = time.Second

// generous is a configuration whose api_key limit no test reaches.
var generous = table{"edge": {"api_key": perMinute("per_key", 1<<30)}}

// grpcServer is a GRPCServer of a Service on the memory store, serving on
// a loopback port until the end of the test.
type grpcServer struct {
	*rls.GRPCServer
	addr   string
	served func() error // Serve's result, once it returned
}

func serveGRPC(t testing.TB, opts rls.GRPCOptions) *grpcServer {
	t.Helper()
	g, err := rls.NewGRPCServer(newService(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() { result <- g.Serve(ln) }()
	s := &grpcServer{GRPCServer: g, addr: ln.Addr().String(), served: sync.OnceValue(func() error { return <-result })}
	t.Cleanup(func() {
		g.Stop()
		if err := s.served(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// request is a RateLimitRequest of one descriptor, api_key=key.
func request(key string) *rlpb.RateLimitRequest {
	return &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", key)}}
}

const (
	shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	healthWatch     = "/grpc.health.v1.Health/Watch"
	// goroutineSlack is what the goroutine count may move by for reasons
	// other than the streams under test (the client's, the runtime's).
	goroutineSlack = 20
)

// stuckPeer is a raw HTTP/2 connection that opens calls by their HEADERS
// and never sends their message, as an attacker holding streams does. It
// answers the server's SETTINGS and PINGs.
type stuckPeer struct {
	conn net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	buf  bytes.Buffer
	next uint32 // the next stream ID
	// settings is the server's first SETTINGS frame (its limits).
	settings map[http2.SettingID]uint32
	ends     chan streamEnd
}

// streamEnd is how the server ended a stream: an RST_STREAM's code, or
// the grpc-status of its trailers (-1 for a RST_STREAM).
type streamEnd struct {
	id     uint32
	rst    http2.ErrCode
	status int
	at     time.Time
}

func dialStuck(t *testing.T, addr string) *stuckPeer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := &stuckPeer{conn: c, fr: http2.NewFramer(c, c), next: 1, ends: make(chan streamEnd, 4096)}
	p.enc = hpack.NewEncoder(&p.buf)
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The server's SETTINGS come first; acknowledge them.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := p.fr.ReadFrame()
	if err != nil {
		t.Fatalf("the server's SETTINGS: %v", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("the server's first frame: %v, want its SETTINGS", f)
	}
	p.settings = map[http2.SettingID]uint32{}
	sf.ForeachSetting(func(st http2.Setting) error { p.settings[st.ID] = st.Val; return nil })
	if err := p.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go p.read(done)
	return p
}

// read reads the server's frames until the connection closes, reporting
// how each stream ended. (It writes nothing: the tests end before the
// server's first keepalive ping, and the Framer is not safe for
// concurrent writes.)
func (p *stuckPeer) read(done chan<- struct{}) {
	defer close(done)
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			p.ends <- streamEnd{id: f.StreamID, rst: f.ErrCode, status: -1, at: time.Now()}
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				continue
			}
			e := streamEnd{id: f.StreamID, status: -1, at: time.Now()}
			if v := f.PseudoValue("status"); v == "" || v == "200" {
				if n, err := strconv.Atoi(fieldValue(f, "grpc-status")); err == nil {
					e.status = n
				}
			}
			p.ends <- e
		}
	}
}

func fieldValue(f *http2.MetaHeadersFrame, name string) string {
	for _, h := range f.Fields {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// open sends the HEADERS of n calls to method (with a grpc-timeout when
// timeout is not empty), and never their message; it returns their IDs.
func (p *stuckPeer) open(t *testing.T, n int, method, timeout string) []uint32 {
	t.Helper()
	ids := make([]uint32, 0, n)
	for range n {
		p.buf.Reset()
		for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "sluice"},
			{"content-type", "application/grpc"}, {"te", "trailers"}} {
			p.enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
		}
		if timeout != "" {
			p.enc.WriteField(hpack.HeaderField{Name: "grpc-timeout", Value: timeout})
		}
		if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: p.next, BlockFragment: p.buf.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.next)
		p.next += 2
	}
	return ids
}

// collect waits until the streams ids have ended, or until the deadline,
// and returns how each ended (the first frame that ended it).
func (p *stuckPeer) collect(ids []uint32, deadline time.Time) map[uint32]streamEnd {
	want := map[uint32]bool{}
	for _, id := range ids {
		want[id] = true
	}
	got := map[uint32]streamEnd{}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for len(got) < len(want) {
		select {
		case e := <-p.ends:
			if _, seen := got[e.id]; want[e.id] && !seen { // a RST_STREAM(NO_ERROR) may follow trailers
				got[e.id] = e
			}
		case <-timer.C:
			return got
		}
	}
	return got
}

// baseline is the goroutine count once the goroutines of what came before
// (a client's connection) have had a moment to end.
func baseline() int { return settle(0, time.Now().Add(200*time.Millisecond)) }

// settle waits (bounded) until the goroutine count is at most want, and
// returns the last count.
func settle(want int, deadline time.Time) int {
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// callOK makes a real gRPC call on its own connection and fails the test
// unless it answers OK.
func callOK(t *testing.T, addr, what string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r, err := rlpb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("k")); err != nil || r.OverallCode != rlpb.RateLimitResponse_OK {
		t.Errorf("%s: %v %v", what, r, err)
	}
}

// One connection holds at most MaxStreams calls: the server announces
// the bound in its SETTINGS, refuses the streams past it (RST_STREAM
// REFUSED_STREAM, which a client retries), and so holds no more goroutines
// than the bound however many HEADERS a peer sends. Calls on other
// connections answer meanwhile. (Not parallel: it counts goroutines.)
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	const max, extra = 8, 200
	s := serveGRPC(t, rls.GRPCOptions{MaxStreams: max, CallTimeout: time.Hour})
	callOK(t, s.addr, "a call before the attack") // the client's goroutines come and go
	before := baseline()

	p := dialStuck(t, s.addr)
	if got, ok := p.settings[http2.SettingMaxConcurrentStreams]; !ok || got != max {
		t.Errorf("the server's SETTINGS_MAX_CONCURRENT_STREAMS: %d (sent %v), want %d", got, ok, max)
	}
	ids := p.open(t, max+extra, shouldRateLimit, "")
	ends := p.collect(ids[max:], time.Now().Add(5*time.Second))
	for _, id := range ids[:max] {
		if e, ok := ends[id]; ok {
			t.Errorf("stream %d (within the bound) ended: %+v", id, e)
		}
	}
	refused := 0
	for _, id := range ids[max:] {
		if e, ok := ends[id]; ok && e.rst == http2.ErrCodeRefusedStream {
			refused++
		}
	}
	if refused != extra {
		t.Errorf("%d of the %d streams past the bound %d were refused (RST_STREAM REFUSED_STREAM), want all", refused, extra, max)
	}
	if n := runtime.NumGoroutine(); n > before+max+goroutineSlack {
		t.Errorf("goroutines: %d with %d stuck HEADERS on one connection, %d before; want at most %d more", n, max+extra, before, max+goroutineSlack)
	}
	callOK(t, s.addr, "a call during the attack")
}

// A call whose message never arrives ends CallTimeout after its
// HEADERS (trailers with grpc-status 4, DEADLINE_EXCEEDED), however long
// the client's own deadline; a shorter client deadline ends it sooner. Its
// goroutine returns, and calls answer throughout. (Not parallel: it counts
// goroutines.)
func TestStuckCallsEndAtTheCallTimeout(t *testing.T) {
	const max, timeout = 8, 500 * time.Millisecond
	s := serveGRPC(t, rls.GRPCOptions{MaxStreams: max, CallTimeout: timeout})
	callOK(t, s.addr, "a call before the attack")
	before := baseline()

	p := dialStuck(t, s.addr)
	start := time.Now()
	none := p.open(t, 3, shouldRateLimit, "")
	longer := p.open(t, 3, shouldRateLimit, "3600S")
	shorter := p.open(t, 1, shouldRateLimit, "200m")
	health := p.open(t, 1, "/grpc.health.v1.Health/Check", "")
	callOK(t, s.addr, "a call during the attack")
	ends := p.collect(slices.Concat(none, longer, shorter, health), start.Add(timeout+slack))

	check := func(what string, ids []uint32, bound time.Duration, want func(streamEnd) bool) {
		t.Helper()
		for _, id := range ids {
			e, ok := ends[id]
			switch took := e.at.Sub(start); {
			case !ok:
				t.Errorf("%s: stream %d still open %v after its HEADERS", what, id, timeout+slack)
			case !want(e):
				t.Errorf("%s: stream %d ended with %+v", what, id, e)
			case took < bound || took > bound+slack:
				t.Errorf("%s: stream %d ended after %v, want %v (+ %v)", what, id, took.Round(time.Millisecond), bound, slack)
			}
		}
	}
	deadlineExceeded := func(e streamEnd) bool { return e.status == 4 }
	check("no client deadline", none, timeout, deadlineExceeded)
	check("a client deadline of an hour", longer, timeout, deadlineExceeded)
	check("a client deadline of 200 ms", shorter, 200*time.Millisecond, func(e streamEnd) bool { return e.status == 4 || e.rst == http2.ErrCodeCancel })
	check("a health check", health, timeout, deadlineExceeded)
	if n := settle(before+goroutineSlack, time.Now().Add(2*time.Second)); n > before+goroutineSlack {
		t.Errorf("goroutines: %d after the stuck calls ended, %d before", n, before)
	}
	// The connection is still usable: the bound freed its slots.
	more := p.open(t, max, shouldRateLimit, "")
	ends = p.collect(more, time.Now().Add(timeout+slack))
	for _, id := range more {
		if e := ends[id]; e.status != 4 {
			t.Errorf("a stuck call after the first ones ended: stream %d ended with %+v, want grpc-status 4", id, e)
		}
	}
	callOK(t, s.addr, "a call after the attack")
}

// A streaming call (the health service's Watch) is bounded only until its
// request message arrives: a stuck Watch ends CallTimeout after its
// HEADERS, a real one stays open past it (a client that watches health
// would otherwise see its stream fail every CallTimeout).
func TestStuckWatchEndsRealWatchStays(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	s := serveGRPC(t, rls.GRPCOptions{CallTimeout: timeout})

	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("the first answer of a Watch: %v %v", r, err)
	}
	start := time.Now()
	p := dialStuck(t, s.addr)
	stuck := p.open(t, 1, healthWatch, "")
	e, ok := p.collect(stuck, start.Add(timeout+slack))[stuck[0]]
	if !ok || e.status != 4 {
		t.Errorf("a Watch that sends no request: %+v (ended %v), want grpc-status 4 within %v + %v", e, ok, timeout, slack)
	}

	next := make(chan error, 1)
	go func() { _, err := watch.Recv(); next <- err }()
	select {
	case err := <-next:
		t.Errorf("the real Watch ended %v after its start: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(timeout + slack):
	}
	cancel()
	<-next
}

// BenchmarkGRPCCall is an RLS call end to end over one gRPC connection,
// with no client deadline (CallTimeout applies) and with a deadline of
// 1 s (shorter than CallTimeout: the call keeps its context as it is,
// as Envoy's, 20 ms by default, does).
func BenchmarkGRPCCall(b *testing.B) {
	s := serveGRPC(b, rls.GRPCOptions{})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlpb.NewRateLimitServiceClient(conn)
	for _, bc := range []struct {
		name     string
		deadline time.Duration
	}{{"deadline=none", 0}, {"deadline=1s", time.Second}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := request("bench")
				for pb.Next() {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if bc.deadline > 0 {
						ctx, cancel = context.WithTimeout(ctx, bc.deadline)
					}
					_, err := client.ShouldRateLimit(ctx, req)
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// The health service says SERVING until SetServing(false), and again after
// SetServing(true); GracefulStop answers the calls in flight and makes
// Serve return nil, as a Serve after it does.
func TestGRPCServerHealthAndStop(t *testing.T) {
	t.Parallel()
	s := serveGRPC(t, rls.GRPCOptions{})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	check := func(what string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != want {
			t.Errorf("%s: %v %v, want %v", what, r, err, want)
		}
	}
	check("at start", healthpb.HealthCheckResponse_SERVING)
	s.SetServing(false)
	check("after SetServing(false)", healthpb.HealthCheckResponse_NOT_SERVING)
	s.SetServing(true)
	check("after SetServing(true)", healthpb.HealthCheckResponse_SERVING)
	callOK(t, s.addr, "a call before the stop")

	s.GracefulStop()
	if err := s.served(); err != nil {
		t.Errorf("Serve after GracefulStop: %v, want nil", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln); err != nil {
		t.Errorf("Serve after the stop: %v, want nil", err)
	}
}

// failingListener is a listener whose Accept fails for good.
type failingListener struct{ net.Listener }

var errAccept = errors.New("accept failed for good")

func (failingListener) Accept() (net.Conn, error) { return nil, errAccept }

// Serve returns its listener's failure.
func TestGRPCServerServeFails(t *testing.T) {
	t.Parallel()
	g, err := rls.NewGRPCServer(newService(t), rls.GRPCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Serve(failingListener{ln}); !errors.Is(err, errAccept) {
		t.Errorf("Serve on a failing listener: %v, want %v", err, errAccept)
	}
	g.Stop()
}

// newService is a Service on the memory store with the generous
// configuration.
func newService(t testing.TB) *rls.Service {
	t.Helper()
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	var m atomic.Pointer[rls.Matcher]
	var matcher rls.Matcher = generous
	m.Store(&matcher)
	svc, err := rls.New(rls.Options{Limiter: ms, Config: &m})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// A request larger than MaxMessage is refused RESOURCE_EXHAUSTED; one
// within it is answered.
func TestGRPCServerMaxMessage(t *testing.T) {
	t.Parallel()
	s := serveGRPC(t, rls.GRPCOptions{MaxMessage: 512})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlpb.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.ShouldRateLimit(ctx, request(strings.Repeat("k", 600))); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 600-byte key under MaxMessage 512: %v, want RESOURCE_EXHAUSTED", err)
	}
	if r, err := client.ShouldRateLimit(ctx, request(strings.Repeat("k", 400))); err != nil || r.OverallCode != rlpb.RateLimitResponse_OK {
		t.Errorf("a 400-byte key: %v %v, want OK", r, err)
	}
}

// Options out of range, and no Service, are refused, saying which and why.
func TestNewGRPCServerRefuses(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	for _, c := range []struct {
		opts rls.GRPCOptions
		says string
	}{
		{rls.GRPCOptions{IdleTimeout: -time.Second}, "GRPCOptions.IdleTimeout -1s: must be positive"},
		{rls.GRPCOptions{PingInterval: -time.Second}, "GRPCOptions.PingInterval -1s: must be positive"},
		{rls.GRPCOptions{PingTimeout: -time.Second}, "GRPCOptions.PingTimeout -1s: must be positive"},
		{rls.GRPCOptions{CallTimeout: -time.Second}, "GRPCOptions.CallTimeout -1s: must be positive"},
		{rls.GRPCOptions{MaxStreams: -1}, "GRPCOptions.MaxStreams -1: must be between 1 and 2147483647"},
		{rls.GRPCOptions{MaxStreams: 1 << 31}, "GRPCOptions.MaxStreams 2147483648"},
		{rls.GRPCOptions{MaxMessage: -1}, "GRPCOptions.MaxMessage -1: must be positive"},
	} {
		if g, err := rls.NewGRPCServer(svc, c.opts); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want an error saying %q", c.opts, err, c.says)
			if g != nil {
				g.Stop()
			}
		}
	}
	if _, err := rls.NewGRPCServer(nil, rls.GRPCOptions{}); err == nil {
		t.Error("no Service: accepted")
	}
}
