package jsqueue_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queuetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serverURL returns the environment's NATS server (SLUICE_NATS_URL,
// default nats://127.0.0.1:4222) once it answers with JetStream enabled.
// When none does, the test is skipped, loudly, or, when CI is set, fails.
func serverURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("SLUICE_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err == nil {
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		unavailable(t, "NATS JetStream at "+url+" (SLUICE_NATS_URL): "+err.Error())
	}
	return url
}

func unavailable(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI: %s; the jsqueue tests need it", what)
	}
	t.Skipf("SKIPPED, NOT PASSED: %s", what)
}

// newName returns a queue name no other test uses.
func newName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "test_" + hex.EncodeToString(b[:])
}

var quiet = slog.New(slog.DiscardHandler)

// open opens the queue name on url and removes its streams and buckets
// from the server when the test ends.
func open(t testing.TB, o jsqueue.Options) *jsqueue.Queue {
	t.Helper()
	if o.Name == "" {
		o.Name = newName()
	}
	if o.Logger == nil {
		o.Logger = quiet
	}
	t.Cleanup(func() { drop(t, o.URL, o.Name) })
	q, err := jsqueue.Open(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// drop deletes every stream of the queue name (its buckets are streams).
func drop(t testing.TB, url, name string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err != nil {
		t.Logf("drop %s: %v", name, err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var mine []string
	for s := range names.Name() {
		if s == name || strings.HasPrefix(s, name+"_") || strings.HasPrefix(s, "KV_"+name+"_") {
			mine = append(mine, s)
		}
	}
	for _, s := range mine {
		if err := js.DeleteStream(ctx, s); err != nil {
			t.Logf("drop %s: delete stream %s: %v", name, s, err)
		}
	}
}

func options(url string, c queuetest.Config) jsqueue.Options {
	return jsqueue.Options{URL: url, DedupWindow: c.DedupWindow, MaxAttempts: c.MaxAttempts, MaxPayload: 4096, MaxResult: 1024}
}

func TestConformance(t *testing.T) {
	url := serverURL(t)
	queuetest.Run(t, queuetest.Backend{
		Open: func(t *testing.T, c queuetest.Config) queue.Queue {
			return open(t, options(url, c))
		},
		Reopen: func(t *testing.T, q queue.Queue, c queuetest.Config) queue.Queue {
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			o := options(url, c)
			o.Name, o.Logger = q.(*jsqueue.Queue).Name(), quiet
			q2, err := jsqueue.Open(t.Context(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = q2.Close() })
			return q2
		},
		// 200 ms passes alone; under -race beside the other tests, the
		// calls between two of testStats's instants add up to u/4.
		Unit:       500 * time.Millisecond,
		MaxPayload: 4096,
		MaxResult:  1024,
	})
}

// Concurrent Enqueues of large batches share the connection's bound on
// pending asynchronous publishes: none is refused as "stalled" (found by
// make bench-queue's pre-fill: 8 callers × 1000 tasks failed before).
func TestConcurrentLargeBatches(t *testing.T) {
	t.Parallel()
	// What is tested is the bound on pending writes, not speed: a long
	// timeout, so that a loaded machine (CI's -race run of every package
	// at once) is not read as a failure.
	q := open(t, jsqueue.Options{URL: serverURL(t), Timeout: 30 * time.Second})
	const callers, batch = 16, 2000
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			tasks := make([]queue.Task, batch)
			for i := range tasks {
				tasks[i].Payload = []byte("x")
			}
			if _, err := q.Enqueue(t.Context(), tasks...); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s, err := q.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.Depth != callers*batch {
		t.Errorf("Depth = %d, want %d", s.Depth, callers*batch)
	}
}

// Callers that give up in the middle of their writes leave them pending
// in nats.go; those keep their share of the pending-publish bound until
// they settle, so the callers after them are not refused as "stalled",
// and Close ends the goroutines that wait for them (goleak in TestMain).
//
// Not parallel: its load must not slow the other tests' calls past their
// deadlines.
func TestCancelledEnqueuesKeepTheBound(t *testing.T) {
	q := open(t, jsqueue.Options{URL: serverURL(t)})
	tasks := make([]queue.Task, 1500)
	for i := range tasks {
		tasks[i].Payload = []byte("x")
	}
	var wg sync.WaitGroup
	cancelled := 0
	var mu sync.Mutex
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Millisecond)
			defer cancel()
			if _, err := q.Enqueue(ctx, tasks...); errors.Is(err, context.DeadlineExceeded) {
				mu.Lock()
				cancelled++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d of 8 callers gave up in the middle", cancelled)
	for range 8 {
		wg.Go(func() {
			if _, err := q.Enqueue(t.Context(), tasks...); err != nil {
				t.Errorf("Enqueue after cancelled callers: %v", err)
			}
		})
	}
	wg.Wait()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}
