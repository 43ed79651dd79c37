package relay_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
)

// limited is a target that enforces limit with sluice's own middleware
// (one global key), as a rate-limited API does: 429 with Retry-After and
// the RateLimit fields on every answer.
type limited struct {
	*target
	ok, throttled atomic.Int64
	okTimes       []time.Time
	mu            sync.Mutex
}

func newLimited(t *testing.T, limit sluice.Limit) *limited {
	t.Helper()
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mw, err := httplimit.New(httplimit.Options{Limiter: store, Rules: []httplimit.Rule{{
		Name: "global", Quotas: []httplimit.Quota{{Limit: limit, Key: httplimit.Key{Kind: httplimit.Global}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	lt := &limited{}
	inner := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lt.ok.Add(1)
		lt.mu.Lock()
		lt.okTimes = append(lt.okTimes, time.Now())
		lt.mu.Unlock()
		_, _ = w.Write([]byte("done"))
	}))
	lt.target = newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		inner.ServeHTTP(rec, r)
		if rec.status == http.StatusTooManyRequests {
			lt.throttled.Add(1)
		}
	})
	return lt
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// maxInWindow is the most arrivals in any span of length w.
func maxInWindow(times []time.Time, w time.Duration) int {
	times = slices.Clone(times)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// enqueueAll enqueues n tasks in batches of 500 and returns their IDs.
func enqueueAll(t *testing.T, r *relay.Relay, q string, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i += 500 {
		batch := make([]relay.Request, 0, 500)
		for j := i; j < min(n, i+500); j++ {
			batch = append(batch, relay.Request{URL: fmt.Sprintf("/records/%d", j), Key: fmt.Sprintf("rec-%d", j)})
		}
		got, err := r.Enqueue(context.Background(), q, batch...)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range got {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// skipFigures skips the timed end-to-end runs where their figures would
// mean nothing: under -short, and under the race detector (make test runs
// them again without it).
func skipFigures(t *testing.T) {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("an end-to-end run of several seconds")
	case raceEnabled:
		t.Skip("its figures are timed: the race detector slows delivery; make test runs it again without -race")
	}
}

// e2eConfigured is the first end-to-end run: n tasks against a
// target that enforces L per second, the relay configured with L.
func e2eConfigured(t *testing.T, open func(context.Context, string) (queue.Queue, error), n int, rate float64) {
	skipFigures(t)
	tg := newLimited(t, sluice.Limit{Name: "per_second", Algorithm: sluice.GCRA, Quota: rate, Window: time.Second, Burst: 10})
	o := oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "per_second", Quota: rate, Window: time.Second}}
	})
	o.Open = open
	// Enqueue everything before the relay runs, as a backlog.
	r0, err := relay.New(context.Background(), withQuiet(o))
	if err != nil {
		t.Fatal(err)
	}
	ids := enqueueAll(t, r0, "jobs", n)
	if err := r0.Close(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	r := start(t, o)
	var etaAt10 time.Duration
	var at10 time.Time
	for tg.ok.Load() < int64(n) {
		if etaAt10 == 0 && tg.ok.Load() >= int64(n/10) {
			// Stats are read at most once a second: force a fresh read.
			time.Sleep(1100 * time.Millisecond)
			s, err := r.Stats(context.Background(), "jobs")
			if err != nil {
				t.Fatal(err)
			}
			if !s.ETAKnown {
				t.Fatalf("no ETA at 10 %%: %+v", s)
			}
			etaAt10, at10 = s.ETA, s.At
		}
		if time.Since(begin) > time.Duration(float64(n)/rate*1.5*float64(time.Second))+30*time.Second {
			t.Fatalf("only %d of %d delivered after %v", tg.ok.Load(), n, time.Since(begin))
		}
		time.Sleep(2 * time.Millisecond)
	}
	tg.mu.Lock()
	last := tg.okTimes[len(tg.okTimes)-1]
	first := tg.okTimes[0]
	tg.mu.Unlock()
	wall := last.Sub(first)
	ideal := time.Duration(float64(n-1) / rate * float64(time.Second))
	remaining := last.Sub(at10)
	t.Logf("%d tasks at L=%g/s: %d × 429; first to last arrival %v (ideal %v, %.2f %%); ETA at 10 %%: %v, real remaining %v (%.1f %% off); most in any 1 s: %d",
		n, rate, tg.throttled.Load(), wall.Round(time.Millisecond), ideal, 100*float64(wall)/float64(ideal),
		etaAt10.Round(time.Millisecond), remaining.Round(time.Millisecond), 100*math.Abs(float64(etaAt10-remaining))/float64(remaining), maxInWindow(tg.okTimes, time.Second))
	if th := tg.throttled.Load(); th != 0 {
		t.Errorf("%d × 429, want none", th)
	}
	if math.Abs(float64(wall-ideal)) > 0.02*float64(ideal) {
		t.Errorf("wall time %v, not within 2 %% of %v", wall, ideal)
	}
	if math.Abs(float64(etaAt10-remaining)) > 0.05*float64(remaining) {
		t.Errorf("ETA at 10 %% done %v, real remaining %v: more than 5 %% off", etaAt10, remaining)
	}
	// Every task succeeded.
	for _, id := range []string{ids[0], ids[len(ids)/2], ids[len(ids)-1]} {
		if info := waitFinished(t, r.Relay, id, 10*time.Second); info.State != queue.Succeeded {
			t.Fatalf("task %s: %s %q", id, info.State, info.Outcome)
		}
	}
}

func withQuiet(o relay.Options) relay.Options {
	if o.Logger == nil {
		o.Logger = quietLog()
	}
	return o
}

func TestEndToEndConfiguredLimit(t *testing.T) {
	e2eConfigured(t, boltOpener(t.TempDir()), 10000, 500)
}

func TestEndToEndConfiguredLimitOnJetStream(t *testing.T) {
	url := os.Getenv("SLUICE_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	prefix := fmt.Sprintf("e2e-%d-", time.Now().UnixNano())
	var opened []*jsqueue.Queue
	open := func(ctx context.Context, name string) (queue.Queue, error) {
		q, err := jsqueue.Open(ctx, jsqueue.Options{URL: url, Name: prefix + name, Logger: quietLog()})
		if err == nil {
			opened = append(opened, q)
		}
		return q, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	probe, err := open(ctx, "probe")
	cancel()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("NATS JetStream at %s: %v", url, err)
		}
		t.Skipf("SKIPPED LOUDLY: no NATS JetStream at %s (%v): start nats-server -js, or set SLUICE_NATS_URL", url, err)
	}
	probe.Close()
	e2eConfigured(t, open, 10000, 500)
}

// TestEndToEndLearnedLimit: the target says its limit in RateLimit fields
// and nothing is configured: the relay probes, learns, and keeps to it.
func TestEndToEndLearnedLimit(t *testing.T) {
	skipFigures(t)
	const n, rate = 6000, 500.0
	tg := newLimited(t, sluice.Limit{Name: "per_second", Algorithm: sluice.GCRA, Quota: rate, Window: time.Second, Burst: 10})
	o := oneTarget(tg.URL, nil)
	o.Open = boltOpener(t.TempDir())
	r0, err := relay.New(context.Background(), withQuiet(o))
	if err != nil {
		t.Fatal(err)
	}
	enqueueAll(t, r0, "jobs", n)
	if err := r0.Close(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var answers []struct {
		at        time.Time
		throttled bool
	}
	inner := tg.answer
	tg.answer = func(i int, w http.ResponseWriter, req *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		inner(i, rec, req)
		mu.Lock()
		answers = append(answers, struct {
			at        time.Time
			throttled bool
		}{time.Now(), rec.status == 429})
		mu.Unlock()
	}
	r := start(t, o)
	begin := time.Now()
	for tg.ok.Load() < n {
		if time.Since(begin) > 60*time.Second {
			t.Fatalf("only %d of %d delivered after a minute", tg.ok.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	first := answers[0].at
	after, throttledAfter := 0, 0
	for _, a := range answers {
		if a.at.Sub(first) >= 2*time.Second {
			after++
			if a.throttled {
				throttledAfter++
			}
		}
	}
	wall := tg.okTimes[len(tg.okTimes)-1].Sub(tg.okTimes[0])
	utilization := float64(n-1) / rate / wall.Seconds()
	s, _ := r.Stats(context.Background(), "jobs")
	t.Logf("learned: %d × 429 in all, %d of %d answers after two windows (%.2f %%); utilization %.1f %% (%d in %v); limit now %.1f from %s",
		tg.throttled.Load(), throttledAfter, after, 100*float64(throttledAfter)/float64(max(after, 1)), 100*utilization, n, wall.Round(time.Millisecond), s.Limit, s.LimitSource)
	if float64(throttledAfter) > 0.01*float64(after) {
		t.Errorf("429 share after two windows %.2f %%, want ≤ 1 %%", 100*float64(throttledAfter)/float64(after))
	}
	if utilization < 0.95 {
		t.Errorf("utilization %.1f %%, want ≥ 95 %%", 100*utilization)
	}
}

// TestSharedTarget: a bulk queue saturating and an interactive one, on one
// target: the interactive tasks wait at most a slice, the bulk queue takes
// the whole limit while the interactive one is idle, and the target never
// sees more than L + burst in any second.
func TestSharedTarget(t *testing.T) {
	skipFigures(t)
	const rate, burst = 200.0, 10.0
	tg := newLimited(t, sluice.Limit{Name: "per_second", Algorithm: sluice.GCRA, Quota: rate, Window: time.Second, Burst: burst})
	o := relay.Options{
		Targets: []relay.Target{{Name: "api", Origin: tg.URL, Allow: loopback, Limits: []sluice.Limit{{Name: "per_second", Quota: rate, Window: time.Second}}}},
		Queues:  []relay.Queue{{Name: "bulk", Target: "api", Weight: 1}, {Name: "interactive", Target: "api", Weight: 4, Reserved: 0.2}},
		Open:    boltOpener(t.TempDir()),
	}
	r := start(t, o)
	enqueueAll(t, r.Relay, "bulk", 3000)
	// Phase 1: the bulk queue alone, for 4 s.
	time.Sleep(time.Second)
	p1 := tg.ok.Load()
	time.Sleep(3 * time.Second)
	bulkAlone := float64(tg.ok.Load()-p1) / 3
	// Phase 2: interactive tasks, 20 per second, each timed from enqueue
	// to arrival.
	var waits []time.Duration
	for i := range 40 {
		sent := time.Now()
		got, err := r.Enqueue(context.Background(), "interactive", relay.Request{URL: fmt.Sprintf("/interactive/%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		info := waitFinished(t, r.Relay, got[0].ID, 10*time.Second)
		if info.State != queue.Succeeded {
			t.Fatalf("interactive task: %s %q", info.State, info.Outcome)
		}
		waits = append(waits, info.Finished.Sub(sent))
		time.Sleep(50 * time.Millisecond)
	}
	slices.Sort(waits)
	tg.mu.Lock()
	most := maxInWindow(tg.okTimes, time.Second)
	tg.mu.Unlock()
	t.Logf("bulk alone: %.1f/s of %g (%.1f %%); interactive enqueue→done: median %v, max %v; most arrivals in any 1 s: %d (L + burst = %g); 429s: %d",
		bulkAlone, rate, 100*bulkAlone/rate, waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond), most, rate+burst, tg.throttled.Load())
	if bulkAlone < 0.98*rate {
		t.Errorf("bulk alone got %.1f/s, want ≥ 98 %% of %g", bulkAlone, rate)
	}
	if waits[len(waits)-1] > 200*time.Millisecond+50*time.Millisecond {
		t.Errorf("an interactive task waited %v, more than a slice (200 ms, plus 50 ms for the round trip)", waits[len(waits)-1])
	}
	if float64(most) > rate+burst {
		t.Errorf("%d arrivals in one second, more than L + burst = %g", most, rate+burst)
	}
}
