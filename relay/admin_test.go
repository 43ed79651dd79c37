package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
)

// TestDeadLettersAndReplay: a task the target refuses dies at once, is
// listed with its reason, and a replay delivers it again.
func TestDeadLettersAndReplay(t *testing.T) {
	var accept atomic.Bool
	tg := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !accept.Load() {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	r := start(t, oneTarget(tg.URL, nil))
	ctx := context.Background()
	got, err := r.Enqueue(ctx, "jobs", relay.Request{URL: "/a"}, relay.Request{URL: "/b"}, relay.Request{URL: "/c"})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range got {
		if info := waitFinished(t, r.Relay, a.ID, 5*time.Second); info.State != queue.Dead || info.Outcome != "422 Unprocessable Entity" {
			t.Fatalf("%s: %s %q", a.ID, info.State, info.Outcome)
		}
	}
	page, err := r.DeadLetters(ctx, "jobs", "", 2)
	if err != nil || len(page) != 2 {
		t.Fatalf("first page: %v %v", page, err)
	}
	rest, err := r.DeadLetters(ctx, "jobs", page[1].ID, 10)
	if err != nil || len(rest) != 1 {
		t.Fatalf("second page: %v %v", rest, err)
	}
	if _, err := r.DeadLetters(ctx, "jobs", "other.x", 10); !errors.Is(err, relay.ErrNotFound) && !errors.Is(err, relay.ErrInvalid) {
		t.Fatalf("a cursor of another queue: %v", err)
	}
	accept.Store(true)
	if err := r.Replay(ctx, page[0].ID); err != nil {
		t.Fatal(err)
	}
	if info := waitFinished(t, r.Relay, page[0].ID, 5*time.Second); info.State != queue.Succeeded || info.Attempts != 1 {
		t.Fatalf("replayed: %s attempts %d", info.State, info.Attempts)
	}
	if err := r.Replay(ctx, page[0].ID); !errors.Is(err, relay.ErrConflict) {
		t.Fatalf("replay of a task that is not dead: %v", err)
	}
	n, err := r.ReplayAll(ctx, "jobs")
	if err != nil || n != 2 {
		t.Fatalf("replay all: %d %v", n, err)
	}
	for _, a := range got {
		if info := waitFinished(t, r.Relay, a.ID, 5*time.Second); info.State != queue.Succeeded {
			t.Fatalf("%s after replay all: %s", a.ID, info.State)
		}
	}
}

// TestStateSurvivesRestart: a pause and limits set through the API are
// kept across restarts; limits changed in the configuration win.
func TestStateSurvivesRestart(t *testing.T) {
	tg := newTarget(t, nil)
	dir := t.TempDir()
	o := oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "per_second", Quota: 50, Window: time.Second}}
	})
	o.Open = boltOpener(dir)
	o.StateFile = filepath.Join(dir, "state.json")
	o.Logger = quietLog()
	r, err := relay.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Pause("jobs"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetLimits("api", []sluice.Limit{{Name: "per_second", Quota: 20, Window: time.Second}}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetLimits("api", []sluice.Limit{{Name: "bad", Quota: -1, Window: time.Second}}); !errors.Is(err, relay.ErrInvalid) {
		t.Fatalf("a bad limit: %v", err)
	}
	r.Close()

	r, err = relay.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	limits, source, _ := r.Limits("api")
	s, _ := r.Stats(context.Background(), "jobs")
	if !s.Paused || source != "api" || len(limits) != 1 || limits[0].Quota != 20 || s.Limit != 20 || s.LimitSource != "api" {
		t.Fatalf("after a restart: paused %v, limits %v from %s, limit %v from %s", s.Paused, limits, source, s.Limit, s.LimitSource)
	}
	r.Close()

	o.Targets[0].Limits = []sluice.Limit{{Name: "per_second", Quota: 80, Window: time.Second}}
	r, err = relay.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	limits, source, _ = r.Limits("api")
	if source != "configuration" || limits[0].Quota != 80 {
		t.Fatalf("after the file changed: %v from %s", limits, source)
	}
}

// TestReload: settings of existing targets and queues change in place; a
// configuration that adds a queue is refused and changes nothing.
func TestReload(t *testing.T) {
	tg := newTarget(t, nil)
	o := oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "per_second", Quota: 50, Window: time.Second}}
	})
	r := start(t, o)
	changed := oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "per_second", Quota: 70, Window: time.Second}}
	})
	if err := r.Reload(changed); err != nil {
		t.Fatal(err)
	}
	if limits, _, _ := r.Limits("api"); limits[0].Quota != 70 {
		t.Fatalf("limits after reload: %v", limits)
	}
	more := changed
	more.Queues = append(more.Queues, relay.Queue{Name: "more", Target: "api"})
	if err := r.Reload(more); !errors.Is(err, relay.ErrOptions) || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("a new queue: %v", err)
	}
	got, err := r.Enqueue(context.Background(), "jobs", relay.Request{URL: "/after-reload"})
	if err != nil {
		t.Fatal(err)
	}
	if info := waitFinished(t, r.Relay, got[0].ID, 5*time.Second); info.State != queue.Succeeded {
		t.Fatalf("after reload: %s", info.State)
	}
}

// TestOptionsRefused is the table of configurations New refuses.
func TestOptionsRefused(t *testing.T) {
	base := func() relay.Options { return oneTarget("http://127.0.0.1:1", nil) }
	cases := []struct {
		name string
		mod  func(*relay.Options)
		want string
	}{
		{"no target", func(o *relay.Options) { o.Targets = nil }, "at least one target"},
		{"bad name", func(o *relay.Options) { o.Targets[0].Name = "a b" }, "a name is"},
		{"origin with a path", func(o *relay.Options) { o.Targets[0].Origin = "http://127.0.0.1:1/x" }, "origin"},
		{"unknown target", func(o *relay.Options) { o.Queues[0].Target = "nope" }, `no target is named "nope"`},
		{"reserved over 1", func(o *relay.Options) {
			o.Queues = append(o.Queues, relay.Queue{Name: "q2", Target: "api", Reserved: 0.6})
			o.Queues[0].Reserved = 0.5
		}, "sum to 1.1"},
		{"two queues one name", func(o *relay.Options) { o.Queues = append(o.Queues, o.Queues[0]) }, "two queues"},
		{"negative weight", func(o *relay.Options) { o.Queues[0].Weight = -1 }, "weight"},
		{"retry a 429", func(o *relay.Options) { o.Targets[0].Retry.RetryStatuses = []int{429} }, "429"},
		{"a leaky bucket (pace refuses it)", func(o *relay.Options) {
			o.Targets[0].Limits = []sluice.Limit{{Name: "x", Algorithm: sluice.LeakyBucket, Quota: 5, Window: time.Second}}
		}, "LeakyBucket"},
		{"bad limit", func(o *relay.Options) {
			o.Targets[0].Limits = []sluice.Limit{{Name: "x", Quota: 0, Window: time.Second}}
		}, "limit 0"},
	}
	for _, c := range cases {
		o := base()
		c.mod(&o)
		o.Open = boltOpener(t.TempDir())
		_, err := relay.New(context.Background(), o)
		if !errors.Is(err, relay.ErrOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (want one saying %q)", c.name, err, c.want)
		}
	}
}

// TestLearnedRateKept: a limit the target states is kept across a restart
// and the next run starts at it.
func TestLearnedRateKept(t *testing.T) {
	tg := newLimited(t, sluice.Limit{Name: "per_second", Quota: 40, Window: time.Second})
	dir := t.TempDir()
	o := oneTarget(tg.URL, nil)
	o.Open = boltOpener(dir)
	o.StateFile = filepath.Join(dir, "state.json")
	r := start(t, o)
	enqueueAll(t, r.Relay, "jobs", 200)
	for end := time.Now().Add(10 * time.Second); tg.ok.Load() < 60 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	s, _ := r.Stats(context.Background(), "jobs")
	if s.LimitSource != "learned" || s.Limit != 40 {
		t.Fatalf("while running: %v from %s", s.Limit, s.LimitSource)
	}
	r.stop()
	o.Logger = quietLog()
	again, err := relay.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	s, _ = again.Stats(context.Background(), "jobs")
	if s.LimitSource != "kept" || s.Limit != 40 {
		t.Fatalf("after a restart: %v from %s, want 40 kept", s.Limit, s.LimitSource)
	}
}

// TestETAWithSeveralWindows: the release rate is the fastest limit's; a
// slower limit with a longer window counts once the backlog passes its
// capacity (found running the README's commands: a per-day quota
// made the limit 1.16/s and the ETA twelve minutes for 17 s of work).
func TestETAWithSeveralWindows(t *testing.T) {
	cases := []struct {
		name   string
		limits []sluice.Limit
		limit  float64
		eta    time.Duration
	}{
		{"per second and per day", []sluice.Limit{{Name: "s", Quota: 50, Window: time.Second}, {Name: "d", Quota: 100000, Window: 24 * time.Hour}}, 50, 2 * time.Second},
		{"per second and per minute, the minute binding", []sluice.Limit{{Name: "s", Quota: 50, Window: time.Second}, {Name: "m", Quota: 60, Window: time.Minute}}, 50, 40 * time.Second},
	}
	for _, c := range cases {
		// Not run: the backlog stays as it is.
		o := oneTarget("http://127.0.0.1:1", func(tc *relay.Target) { tc.Limits = c.limits })
		o.Open, o.Logger = boltOpener(t.TempDir()), quietLog()
		r, err := relay.New(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		enqueueAll(t, r, "jobs", 100)
		time.Sleep(1100 * time.Millisecond)
		s, err := r.Stats(context.Background(), "jobs")
		if err != nil {
			t.Fatal(err)
		}
		if s.Limit != c.limit || !s.ETAKnown || s.ETA.Round(time.Millisecond) != c.eta {
			t.Errorf("%s: limit %v, ETA %v (known %v); want %v and %v", c.name, s.Limit, s.ETA, s.ETAKnown, c.limit, c.eta)
		}
		r.Close()
	}
}

// TestDailyQuotaDoesNotStarveTheFeeder: with a per-day quota beside the
// per-second limit, the relay still releases at the per-second rate and
// leases slices, not one task at a time (the slowest limit's rate,
// 1.16/s, once sized its leases).
func TestDailyQuotaDoesNotStarveTheFeeder(t *testing.T) {
	tg := newTarget(t, nil)
	dir := t.TempDir()
	var leases atomic.Int64
	o := oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "s", Quota: 200, Window: time.Second}, {Name: "d", Quota: 100000, Window: 24 * time.Hour}}
	})
	open := boltOpener(dir)
	o.Open = func(ctx context.Context, name string) (queue.Queue, error) {
		q, err := open(ctx, name)
		return countingLeases{q, &leases}, err
	}
	r := start(t, o)
	enqueueAll(t, r.Relay, "jobs", 400)
	begin := time.Now()
	for len(tg.got()) < 400 {
		if time.Since(begin) > 10*time.Second {
			t.Fatalf("%d of 400 delivered in 10 s", len(tg.got()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(begin)
	t.Logf("400 at 200/s with a per-day quota: %v, %d Lease calls", took.Round(time.Millisecond), leases.Load())
	if took > 3*time.Second || leases.Load() > 100 {
		t.Fatalf("400 tasks took %v and %d Lease calls", took, leases.Load())
	}
}

type countingLeases struct {
	queue.Queue
	n *atomic.Int64
}

func (c countingLeases) Lease(ctx context.Context, n int, visibility time.Duration) ([]queue.Lease, error) {
	got, err := c.Queue.Lease(ctx, n, visibility)
	if len(got) > 0 {
		c.n.Add(1)
	}
	return got, err
}

// TestSlowLimitSpendsNoAttempt: under a limit slower than a lease lasts
// (one per 3 s; a lease of the first version lasted timeout + 4 slices +
// 5 s), tasks that wait for their turn keep their leases and are sent
// once each, with one attempt.
func TestSlowLimitSpendsNoAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a slow limit: 10 s")
	}
	tg := newTarget(t, nil)
	r := start(t, oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "slow", Quota: 1, Window: 3 * time.Second}}
		tc.Timeout = 200 * time.Millisecond
	}))
	var reqs []relay.Request
	for i := range 4 {
		reqs = append(reqs, relay.Request{URL: fmt.Sprintf("/%d", i), MaxAttempts: 1})
	}
	got, err := r.Enqueue(context.Background(), "jobs", reqs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range got {
		if info := waitFinished(t, r.Relay, a.ID, 20*time.Second); info.State != queue.Succeeded || info.Attempts != 1 {
			t.Fatalf("%s: %s after %d attempts (%q)", a.ID, info.State, info.Attempts, info.Outcome)
		}
	}
	if n := len(tg.got()); n != 4 {
		t.Fatalf("%d sends, want 4", n)
	}
}

// TestHoldGivesTheBufferBack: a long Retry-After gives the tasks taken out
// back to the queue for the end of the hold, unsent and without spending
// an attempt; they are delivered after it.
func TestHoldGivesTheBufferBack(t *testing.T) {
	var first atomic.Bool
	tg := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !first.Swap(true) {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	r := start(t, oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "s", Quota: 5, Window: time.Second}}
	}))
	var reqs []relay.Request
	for i := range 5 {
		reqs = append(reqs, relay.Request{URL: fmt.Sprintf("/%d", i), MaxAttempts: 1})
	}
	got, err := r.Enqueue(context.Background(), "jobs", reqs...)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for _, a := range got {
		if info := waitFinished(t, r.Relay, a.ID, 15*time.Second); info.State != queue.Succeeded || info.Attempts != 1 {
			t.Fatalf("%s: %s after %d attempts (%q)", a.ID, info.State, info.Attempts, info.Outcome)
		}
	}
	arr := tg.got()
	if len(arr) != 6 {
		t.Fatalf("%d sends, want 6 (one 429, then each once)", len(arr))
	}
	for _, a := range arr[1:] {
		if a.At.Sub(arr[0].At) < 2900*time.Millisecond {
			t.Fatalf("a send %v after the 429, inside its 3 s hold", a.At.Sub(arr[0].At))
		}
	}
	t.Logf("5 tasks, a 3 s Retry-After: all done in %v", time.Since(began).Round(time.Millisecond))
}
