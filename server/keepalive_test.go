package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/server"
)

// slack is what a close may take past its bound on a shared machine under
// -race.
const slack = time.Second

// serve runs a decision service with the options (listeners and
// configuration filled in: api_key 1000 a minute) until the end of the
// test.
func serve(t testing.TB, opts server.Options) *server.Server {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(config(1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.Load, opts.Watch = server.EnvoyLoader(dir), []string{dir}
	opts.HTTPAddr, opts.GRPCAddr, opts.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	s, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// http2Peer opens a raw connection that says the HTTP/2 preface and its
// (empty) settings, and then nothing: no call, no answer to a ping.
func http2Peer(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := http2.NewFramer(c, nil).WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// peer is what a raw HTTP/2 peer saw until the server closed its
// connection: the frames' types, when the first GOAWAY came, and when the
// connection closed (closed false: still open at the deadline).
type peer struct {
	frames         []http2.FrameType
	goaway, closed time.Time
}

// watch reads frames from c until the server closes it (or until
// deadline), answering the server's pings when ack is set (as a live
// client does, still making no call).
func watch(c net.Conn, ack bool, deadline time.Time) <-chan peer {
	out := make(chan peer, 1)
	go func() {
		c.SetReadDeadline(deadline)
		fr := http2.NewFramer(c, c)
		var p peer
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					p.closed = time.Now()
				}
				out <- p
				return
			}
			p.frames = append(p.frames, f.Header().Type)
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				if p.goaway.IsZero() {
					p.goaway = time.Now()
				}
			case *http2.PingFrame:
				if ack && !f.IsAck() {
					fr.WritePing(true, f.Data)
				}
			}
		}
	}()
	return out
}

func within(t *testing.T, what string, took, bound time.Duration, closed bool) {
	t.Helper()
	switch {
	case !closed:
		t.Errorf("%s: still open at its bound %v + slack %v", what, bound, slack)
	case took < bound:
		t.Errorf("%s: closed after %v, before its bound %v", what, took.Round(time.Millisecond), bound)
	case took > bound+slack:
		t.Errorf("%s: closed after %v, later than its bound %v + slack %v", what, took.Round(time.Millisecond), bound, slack)
	}
}

// gRPC's fixed waits after an idle connection's GOAWAY: for the peer to
// close (1 s), and before that for it to answer the GOAWAY's ping (5 s).
const (
	goawayClose = time.Second
	goawayPing  = 5 * time.Second
)

// An idle gRPC connection is sent a GOAWAY after GRPCIdleTimeout and
// closed: a real client closes at once after its call (and reconnects for
// its next one); a raw HTTP/2 peer that never calls and ignores the GOAWAY
// is closed by the server goawayClose later, and goawayPing more when it
// does not answer pings either. Calls answer meanwhile.
func TestIdleGRPCConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	const idle = 500 * time.Millisecond
	s := serve(t, server.Options{GRPCIdleTimeout: idle, GRPCPingInterval: time.Hour})
	start := time.Now()
	live := watch(http2Peer(t, s.GRPCAddr()), true, start.Add(idle+goawayClose+slack))
	silent := watch(http2Peer(t, s.GRPCAddr()), false, start.Add(idle+goawayPing+goawayClose+slack))

	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlpb.NewRateLimitServiceClient(conn)
	call := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r, err := client.ShouldRateLimit(ctx, request("k")); err != nil || r.OverallCode != rlpb.RateLimitResponse_OK {
			t.Fatalf("%s: %v %v", what, r, err)
		}
	}
	call("a call while raw peers idle")
	called := time.Now()

	p := <-live
	within(t, "an idle peer that answers pings", p.closed.Sub(start), idle+goawayClose, !p.closed.IsZero())
	within(t, "its GOAWAY", p.goaway.Sub(start), idle, !p.goaway.IsZero())

	// The client leaves READY on the GOAWAY, or at the latest when the
	// server closes the connection goawayClose after it.
	ctx, cancel := context.WithDeadline(context.Background(), called.Add(idle+goawayClose+slack))
	defer cancel()
	for st := conn.GetState(); st == connectivity.Ready; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			break
		}
	}
	if took := time.Since(called); conn.GetState() == connectivity.Ready || took < idle {
		t.Errorf("the client's connection after its call: %v after it, %v; want it closed after %v, within %v more", took.Round(time.Millisecond), conn.GetState(), idle, goawayClose+slack)
	}
	call("a call after the server closed the idle connection")

	p = <-silent
	within(t, "the GOAWAY to an idle peer that answers nothing", p.goaway.Sub(start), idle, !p.goaway.IsZero())
	within(t, "an idle peer that answers nothing", p.closed.Sub(start), idle+goawayPing+goawayClose, !p.closed.IsZero())
}

// A peer that does not answer the server's ping is closed GRPCPingTimeout
// after it (a client gone without closing).
func TestSilentGRPCPeerIsClosed(t *testing.T) {
	t.Parallel()
	const interval, timeout = time.Second, 300 * time.Millisecond // 1 s: gRPC's least ping interval
	s := serve(t, server.Options{GRPCPingInterval: interval, GRPCPingTimeout: timeout, GRPCIdleTimeout: time.Hour})
	start := time.Now()
	p := <-watch(http2Peer(t, s.GRPCAddr()), false, start.Add(interval+timeout+slack))
	within(t, "a peer that does not answer pings", p.closed.Sub(start), interval+timeout, !p.closed.IsZero())
	if !slices.Contains(p.frames, http2.FramePing) {
		t.Errorf("the peer got %v, want a PING before the close", p.frames)
	}
}

// MaxConnections caps each listener: with the gRPC listener's one slot
// held by an idle peer, a call waits in the backlog until the idle timeout
// frees the slot, and is then answered; on the HTTP listener, a request
// waits until the connection holding its one slot closes.
func TestListenersCapConnections(t *testing.T) {
	t.Parallel()
	const idle = 500 * time.Millisecond
	s := serve(t, server.Options{MaxConnections: 1, GRPCIdleTimeout: idle, GRPCPingInterval: time.Hour})
	start := time.Now()
	held := watch(http2Peer(t, s.GRPCAddr()), true, start.Add(idle+goawayClose+slack))
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rlpb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("k")); err != nil {
		t.Fatalf("a call once the slot is free: %v", err)
	}
	within(t, "a call behind an idle peer holding the one slot", time.Since(start), idle+goawayClose, true)
	if p := <-held; p.closed.IsZero() {
		t.Error("the idle peer is still connected")
	}

	holder, err := net.Dial("tcp", s.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	io.WriteString(holder, "GET /healthz HTTP/1.1\r\nHost: s\r\n\r\n") // served, then held idle
	if _, err := http.ReadResponse(bufioReader(holder), nil); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		r, err := c.Get("http://" + s.HTTPAddr() + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		t.Fatalf("a second HTTP connection was served while the only slot was held (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	holder.Close()
	if err := <-answered; err != nil {
		t.Fatalf("the request once the slot is free: %v", err)
	}
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// Call bounds out of range are refused by New, saying which and why.
func TestBadCallBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts server.Options
		says string
	}{
		{server.Options{GRPCMaxStreams: -1}, "Options.GRPCMaxStreams -1: must be between 1 and 2147483647"},
		{server.Options{GRPCMaxStreams: 1 << 31}, "Options.GRPCMaxStreams 2147483648"},
		{server.Options{GRPCCallTimeout: -time.Second}, "Options.GRPCCallTimeout -1s: must be positive"},
		{server.Options{GRPCIdleTimeout: -time.Second}, "Options.GRPCIdleTimeout -1s: must be positive"},
		{server.Options{MaxConnections: -1}, "Options.MaxConnections -1: must be positive"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(config(100)), 0o600); err != nil {
			t.Fatal(err)
		}
		c.opts.Load = server.EnvoyLoader(dir)
		c.opts.HTTPAddr, c.opts.GRPCAddr, c.opts.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		s, err := server.New(c.opts)
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want an error saying %q", c.opts, err, c.says)
		}
	}
}

// The server's gRPC bounds reach its listener: its first SETTINGS frame
// announces GRPCMaxStreams (the bounds themselves are rls.GRPCServer's,
// tested there).
func TestGRPCMaxStreamsAnnounced(t *testing.T) {
	t.Parallel()
	s := serve(t, server.Options{GRPCMaxStreams: 7})
	c := http2Peer(t, s.GRPCAddr())
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := http2.NewFramer(nil, c).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("the server's first frame: %v, want its SETTINGS", f)
	}
	if got, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || got != 7 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS: %d (sent %v), want 7", got, ok)
	}
}
