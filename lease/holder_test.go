package lease_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memlease"
)

// fleetLimit is L = 40/s, B = 8 cut into 4 partitions of 10/s, burst 2.
var fleetLimit = sluice.Limit{Name: "fleet", Quota: 40, Window: time.Second, Burst: 8}

// cuttable is a Coordinator whose link can be cut: a cut call fails after
// the time a timeout would take, as a dead link does.
type cuttable struct {
	lease.Coordinator
	cut atomic.Bool
}

var errCut = errors.New("link cut")

func (c *cuttable) Sync(ctx context.Context, req lease.SyncRequest) (lease.SyncReply, error) {
	if c.cut.Load() {
		<-ctx.Done()
		return lease.SyncReply{}, errCut
	}
	return c.Coordinator.Sync(ctx, req)
}

// spender runs a Holder and a consumer that spends one unit as fast as
// the Holder allows, recording when.
type spender struct {
	h      *lease.Holder
	link   *cuttable
	cancel context.CancelFunc
	done   sync.WaitGroup
}

type recorder struct {
	mu    sync.Mutex
	times []time.Time
}

func (r *recorder) add(t time.Time) {
	r.mu.Lock()
	r.times = append(r.times, t)
	r.mu.Unlock()
}

// maxInWindow is the most spends in any span [t, t+w).
func (r *recorder) maxInWindow(w time.Duration) int {
	r.mu.Lock()
	ts := append([]time.Time(nil), r.times...)
	r.mu.Unlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.times)
}

func startSpender(t *testing.T, c lease.Coordinator, rec *recorder, member string, naive bool, busy *atomic.Bool) *spender {
	t.Helper()
	link := &cuttable{Coordinator: c}
	o := lease.Options{Coordinator: link, Limit: fleetLimit, Partitions: 4, TTL: time.Second, Member: member, Now: time.Now}
	if naive {
		o = lease.Naive(o)
	}
	h, err := lease.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &spender{h: h, link: link, cancel: cancel}
	s.done.Add(2)
	go func() { defer s.done.Done(); _ = h.Run(ctx) }()
	go func() {
		defer s.done.Done()
		for ctx.Err() == nil {
			if busy != nil && !busy.Load() {
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			if _, err := h.Wait(ctx, 1); err == nil {
				rec.add(time.Now())
			}
		}
	}()
	return s
}

func (s *spender) stop() { s.cancel(); s.done.Wait() }

// Two hungry holders share the limit: each holds half, and the fleet never
// spends more than L + B in any second.
func TestHoldersShareTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := memlease.New(nil)
		rec := &recorder{}
		a := startSpender(t, c, rec, "a", false, nil)
		b := startSpender(t, c, rec, "b", false, nil)
		time.Sleep(20 * time.Second)
		sa, sb := a.h.Stats(), b.h.Stats()
		a.stop()
		b.stop()
		if sa.Held != 2 || sb.Held != 2 {
			t.Errorf("held a=%d b=%d, want 2 each", sa.Held, sb.Held)
		}
		if got, bound := rec.maxInWindow(time.Second), 40+8; got > bound {
			t.Errorf("max spends in a second %d > L+B %d", got, bound)
		}
		// Utilization over the last 18 s (the first round trips aside).
		if got := rec.count(); got < int(0.95*40*19) {
			t.Errorf("spent %d in 20 s, want ≥ 95%% of 40/s", got)
		}
	})
}

// An idle holder gives its partitions back; a busy one takes them.
func TestBudgetFollowsDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := memlease.New(nil)
		rec := &recorder{}
		var aBusy atomic.Bool
		aBusy.Store(true)
		a := startSpender(t, c, rec, "a", false, &aBusy)
		b := startSpender(t, c, rec, "b", false, nil)
		time.Sleep(5 * time.Second)
		aBusy.Store(false)
		time.Sleep(3 * time.Second) // 3 TTLs
		sa, sb := a.h.Stats(), b.h.Stats()
		before := rec.count()
		time.Sleep(5 * time.Second)
		spent := rec.count() - before
		a.stop()
		b.stop()
		if sa.Held != 0 || sb.Held != 4 {
			t.Errorf("after a went idle: held a=%d b=%d, want 0 and 4", sa.Held, sb.Held)
		}
		if spent < int(0.9*40*5) {
			t.Errorf("b spent %d in 5 s after the change, want ≥ 90%% of 40/s", spent)
		}
		if got := rec.maxInWindow(time.Second); got > 48 {
			t.Errorf("max spends in a second %d > L+B 48", got)
		}
	})
}

// A holder cut from the Coordinator stops at its local deadline; the other
// takes its partitions over after the quarantine; the bound holds. The
// naive holder (the negative control) keeps spending and breaks it.
func TestCutHolderStopsAtItsDeadline(t *testing.T) {
	for _, naive := range []bool{false, true} {
		name := "safe"
		if naive {
			name = "naive"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := memlease.New(nil)
				rec := &recorder{}
				a := startSpender(t, c, rec, "a", naive, nil)
				b := startSpender(t, c, rec, "b", naive, nil)
				time.Sleep(5 * time.Second)
				a.link.cut.Store(true)
				time.Sleep(1200 * time.Millisecond)
				if !naive && a.h.Rate() != 0 {
					t.Errorf("cut holder's rate %v 1.2 TTL after the cut, want 0", a.h.Rate())
				}
				time.Sleep(3800 * time.Millisecond)
				sb := b.h.Stats()
				a.link.cut.Store(false)
				time.Sleep(5 * time.Second)
				a.stop()
				b.stop()
				got := rec.maxInWindow(time.Second)
				if naive {
					if got <= 48 {
						t.Errorf("negative control: the naive holder stayed within L+B (%d); the test cannot tell", got)
					}
					return
				}
				if got > 48 {
					t.Errorf("max spends in a second %d > L+B 48", got)
				}
				if sb.Held != 4 || sb.Quarantine == 0 {
					t.Errorf("b after the cut: held %d, quarantine %v; want 4 partitions, some quarantine", sb.Held, sb.Quarantine)
				}
			})
		})
	}
}

// Options that cannot hold the bound are refused with the reason.
func TestOptionsRefused(t *testing.T) {
	c := memlease.New(nil)
	for _, tc := range []struct {
		name string
		o    lease.Options
	}{
		{"no coordinator", lease.Options{Limit: fleetLimit}},
		{"partitions above the quota", lease.Options{Coordinator: c, Limit: sluice.Limit{Name: "x", Quota: 4, Window: time.Second, Burst: 10}, Partitions: 8}},
		{"burst per partition below one", lease.Options{Coordinator: c, Limit: sluice.Limit{Name: "x", Quota: 100, Window: time.Second, Burst: 4}, Partitions: 8}},
		{"renew not below half the ttl", lease.Options{Coordinator: c, Limit: fleetLimit, TTL: time.Second, Renew: 500 * time.Millisecond}},
		{"ttl shorter than renew", lease.Options{Coordinator: c, Limit: fleetLimit, TTL: time.Second, Renew: 2 * time.Second}},
		{"negative drift", lease.Options{Coordinator: c, Limit: fleetLimit, Drift: -time.Millisecond}},
		{"sliding window", lease.Options{Coordinator: c, Limit: sluice.Limit{Name: "x", Algorithm: sluice.SlidingWindow, Quota: 100, Window: time.Second}}},
		{"ttl below the minimum", lease.Options{Coordinator: c, Limit: fleetLimit, TTL: 10 * time.Millisecond, Renew: time.Millisecond}},
		{"bad member", lease.Options{Coordinator: c, Limit: fleetLimit, Member: "a|b"}},
		{"bad limit", lease.Options{Coordinator: c, Limit: sluice.Limit{Name: "x"}}},
	} {
		if _, err := lease.New(tc.o); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", tc.name, err)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}
