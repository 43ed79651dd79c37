package limittest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// allowAll checks several limits per request: declared order, all-or-nothing
// by default, rejections count on request, RetryAfter the longest of the
// rejecting ones, a never-fitting part.
func (s *suite) allowAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	perIP := lim("per-ip", sluice.TokenBucket, 2, time.Minute, 2)     // 2 at once, one per 30 s
	perUser := lim("per-user", sluice.TokenBucket, 3, time.Minute, 3) // 3 at once, one per 20 s
	global := lim("global", sluice.FixedWindow, 100, time.Minute, 0)

	t.Run("AllOrNothing", func(t *testing.T) {
		t.Parallel()
		l, _ := s.store(t)
		reqs := []sluice.Request{
			{Key: s.key(t, "ip"), Limit: perIP, Cost: 1},
			{Key: s.key(t, "user"), Limit: perUser, Cost: 1},
			{Key: s.key(t, "global"), Limit: global, Cost: 1},
		}
		each := make([]sluice.Decision, len(reqs))
		for i := range 2 {
			d, err := l.AllowAll(ctx, reqs, sluice.AllOrNothing, each)
			if err != nil || !d.Allowed {
				t.Fatalf("request %d: %+v, %v", i, d, err)
			}
		}
		// The IP limit now rejects: nothing is spent anywhere.
		d, err := l.AllowAll(ctx, reqs, sluice.AllOrNothing, each)
		if err != nil || d.Allowed || d.Limit.Name != "per-ip" || d.RetryAfter != 30*s1 {
			t.Fatalf("third request: %+v, %v; want rejected by per-ip, retry 30s", d, err)
		}
		want := []Want{reject(0, 30*s1, time.Minute), allow(1, 40*s1), allow(98, time.Minute)}
		for i, w := range want {
			if err := w.Check(each[i], nil); err != nil {
				t.Errorf("each[%d] (%s): %v", i, reqs[i].Limit.Name, err)
			}
		}
		// Proof that nothing was spent: the user limit alone still has one.
		if d, _ := l.Allow(ctx, reqs[1].Key, perUser, 1); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("per-user after a rejected request: %+v, want allowed with 0 left", d)
		}
	})

	t.Run("RejectionsCount", func(t *testing.T) {
		t.Parallel()
		l, _ := s.store(t)
		reqs := []sluice.Request{
			{Key: s.key(t, "ip"), Limit: perIP, Cost: 1},
			{Key: s.key(t, "user"), Limit: perUser, Cost: 1},
		}
		each := make([]sluice.Decision, 2)
		for range 2 {
			if d, err := l.AllowAll(ctx, reqs, sluice.RejectionsCount, each); err != nil || !d.Allowed {
				t.Fatalf("%+v, %v", d, err)
			}
		}
		d, err := l.AllowAll(ctx, reqs, sluice.RejectionsCount, each)
		if err != nil || d.Allowed {
			t.Fatalf("third request: %+v, %v; want rejected", d, err)
		}
		if err := allow(0, time.Minute).Check(each[1], nil); err != nil {
			t.Fatalf("per-user was not charged for the rejected request: %v", err)
		}
		if d, _ := l.Allow(ctx, reqs[1].Key, perUser, 1); d.Allowed {
			t.Fatalf("per-user after a counted rejection: %+v, want rejected", d)
		}
	})

	t.Run("RetryAfterIsTheLongest", func(t *testing.T) {
		t.Parallel()
		l, _ := s.store(t)
		reqs := []sluice.Request{
			{Key: s.key(t, "user"), Limit: perUser, Cost: 3}, // empties it: 20 s to refill one
			{Key: s.key(t, "ip"), Limit: perIP, Cost: 2},     // empties it: 30 s to refill one
		}
		if d, err := l.AllowAll(ctx, reqs, sluice.AllOrNothing, nil); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
		reqs[0].Cost, reqs[1].Cost = 1, 1
		d, err := l.AllowAll(ctx, reqs, sluice.AllOrNothing, nil)
		if err != nil || d.Allowed || d.RetryAfter != 30*s1 || d.Limit.Name != "per-ip" {
			t.Fatalf("%+v, %v; want rejected by per-ip after 30s", d, err)
		}
	})

	t.Run("CombinedAllowedIsTheLeastRemaining", func(t *testing.T) {
		t.Parallel()
		l, _ := s.store(t)
		reqs := []sluice.Request{
			{Key: s.key(t, "global"), Limit: global, Cost: 1},
			{Key: s.key(t, "ip"), Limit: perIP, Cost: 1},
			{Key: s.key(t, "user"), Limit: perUser, Cost: 2},
		}
		d, err := l.AllowAll(ctx, reqs, sluice.AllOrNothing, nil)
		if err != nil || !d.Allowed || d.Limit.Name != "per-ip" || d.Remaining != 1 {
			// per-ip and per-user both have 1 left: the first declared wins.
			t.Fatalf("%+v, %v; want allowed, reported by per-ip with 1 left", d, err)
		}
	})

	t.Run("NeverFittingPart", func(t *testing.T) {
		t.Parallel()
		l, _ := s.store(t)
		reqs := []sluice.Request{
			{Key: s.key(t, "user"), Limit: perUser, Cost: 1},
			{Key: s.key(t, "ip"), Limit: perIP, Cost: 3},
		}
		each := make([]sluice.Decision, 2)
		d, err := l.AllowAll(ctx, reqs, sluice.AllOrNothing, each)
		if !errors.Is(err, sluice.ErrCostExceedsLimit) || !d.Never() || d.Limit.Name != "per-ip" {
			t.Fatalf("%+v, %v; want Never from per-ip with ErrCostExceedsLimit", d, err)
		}
		if err := allow(3, 0).Check(each[0], nil); err != nil {
			t.Fatalf("each[0]: %v (nothing may be spent)", err)
		}
	})

	t.Run("ConcurrencyIsHeldOnlyWhenAllowed", func(t *testing.T) {
		t.Parallel()
		l, clock := s.store(t)
		slots := lim("slots", sluice.Concurrency, 1, time.Minute, 0)
		reqs := []sluice.Request{
			{Key: s.key(t, "slots"), Limit: slots, Cost: 1},
			{Key: s.key(t, "ip"), Limit: perIP, Cost: 2},
		}
		each := make([]sluice.Decision, 2)
		for _, mode := range []sluice.Mode{sluice.AllOrNothing, sluice.RejectionsCount} {
			d, err := l.AllowAll(ctx, reqs, mode, each)
			if err != nil || !d.Allowed || each[0].Ticket == 0 || d.Ticket != 0 {
				t.Fatalf("%v: %+v / %+v, %v; want allowed with the ticket in each[0] only", mode, d, each[0], err)
			}
			if err := l.Release(ctx, reqs[0].Key, slots, each[0].Ticket); err != nil {
				t.Fatal(err)
			}
			// per-ip is empty now: the slot must not be taken.
			d, err = l.AllowAll(ctx, reqs, mode, each)
			if err != nil || d.Allowed || each[0].Ticket != 0 || !each[0].Allowed || each[0].Remaining != 1 {
				t.Fatalf("%v, rejected: %+v / each[0] %+v, %v; want the slot free and no ticket", mode, d, each[0], err)
			}
			clock.Add(time.Minute) // refill per-ip
		}
	})
}
