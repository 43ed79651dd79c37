package algo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/limittest"
)

// pureLimiter runs the pure algorithms, one goroutine at a time, with no
// store in between: the conformance timelines are the algorithms' own spec.
type pureLimiter struct {
	sluice.Limiter // only Allow is used
	now            func() time.Time
	states         map[string]algo.State
}

func (l *pureLimiter) Allow(_ context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	p, err := algo.Compile(limit)
	if err != nil {
		return sluice.Decision{}, err
	}
	atoms, err := p.Cost(cost)
	if err != nil {
		return sluice.Decision{}, err
	}
	now := l.now().UnixMicro()
	id := limit.String() + "\x00" + key
	s, ok := l.states[id]
	if !ok {
		s = algo.NewState(limit.Algorithm)
		s.Init(p, now)
		l.states[id] = s
	}
	r, err := s.Step(p, algo.Call{Now: now, Cost: atoms, Ticket: 1}, true)
	return r.Decision(limit, 1), err
}

func TestTimelines(t *testing.T) {
	t.Parallel()
	for _, tl := range limittest.Timelines {
		t.Run(tl.Name, func(t *testing.T) {
			t.Parallel()
			clock := limittest.NewClock(limittest.Epoch)
			l := &pureLimiter{now: clock.Now, states: map[string]algo.State{}}
			limittest.PlayTimeline(t, l, clock, tl, func(k string) string { return k })
		})
	}
}

// Time moving backwards is an error for the pure token bucket
// (stores clamp instead: see limittest's ClockBackwards).
func TestNegativeTimeMovementRejected(t *testing.T) {
	t.Parallel()
	clock := limittest.NewClock(limittest.Epoch.Add(time.Second))
	l := &pureLimiter{now: clock.Now, states: map[string]algo.State{}}
	seed := sluice.Limit{Name: "seed", Quota: 2, Window: time.Second, Burst: 5}
	if d, err := l.Allow(context.Background(), "k", seed, 1); err != nil || !d.Allowed {
		t.Fatalf("at 1s: %+v, %v", d, err)
	}
	clock.Set(limittest.Epoch.Add(999 * time.Millisecond))
	if d, err := l.Allow(context.Background(), "k", seed, 1); !errors.Is(err, algo.ErrClockBackwards) || d.Allowed {
		t.Fatalf("1 ms back: %+v, %v; want ErrClockBackwards", d, err)
	}
}
