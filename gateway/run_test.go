package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway/config"
)

// When a listener fails, Run stops the other one and returns the error —
// it does not wait for a second error that will never come.
func TestRunReturnsWhenAListenerFails(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\nlimits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Config: cfg, Upstream: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	g.ln.Close() // the public listener fails at once
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil after its listener failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its listener failed")
	}
}

// signalListener tells when Accept has failed (the listener was closed).
type signalListener struct {
	net.Listener
	failed chan struct{}
	once   sync.Once
}

func (l *signalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		l.once.Do(func() { close(l.failed) })
	}
	return c, err
}

// serving counts the goroutines inside http.Server.Serve.
func serving() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "net/http.(*Server).Serve(")
}

// When the shutdown times out (a request still in flight), Run still
// receives every Serve's return — here the admin listener's failure
// during the public server's drain — and cuts the requests left, so that
// none outlives Run.
func TestRunAfterAShutdownTimeout(t *testing.T) {
	arrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // never answers
	}))
	t.Cleanup(up.Close)
	cfg, err := config.Parse("t.yaml", []byte("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\nlimits: [{name: a, quota: 100, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Config: cfg, Upstream: up.URL, ShutdownTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	public := &signalListener{Listener: g.ln, failed: make(chan struct{})}
	g.ln = public
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	inFlight := make(chan error, 1)
	go func() {
		r, err := http.Get("http://" + g.Addr() + "/slow")
		if err == nil {
			_, err = io.ReadAll(r.Body)
			r.Body.Close()
		}
		inFlight <- err
	}()
	<-arrived
	servers := serving() // the gateway's two and the upstream
	cancel()
	<-public.failed // the public server is draining (for its whole timeout)
	for deadline := time.Now().Add(5 * time.Second); serving() > servers-1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the public server's Serve did not return")
		}
	}
	g.aln.Close() // the admin listener fails before its Shutdown
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if !errors.Is(runErr, net.ErrClosed) {
		t.Errorf("Run: %v; want the admin listener's error among its errors", runErr)
	}
	if !errors.Is(runErr, context.DeadlineExceeded) {
		t.Errorf("Run: %v; want the shutdown's timeout among its errors", runErr)
	}
	select {
	case err := <-inFlight:
		if err == nil {
			t.Error("the request in flight completed; want it cut")
		}
	case <-time.After(5 * time.Second):
		t.Error("the request in flight still runs 5 s after Run returned")
	}
}
