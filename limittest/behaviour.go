package limittest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// concurrency: slots are held until released or until the window passes.
func (s *suite) concurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, clock := s.store(t)
	slots := lim("slots", sluice.Concurrency, 2, 10*s1, 0)
	key := s.key(t, "k")
	a, _ := l.Allow(ctx, key, slots, 1)
	clock.Add(2 * s1)
	b, _ := l.Allow(ctx, key, slots, 1)
	if !a.Allowed || !b.Allowed || a.Ticket == 0 || b.Ticket == 0 || a.Ticket == b.Ticket {
		t.Fatalf("two grants: %+v, %+v; want both allowed with distinct tickets", a, b)
	}
	clock.Add(s1)
	if d, _ := l.Allow(ctx, key, slots, 1); d.Allowed || d.RetryAfter != 7*s1 || d.ResetAfter != 9*s1 {
		t.Fatalf("third while full: %+v; want rejected, retry 7s (first slot expires), reset 9s", d)
	}
	if err := l.Release(ctx, key, slots, b.Ticket); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, key, slots, b.Ticket); err != nil {
		t.Fatalf("releasing twice: %v, want nil", err)
	}
	c, _ := l.Allow(ctx, key, slots, 1)
	if !c.Allowed || c.Remaining != 0 {
		t.Fatalf("after Release: %+v; want allowed, 0 left", c)
	}
	// The first holder crashed: its slot frees itself at 10 s.
	clock.Set(Epoch.Add(10 * s1))
	if d, _ := l.Allow(ctx, key, slots, 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after the first slot expired: %+v; want allowed, 0 left", d)
	}
	if err := l.Release(ctx, key, slots, a.Ticket); err != nil {
		t.Fatalf("releasing an expired ticket: %v, want nil", err)
	}
	if d, _ := l.Allow(ctx, key, slots, 1); d.Allowed {
		t.Fatalf("an expired ticket's Release freed someone else's slot: %+v", d)
	}
}

// clockBackwards: a store that reads a clock does not fail when it steps
// back; it decides at the latest instant the key has seen (no refill).
// GCRA needs no clamp: an earlier instant only means less capacity. (The
// pure token bucket refuses such time with algo.ErrClockBackwards: see
// internal/algo.)
func (s *suite) clockBackwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, clock := s.store(t)
			limit := lim("back", alg, 2, s1, 0)
			key := s.key(t, "k")
			clock.Set(Epoch.Add(10 * s1))
			for range 2 {
				if d, err := l.Allow(ctx, key, limit, 1); err != nil || !d.Allowed {
					t.Fatalf("%+v, %v", d, err)
				}
			}
			at10, _ := l.Allow(ctx, key, limit, 1)
			clock.Set(Epoch.Add(5 * s1))
			back, err := l.Allow(ctx, key, limit, 1)
			if err != nil || back != at10 {
				t.Fatalf("5 s back: %+v, %v; want the decision at 10 s, %+v", back, err, at10)
			}
		})
	}
	t.Run("gcra", func(t *testing.T) {
		t.Parallel()
		l, clock := s.store(t)
		limit := lim("back", sluice.GCRA, 2, s1, 0)
		key := s.key(t, "k")
		clock.Set(Epoch.Add(10 * s1))
		l.Allow(ctx, key, limit, 1)
		clock.Set(Epoch.Add(10*s1 - 400*ms))
		// At 10 s a second unit would fit. Seen from 400 ms earlier, the
		// one spent at 10 s is 900 ms of backlog (1.8 units of the 2): it
		// does not, until 10 s.
		if d, err := l.Allow(ctx, key, limit, 1); err != nil || d.Allowed || d.Remaining != 0.2 || d.RetryAfter != 400*ms || d.ResetAfter != 900*ms {
			t.Fatalf("400 ms back: %+v, %v; want rejected, 0.2 left, retry 400ms, reset 900ms", d, err)
		}
	})
}

// parameterChange: a key's state belongs to its limit's parameters; the
// same name and key under other parameters start fresh.
func (s *suite) parameterChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := s.store(t)
	key := s.key(t, "k")
	five := lim("api", sluice.TokenBucket, 5, s1, 0)
	six := lim("api", sluice.TokenBucket, 6, s1, 0)
	for range 5 {
		l.Allow(ctx, key, five, 1)
	}
	if d, _ := l.Allow(ctx, key, five, 1); d.Allowed {
		t.Fatalf("under 5/s after five: %+v, want rejected", d)
	}
	if d, err := l.Allow(ctx, key, six, 1); err != nil || !d.Allowed || d.Remaining != 5 {
		t.Fatalf("under 6/s: %+v, %v; want a fresh bucket (allowed, 5 left)", d, err)
	}
	other := lim("other", sluice.TokenBucket, 5, s1, 0)
	if d, _ := l.Allow(ctx, key, other, 1); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("another limit name on the same key: %+v; want its own full bucket", d)
	}
}

// identities: a key's state belongs to (limit name, parameters, key), and
// nothing else: a name equal to a key, two pairs with name and key swapped,
// or the same name and key under other parameters are different states.
func (s *suite) identities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := s.store(t)
	hourly := func(name string) sluice.Limit { return lim(name, sluice.TokenBucket, 1, time.Hour, 0) }
	a, b := s.prefix+"-a", s.prefix+"-b" // names, and keys equal to them
	for _, c := range []struct{ name, key string }{{a, a}, {b, b}, {a, b}, {b, a}} {
		if d, err := l.Allow(ctx, c.key, hourly(c.name), 1); err != nil || !d.Allowed {
			t.Fatalf("limit %q, key %q: %+v, %v; want its own fresh bucket", c.name[len(s.prefix):], c.key[len(s.prefix):], d, err)
		}
	}
	x, y := s.prefix+"-x", s.prefix+"-y"
	d, err := l.AllowAll(ctx, []sluice.Request{{Key: x, Limit: hourly(y), Cost: 1}, {Key: y, Limit: hourly(x), Cost: 1}}, sluice.AllOrNothing, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowAll of swapped name and key: %+v, %v; want two independent limits", d, err)
	}
	// Two parameter sets under one name keep two states: going back to
	// the first finds it as it was left.
	key := s.key(t, "k")
	five := lim("api", sluice.TokenBucket, 5, time.Hour, 0)
	six := lim("api", sluice.TokenBucket, 6, time.Hour, 0)
	for range 5 {
		l.Allow(ctx, key, five, 1)
	}
	if d, _ := l.Allow(ctx, key, six, 1); !d.Allowed || d.Remaining != 5 {
		t.Fatalf("under 6/h: %+v; want a fresh bucket", d)
	}
	if d, _ := l.Allow(ctx, key, five, 1); d.Allowed {
		t.Fatalf("back under 5/h: %+v; want it still spent", d)
	}
}
