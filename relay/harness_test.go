package relay_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
)

// loopback is what tests allow: their targets live on 127.0.0.1.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// arrival is one request a test target received.
type arrival struct {
	At     time.Time
	Method string
	Path   string
	Header http.Header
	Body   string
}

// target is a real HTTP server on 127.0.0.1:0 that records what it
// receives and answers with answer.
type target struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []arrival
	answer   func(n int, w http.ResponseWriter, r *http.Request)
}

func newTarget(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *target {
	t.Helper()
	tg := &target{answer: answer}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tg.mu.Lock()
		tg.arrivals = append(tg.arrivals, arrival{At: time.Now(), Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: string(body)})
		n := len(tg.arrivals)
		tg.mu.Unlock()
		if tg.answer != nil {
			tg.answer(n, w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) got() []arrival {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]arrival(nil), tg.arrivals...)
}

// boltOpener opens each queue in its own bbolt file under dir.
func boltOpener(dir string) func(context.Context, string) (queue.Queue, error) {
	return func(_ context.Context, name string) (queue.Queue, error) {
		return boltqueue.Open(filepath.Join(dir, name+".db"), boltqueue.Options{Logger: quietLog()})
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// started is a relay running until the test ends.
type started struct {
	*relay.Relay
	stop func()
}

// start creates a relay with o (a bolt backend under a temporary
// directory unless o.Open is set) and runs it until the test ends.
func start(t *testing.T, o relay.Options) started {
	t.Helper()
	if o.Open == nil {
		o.Open = boltOpener(t.TempDir())
	}
	if o.Logger == nil {
		o.Logger = quietLog()
	}
	r, err := relay.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			if err := r.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return started{Relay: r, stop: stop}
}

// waitState polls a task until it reaches a finished state or the test's
// patience ends.
func waitFinished(t *testing.T, r *relay.Relay, id string, within time.Duration) relay.TaskInfo {
	t.Helper()
	end := time.Now().Add(within)
	for {
		info, err := r.Task(context.Background(), id)
		if err != nil {
			t.Fatalf("Task(%s): %v", id, err)
		}
		if info.State.Finished() {
			return info
		}
		if time.Now().After(end) {
			t.Fatalf("task %s still %s after %v (attempts %d, outcome %q)", id, info.State, within, info.Attempts, info.Outcome)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// oneTarget is the usual configuration: one target at origin, one queue.
func oneTarget(origin string, mod func(*relay.Target)) relay.Options {
	tc := relay.Target{Name: "api", Origin: origin, Allow: loopback, Retry: relay.Retry{BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}}
	if mod != nil {
		mod(&tc)
	}
	return relay.Options{Targets: []relay.Target{tc}, Queues: []relay.Queue{{Name: "jobs", Target: "api"}}}
}
