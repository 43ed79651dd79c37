package redisscript_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
)

// A key Redis rejected until T is rejected locally until T, and only then
// asked again.
func TestDenyCache(t *testing.T) {
	t.Parallel()
	c := &counting{Client: sharedClient(t)}
	clock := limittest.NewClock(time.Now())
	s := newStore(t, redisscript.Options{Client: c, DenyCache: 100, TestNow: clock.Now, Timeout: patient})
	limit := sluice.Limit{Name: "deny", Quota: 10, Window: 100 * time.Millisecond, Burst: 1} // a token every 10 ms
	key := unique(t, "k")
	s.Allow(ctx, key, limit, 1)
	d, _ := s.Allow(ctx, key, limit, 1)
	if d.Allowed {
		t.Fatal("second call of a burst of 1 allowed")
	}
	calls := c.calls.Load()
	for range 50 {
		if d, _ := s.Allow(ctx, key, limit, 1); d.Allowed || d.RetryAfter != 10*time.Millisecond {
			t.Fatalf("a cached rejection: %+v", d)
		}
	}
	if n := c.calls.Load() - calls; n != 0 || s.Stats().DenyCacheHits < 50 {
		t.Fatalf("%d calls and %d cache hits for 50 calls inside the rejection", n, s.Stats().DenyCacheHits)
	}
	clock.Add(10 * time.Millisecond) // the RetryAfter: the cache lets the next call through
	if d, _ := s.Allow(ctx, key, limit, 1); !d.Allowed {
		t.Fatalf("after RetryAfter: %+v", d)
	}

	// A smaller cost than the one rejected may fit: it asks Redis.
	big := sluice.Limit{Name: "deny-big", Quota: 10, Window: time.Second}
	s.Allow(ctx, key, big, 9)
	if d, _ := s.Allow(ctx, key, big, 2); d.Allowed {
		t.Fatalf("cost 2 with 1 left: %+v", d)
	}
	calls = c.calls.Load()
	if d, _ := s.Allow(ctx, key, big, 1); !d.Allowed || c.calls.Load() != calls+1 {
		t.Fatalf("cost 1 after cost 2 was rejected: %+v, %d calls; want allowed by Redis", d, c.calls.Load()-calls)
	}
	// A concurrency limit is never cached: a release frees its slots at
	// any moment.
	slots := sluice.Limit{Name: "deny-slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
	held, _ := s.Allow(ctx, key, slots, 1)
	if d, _ := s.Allow(ctx, key, slots, 1); d.Allowed {
		t.Fatalf("a second slot of 1: %+v", d)
	}
	if err := s.Release(ctx, key, slots, held.Ticket); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Allow(ctx, key, slots, 1); !d.Allowed {
		t.Fatalf("after the release: %+v; want the freed slot, not a cached rejection", d)
	}
}

// A caller whose context ends first — cancelled, or its own deadline,
// sooner than Timeout — gets its error back, not a policy decision. For
// the breaker, a cancel or a short deadline says nothing about Redis; a
// deadline that gave Redis most of Timeout is a failure of Redis (callers
// that always pass deadlines must still open the breaker).
func TestCallerContextIsNotAnOutage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		want    error
		counted bool // a failure of Redis for the breaker
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			time.AfterFunc(20*time.Millisecond, cancel)
			return c, cancel
		}, context.Canceled, false},
		{"deadline of a tenth of Timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 20*time.Millisecond)
		}, context.DeadlineExceeded, false},
		{"deadline of most of Timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 195*time.Millisecond)
		}, context.DeadlineExceeded, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			proxy := redistest.StartProxy(t, srv.Addr())
			s := newStore(t, redisscript.Options{Client: redisstore.NewRueidis(newRueidis(t, proxy.Addr())), Timeout: 200 * time.Millisecond, BreakerFailures: 1})
			limit := sluice.Limit{Name: "cancel", Quota: 5, Window: time.Second}
			if _, err := s.Allow(ctx, "k", limit, 1); err != nil {
				t.Fatal(err)
			}
			proxy.Blackhole(true)
			callCtx, cancel := c.ctx()
			defer cancel()
			if d, err := s.Allow(callCtx, "k", limit, 1); !errors.Is(err, c.want) || d.Allowed {
				t.Fatalf("Allow = %+v, %v; want no decision and %v", d, err, c.want)
			}
			proxy.Blackhole(false)
			st := s.Stats()
			if st.FailOpen != 0 || (st.Failures == 1) != c.counted || st.BreakerOpen != c.counted {
				t.Fatalf("Stats = %+v; want a failure of Redis and the breaker open: %v", st, c.counted)
			}
		})
	}
}

// What the policies decide beyond allow and reject, Redis being down: a
// cost that never fits is refused whatever the policy; FailLocal keeps a
// concurrency ticket and divides every amount of the limit among the
// instances; a call another part rejects spends nothing locally.
func TestFallbackDecisions(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := newStore(t, redisscript.Options{
		Client: redisstore.NewRueidis(newRueidis(t, srv.Addr())), Timeout: 30 * time.Millisecond,
		BreakerCooldown: time.Hour, Instances: 3, Policy: sluice.FailLocal,
		Policies: map[string]sluice.FailurePolicy{"open": sluice.FailOpen, "closed": sluice.FailClosed},
	})
	srv.Kill()

	t.Run("cost that never fits", func(t *testing.T) {
		open := sluice.Limit{Name: "open", Quota: 10, Window: time.Second}
		d, err := s.Allow(ctx, "k", open, 11)
		if !errors.Is(err, sluice.ErrCostExceedsLimit) || d.Allowed || d.RetryAfter != sluice.Never {
			t.Fatalf("fail_open, cost 11 of 10: %+v, %v; want Never and ErrCostExceedsLimit", d, err)
		}
	})
	t.Run("concurrency ticket", func(t *testing.T) {
		slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 7, Window: time.Hour}
		d, err := s.Allow(ctx, "k", slots, 2) // 7/3 → 2 slots here
		if err != nil || !d.Allowed || d.Ticket == 0 || d.Limit != slots {
			t.Fatalf("fail_local concurrency: %+v, %v; want allowed with a ticket", d, err)
		}
		if d2, _ := s.Allow(ctx, "k", slots, 1); d2.Allowed {
			t.Fatalf("a third slot of 7/3: %+v", d2)
		}
		if err := s.Release(ctx, "k", slots, d.Ticket); err == nil {
			t.Fatal("Release with Redis down: no error")
		}
		if d3, _ := s.Allow(ctx, "k", slots, 2); !d3.Allowed {
			t.Fatalf("after the release, locally: %+v", d3)
		}
	})
	t.Run("scaled amounts", func(t *testing.T) {
		for _, c := range []struct {
			limit sluice.Limit
			cost  float64
			left  float64 // Remaining after the cost, at a third of the limit
		}{
			{sluice.Limit{Name: "tb", Quota: 10, Window: time.Hour}, 1, 2.333333},
			{sluice.Limit{Name: "tb-burst", Quota: 10, Window: time.Hour, Burst: 31}, 1, 9.333333},
			{sluice.Limit{Name: "log", Algorithm: sluice.SlidingLog, Quota: 10, Window: time.Hour}, 1, 2},
			{sluice.Limit{Name: "leaky", Algorithm: sluice.LeakyBucket, Quota: 9, Window: time.Hour, Burst: 9, DelayThreshold: 6}, 1, 2},
		} {
			d, err := s.Allow(ctx, "k", c.limit, c.cost)
			if err != nil || !d.Allowed || d.Remaining != c.left || d.Limit != c.limit {
				t.Errorf("%v: %+v, %v; want allowed, %v left", c.limit, d, err, c.left)
			}
		}
		// A third of the leaky bucket's threshold (1 of 3): the third
		// unit, queued behind two, waits (behind the whole threshold of 3
		// it would not).
		leaky := sluice.Limit{Name: "leaky2", Algorithm: sluice.LeakyBucket, Quota: 9, Window: 9 * time.Second, Burst: 9, DelayThreshold: 3}
		var delays []time.Duration
		for range 3 {
			d, _ := s.Allow(ctx, "k", leaky, 1)
			delays = append(delays, d.Delay)
		}
		if delays[0] != 0 || delays[1] != 0 || delays[2] == 0 {
			t.Errorf("delays %v; want the first two free (threshold 3/3), the third delayed", delays)
		}
		// Too large for this instance's share, though within the limit:
		// rejected, as by FailClosed, and no error.
		big := sluice.Limit{Name: "big", Quota: 10, Window: time.Hour}
		if d, err := s.Allow(ctx, "k", big, 5); err != nil || d.Allowed || d.RetryAfter != time.Second {
			t.Errorf("cost 5 of a share of 3.3: %+v, %v; want rejected for 1 s", d, err)
		}
	})
	t.Run("charges", func(t *testing.T) {
		// FailLocal charges this process's share (a debt it waits out);
		// under the other policies the charge is dropped and counted.
		local := sluice.Limit{Name: "charged", Quota: 9, Window: time.Hour} // 3 here
		if d, err := s.Charge(ctx, "c", local, 5); err != nil || !d.Allowed || d.Limit != local {
			t.Fatalf("fail_local charge: %+v, %v", d, err)
		}
		if d, _ := s.Allow(ctx, "c", local, 1); d.Allowed {
			t.Fatalf("after a charge of 5 on a share of 3: %+v; want the debt waited out", d)
		}
		open := sluice.Limit{Name: "open", Quota: 9, Window: time.Hour}
		before := s.Stats().ChargesDropped
		if d, err := s.Charge(ctx, "c", open, 5); err != nil || !d.Allowed {
			t.Fatalf("fail_open charge: %+v, %v", d, err)
		}
		if s.Stats().ChargesDropped != before+1 {
			t.Fatalf("ChargesDropped %d, want %d", s.Stats().ChargesDropped, before+1)
		}
	})
	t.Run("rejected call spends nothing locally", func(t *testing.T) {
		local := sluice.Limit{Name: "local", Quota: 3, Window: time.Hour} // 1 here
		closed := sluice.Limit{Name: "closed", Quota: 3, Window: time.Hour}
		slots := sluice.Limit{Name: "slots2", Algorithm: sluice.Concurrency, Quota: 3, Window: time.Hour}
		each := make([]sluice.Decision, 3)
		for _, mode := range []sluice.Mode{sluice.AllOrNothing, sluice.RejectionsCount} {
			reqs := []sluice.Request{{Key: mode.String(), Limit: local, Cost: 1}, {Key: mode.String(), Limit: slots, Cost: 1}, {Key: mode.String(), Limit: closed, Cost: 1}}
			if d, err := s.AllowAll(ctx, reqs, mode, each); err != nil || d.Allowed || d.Limit != closed {
				t.Fatalf("%v: %+v, %v; want rejected by fail_closed", mode, d, err)
			}
			if each[1].Ticket != 0 {
				t.Fatalf("%v: a ticket for a rejected call: %+v", mode, each[1])
			}
			d, _ := s.Allow(ctx, mode.String(), local, 1)
			if want := mode == sluice.AllOrNothing; d.Allowed != want {
				t.Fatalf("%v: the local limit after the rejected call: %+v; allowed want %v", mode, d, want)
			}
			if d, _ := s.Allow(ctx, mode.String(), slots, 1); !d.Allowed {
				t.Fatalf("%v: the concurrency limit after the rejected call: %+v; want its slot free", mode, d)
			}
		}
	})
}

// PolicyOf is asked at each failure, so a policy that changes (a reloaded
// configuration) is the one applied; Policies still wins for the limits it
// names, and Policy answers for the limits PolicyOf does not know.
func TestPolicyOfIsLive(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	var live atomic.Int32 // 0: not known, 1: fail_closed, 2: fail_open
	s := newStore(t, redisscript.Options{
		Client: redisstore.NewRueidis(newRueidis(t, srv.Addr())), Timeout: 30 * time.Millisecond,
		BreakerCooldown: time.Hour, Policy: sluice.FailOpen,
		Policies: map[string]sluice.FailurePolicy{"named": sluice.FailClosed},
		PolicyOf: func(l sluice.Limit) (sluice.FailurePolicy, bool) {
			switch live.Load() {
			case 1:
				return sluice.FailClosed, true
			case 2:
				return sluice.FailOpen, true
			}
			return 0, false
		},
	})
	limit := sluice.Limit{Name: "reloaded", Quota: 10, Window: time.Second}
	if d, err := s.Allow(ctx, "k", limit, 1); err != nil || !d.Allowed {
		t.Fatalf("Redis up: %+v, %v", d, err)
	}
	srv.Kill()
	for _, c := range []struct {
		live    int32
		allowed bool
	}{{0, true}, {1, false}, {2, true}, {1, false}} {
		live.Store(c.live)
		if d, _ := s.Allow(ctx, "k", limit, 1); d.Allowed != c.allowed {
			t.Errorf("PolicyOf state %d: allowed %v, want %v", c.live, d.Allowed, c.allowed)
		}
	}
	live.Store(2)
	if d, _ := s.Allow(ctx, "k", sluice.Limit{Name: "named", Quota: 10, Window: time.Second}, 1); d.Allowed {
		t.Error("a limit Policies names: PolicyOf overrode it")
	}
}

// A check that spends nothing obeys the policy during an outage, as a
// spending call does: fail_open allows, fail_closed rejects, fail_local
// reports the local state.
func TestCheckObeysThePolicy(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := newStore(t, redisscript.Options{
		Client: redisstore.NewRueidis(newRueidis(t, srv.Addr())), Timeout: 30 * time.Millisecond,
		Policies: map[string]sluice.FailurePolicy{"check-closed": sluice.FailClosed, "check-local": sluice.FailLocal},
	})
	open := sluice.Limit{Name: "check-open", Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Hour}
	closed := sluice.Limit{Name: "check-closed", Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Hour}
	local := sluice.Limit{Name: "check-local", Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Hour}
	s.Allow(ctx, "k", open, 1)
	if d, err := s.Check(ctx, "k", open); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("Redis up: %+v, %v; want allowed, 2 left, nothing spent", d, err)
	}
	if d, _ := s.Check(ctx, "k", open); d.Remaining != 2 {
		t.Fatalf("a second check: %+v; a check spends nothing", d)
	}
	srv.Kill()
	if d, err := s.Check(ctx, "k", open); err != nil || !d.Allowed {
		t.Errorf("fail_open, Redis down: %+v, %v; want allowed", d, err)
	}
	if d, err := s.Check(ctx, "k", closed); err != nil || d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("fail_closed, Redis down: %+v, %v; want rejected, RetryAfter 1 s", d, err)
	}
	s.Allow(ctx, "k", local, 1) // spent locally
	if d, err := s.Check(ctx, "k", local); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Errorf("fail_local, Redis down: %+v, %v; want the local state, 2 left", d, err)
	}
	if _, err := s.Check(ctx, "", open); err == nil {
		t.Error("an empty key: no error; bad input is an error whatever the policy")
	}
}

// Ping answers through the breaker: nil with Redis up, the error with it
// down (the breaker's once open, without a call). Reset forgets a key's
// state in Redis and its cached rejection.
func TestPingAndReset(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := &counting{Client: redisstore.NewRueidis(newRueidis(t, srv.Addr()))}
	s := newStore(t, redisscript.Options{Client: c, DenyCache: 10, Timeout: patient, BreakerFailures: 1, BreakerCooldown: time.Hour})
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping, Redis up: %v", err)
	}
	limit := sluice.Limit{Name: "reset", Quota: 1, Window: time.Hour}
	s.Allow(ctx, "k", limit, 1)
	if d, _ := s.Allow(ctx, "k", limit, 1); d.Allowed {
		t.Fatalf("a second call of 1 per hour: %+v", d)
	}
	if err := s.Reset(ctx, "k", limit); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Allow(ctx, "k", limit, 1); err != nil || !d.Allowed {
		t.Fatalf("after Reset: %+v, %v; want allowed (state and cached rejection forgotten)", d, err)
	}
	srv.Kill()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping, Redis down: no error")
	}
	calls := c.calls.Load()
	if err := s.Ping(ctx); err == nil || c.calls.Load() != calls || !s.Stats().BreakerOpen {
		t.Fatalf("Ping, breaker open: %v, %d calls; want an error and no call", err, c.calls.Load()-calls)
	}
}
