package memstore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
)

func newStore(t *testing.T, opts memstore.Options) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var ctx = context.Background()

func TestOptionsAreValidated(t *testing.T) {
	t.Parallel()
	for _, o := range []memstore.Options{
		{MaxKeys: -1},
		{Shards: 3},
		{Shards: -4},
		{Shards: 1 << 17},
		{MaxKeys: 10, Shards: 16},
	} {
		if s, err := memstore.New(o); err == nil {
			s.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// The store never holds more than MaxKeys keys; each key it drops while
// it still held live state is an eviction, and restarts full.
func TestMaxKeysBoundsTheStore(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(limittest.Epoch)
	s := newStore(t, memstore.Options{Now: clock.Now, MaxKeys: 1000, SweepInterval: -1})
	hourly := sluice.Limit{Name: "hourly", Quota: 1, Window: time.Hour}
	if d, _ := s.Allow(ctx, "victim", hourly, 1); !d.Allowed {
		t.Fatal("first call rejected")
	}
	for i := range 20_000 {
		if d, err := s.Allow(ctx, "k"+strconv.Itoa(i), hourly, 1); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v", i, d, err)
		}
		if i%997 == 0 {
			if n := s.Stats().Keys; n > 1000 {
				t.Fatalf("after %d keys the store holds %d, more than MaxKeys", i+2, n)
			}
		}
	}
	st := s.Stats()
	if st.Keys > 1000 || st.Keys < 900 {
		t.Fatalf("Keys = %d, want at most 1000 and not far below", st.Keys)
	}
	if inserted := uint64(20_001); st.Evictions+st.Expired != inserted-uint64(st.Keys) || st.Evictions == 0 {
		t.Fatalf("Evictions %d + Expired %d != inserted %d − held %d", st.Evictions, st.Expired, inserted, st.Keys)
	}
	// The victim, spent for an hour, was evicted by the flood (it had the
	// same reset as every other key, and 19,000 evictions sampled the
	// shard): it restarts full.
	if d, _ := s.Allow(ctx, "victim", hourly, 1); !d.Allowed {
		t.Fatalf("victim after the flood: %+v, want a fresh bucket", d)
	}
}

// Eviction prefers the keys closest to fresh: with room for 64 keys, a key
// that is far from its reset survives a flood of keys that reset sooner.
func TestEvictionKeepsTheKeysFarthestFromReset(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(limittest.Epoch)
	s := newStore(t, memstore.Options{Now: clock.Now, MaxKeys: 64, SweepInterval: -1})
	daily := sluice.Limit{Name: "daily", Quota: 1, Window: 24 * time.Hour}
	minutely := sluice.Limit{Name: "minutely", Quota: 1, Window: time.Minute}
	s.Allow(ctx, "spent-for-a-day", daily, 1)
	for i := range 10_000 {
		s.Allow(ctx, "m"+strconv.Itoa(i), minutely, 1)
	}
	if d, _ := s.Allow(ctx, "spent-for-a-day", daily, 1); d.Allowed {
		t.Fatal("the key farthest from its reset was evicted before keys that reset in a minute")
	}
}

// Sweep forgets exactly the keys that are back to full.
func TestSweepForgetsOnlyFreshKeys(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(limittest.Epoch)
	s := newStore(t, memstore.Options{Now: clock.Now, SweepInterval: -1})
	fast := sluice.Limit{Name: "fast", Quota: 10, Window: time.Second} // full 100 ms after a spend
	slow := sluice.Limit{Name: "slow", Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Hour}
	for i := range 100 {
		s.Allow(ctx, "k"+strconv.Itoa(i), fast, 1)
		s.Allow(ctx, "k"+strconv.Itoa(i), slow, 1)
	}
	if n := s.Sweep(); n != 0 {
		t.Fatalf("Sweep right away forgot %d keys", n)
	}
	clock.Add(2 * time.Second) // fast keys are full; their reset second has passed
	if n := s.Sweep(); n != 100 {
		t.Fatalf("Sweep forgot %d keys, want the 100 full ones", n)
	}
	if st := s.Stats(); st.Keys != 100 || st.Expired != 100 || st.Evictions != 0 {
		t.Fatalf("Stats = %+v, want 100 keys left, 100 expired, no eviction", st)
	}
	// Forgetting a full key loses nothing: it answers as before.
	if d, _ := s.Allow(ctx, "k1", fast, 1); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("a swept key: %+v, want a full bucket", d)
	}
	if d, _ := s.Allow(ctx, "k1", slow, 1); !d.Allowed || d.Remaining != 8 {
		t.Fatalf("a kept key: %+v, want its count kept (8 left)", d)
	}
}

// The background sweep runs every SweepInterval and stops with Close.
func TestBackgroundSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Options{Now: time.Now, SweepInterval: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		limit := sluice.Limit{Name: "l", Quota: 10, Window: time.Second}
		for i := range 10 {
			s.Allow(ctx, "k"+strconv.Itoa(i), limit, 1)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := s.Stats().Keys; n != 10 {
			t.Fatalf("before the first sweep: %d keys, want 10", n)
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 0 || st.Expired != 10 {
			t.Fatalf("after the first sweep: %+v, want none left", st)
		}
		s.Close()
		s.Close() // idempotent
	})
}

func TestCounters(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(limittest.Epoch)
	s := newStore(t, memstore.Options{Now: clock.Now, SweepInterval: -1})
	limit := sluice.Limit{Name: "c", Quota: 5, Window: time.Second}
	clock.Set(limittest.Epoch.Add(time.Hour))
	s.Allow(ctx, "k", limit, 1)
	clock.Set(limittest.Epoch)
	s.Allow(ctx, "k", limit, 1)
	changed := limit
	changed.Quota = 6
	s.Allow(ctx, "k", changed, 1) // another state: the limit's parameters changed
	if st := s.Stats(); st.ClockBackwards != 1 || st.Keys != 2 {
		t.Fatalf("Stats = %+v, want 1 clock step back, 2 keys", st)
	}
}

// A decision on a key the store holds allocates nothing, for every
// fixed-size algorithm; so does a new key's.
func TestDecisionsDoNotAllocate(t *testing.T) {
	s := newStore(t, memstore.Options{MaxKeys: 1 << 16})
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindow, sluice.LeakyBucket} {
		limit := sluice.Limit{Name: "alloc", Algorithm: alg, Quota: 1e9, Window: time.Second}
		s.Allow(ctx, "hot", limit, 1)
		if n := testing.AllocsPerRun(1000, func() { s.Allow(ctx, "hot", limit, 1) }); n != 0 {
			t.Errorf("%v: %v allocations per decision on a held key", alg, n)
		}
	}
	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = "new-" + strconv.Itoa(i)
	}
	limit := sluice.Limit{Name: "alloc", Quota: 1e9, Window: time.Second}
	for _, k := range keys[:1000] { // let the tables grow first
		s.Allow(ctx, k, limit, 1)
	}
	i := 1000
	if n := testing.AllocsPerRun(500, func() { s.Allow(ctx, keys[i], limit, 1); i++ }); n > 0.05 {
		t.Errorf("%v allocations per new key (table growth aside)", n)
	}
}

func TestDefaultClockDecides(t *testing.T) {
	t.Parallel()
	for _, res := range []time.Duration{0, -1} {
		s := newStore(t, memstore.Options{ClockResolution: res})
		limit := sluice.Limit{Name: "d", Quota: 2, Window: time.Hour}
		s.Allow(ctx, "k", limit, 1)
		s.Allow(ctx, "k", limit, 1)
		if d, err := s.Allow(ctx, "k", limit, 1); err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 30*time.Minute {
			t.Fatalf("resolution %v: third of 2 per hour: %+v, %v", res, d, err)
		}
	}
}

func TestErrorsAreSentinels(t *testing.T) {
	t.Parallel()
	s := newStore(t, memstore.Options{})
	if _, err := s.Allow(ctx, "k", sluice.Limit{}, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Fatalf("zero limit: %v", err)
	}
}

// After the clock steps back, a key's reset is still measured from the
// instant its state holds: the sweep must not forget it early.
func TestSweepAfterClockStepsBack(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(limittest.Epoch.Add(100 * time.Second))
	s := newStore(t, memstore.Options{Now: clock.Now, SweepInterval: -1})
	limit := sluice.Limit{Name: "tb", Quota: 10, Window: 10 * time.Second}
	if d, _ := s.Allow(ctx, "k", limit, 10); !d.Allowed {
		t.Fatal("the first spend was refused")
	}
	clock.Set(limittest.Epoch.Add(50 * time.Second)) // 50 s back: clamped to 100 s
	s.Allow(ctx, "k", limit, 1)
	clock.Set(limittest.Epoch.Add(101 * time.Second)) // one token back
	if n := s.Sweep(); n != 0 {
		t.Fatalf("Sweep forgot %d keys 1 s after the bucket emptied", n)
	}
	if d, _ := s.Allow(ctx, "k", limit, 10); d.Allowed {
		t.Fatalf("10 admitted 1 s after emptying a 10 per 10 s bucket: %+v", d)
	}
}

// Making room for one key of a multi-limit call never evicts another key
// of the same call: what the call charged stays charged.
func TestAllowAllNeverEvictsItsOwnKeys(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(limittest.Epoch)
	s := newStore(t, memstore.Options{Now: clock.Now, MaxKeys: 2, Shards: 1, SweepInterval: -1})
	hourly := func(name string) sluice.Limit { return sluice.Limit{Name: name, Quota: 1, Window: time.Hour} }
	s.Allow(ctx, "bystander", hourly("b"), 1)
	reqs := []sluice.Request{{Key: "x", Limit: hourly("x"), Cost: 1}, {Key: "y", Limit: hourly("y"), Cost: 1}, {Key: "z", Limit: hourly("z"), Cost: 1}}
	if d, err := s.AllowAll(ctx, reqs, sluice.AllOrNothing, nil); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	for _, r := range reqs {
		if d, _ := s.Allow(ctx, r.Key, r.Limit, 1); d.Allowed {
			t.Fatalf("%s: charged by the call, then evicted by it: %+v", r.Key, d)
		}
	}
	if d, _ := s.Allow(ctx, "bystander", hourly("b"), 1); !d.Allowed {
		t.Fatal("the bystander, the only key the call could evict, was kept")
	}
}
