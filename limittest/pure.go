package limittest

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// matchesPureAlgorithms replays random traces of every algorithm on the
// store and on the pure algorithm (internal/algo) as a store runs it —
// clamping a clock that steps back, keeping a key's state only once
// something was spent on it, and forgetting it when a release leaves it
// fresh — which is the specification: decisions must be
// identical, to the microsecond. Traces mix integer and fractional quotas
// and costs, round and odd windows, limits at the edge of exact arithmetic,
// a clock that sometimes steps back, charges (when the store is a
// sluice.Charger) and, for concurrency, releases.
func (s *suite) matchesPureAlgorithms(t *testing.T) {
	t.Parallel()
	for _, alg := range Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(alg), seed(t)))
			l, clock := s.store(t)
			charger, _ := l.(sluice.Charger)
			for trace := range 100 {
				limit := randomLimit(rng, alg, trace)
				p, err := algo.Compile(limit)
				if err != nil {
					t.Fatalf("trace %d: %v", trace, err)
				}
				pure := algo.NewState(alg)
				now := Epoch.UnixMicro()
				fresh := true // no state yet: a store has nothing for the key
				key := s.key(t, "trace-"+strconv.Itoa(trace))
				var tickets []uint64 // the store's, by grant order
				var pureTickets []uint64
				for i := range 60 {
					switch rng.IntN(12) {
					case 0:
						// The clock steps back (a wall clock adjusted, a
						// failover to a server whose clock is behind).
						now = max(now-randomGap(rng, limit), Epoch.UnixMicro())
					case 1, 2, 3:
					default:
						// Real clocks read instants of this century: keep the
						// trace within 100 years of Epoch.
						now = min(now+randomGap(rng, limit), Epoch.UnixMicro()+centuryMicros)
					}
					clock.Set(time.UnixMicro(now))
					if alg == sluice.Concurrency && len(tickets) > 0 && rng.IntN(4) == 0 {
						j := rng.IntN(len(tickets))
						if err := l.Release(ctx, key, limit, tickets[j]); err != nil {
							t.Fatalf("trace %d, call %d: Release: %v", trace, i, err)
						}
						if !fresh {
							pure.(*algo.Concurrency).Release(pureTickets[j])
							// A store forgets a state that is fresh at once.
							fresh = pure.ResetAt(p) <= now
						}
						continue
					}
					cost := randomCost(rng, limit)
					// One call in six on a chargeable limit is a charge, of up
					// to three capacities.
					charge := charger != nil && p.Chargeable() == nil && rng.IntN(6) == 0
					var got sluice.Decision
					var gotErr error
					if charge {
						cost = min(cost*float64(1+rng.IntN(3)), 4e9)
						got, gotErr = charger.Charge(ctx, key, limit, cost)
					} else {
						got, gotErr = l.Allow(ctx, key, limit, cost)
					}
					atoms, err := p.Cost(cost)
					if err != nil {
						t.Fatalf("trace %d: cost %v: %v", trace, cost, err)
					}
					if fresh {
						pure.Init(p, now)
					}
					res, wantErr := pure.Step(p, algo.Call{Now: now, Cost: atoms, Ticket: uint64(i + 1), Clamp: true, Force: charge}, true)
					fresh = fresh && !res.Allowed()
					want := res.Decision(limit, uint64(i+1))
					if got.Allowed && alg == sluice.Concurrency {
						tickets, pureTickets = append(tickets, got.Ticket), append(pureTickets, want.Ticket)
						if got.Ticket == 0 {
							t.Fatalf("trace %d, call %d: allowed without a ticket", trace, i)
						}
						got.Ticket = want.Ticket
					}
					if got != want || (gotErr == nil) != (wantErr == nil) {
						t.Fatalf("trace %d (%v), call %d at +%vµs, cost %v:\nstore %+v (err %v)\npure  %+v (err %v)",
							trace, limit, i, now-Epoch.UnixMicro(), cost, got, gotErr, want, wantErr)
					}
				}
			}
		})
	}
}

const centuryMicros = 100 * 365 * 24 * 3600 * 1e6

// Algorithms lists every algorithm, in declaration order.
var Algorithms = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingLog,
	sluice.SlidingWindow, sluice.LeakyBucket, sluice.Concurrency}

var roundWindows = []time.Duration{ms, 10 * ms, s1, 3 * s1, time.Minute, time.Hour}

func randomLimit(rng *rand.Rand, alg sluice.Algorithm, trace int) sluice.Limit {
	l := sluice.Limit{Name: "pure-" + strconv.Itoa(trace), Algorithm: alg}
	if trace%10 == 9 {
		return hugeLimit(rng, l)
	}
	for {
		l.Quota = float64(1 + rng.IntN(30))
		if !l.WholeUnits() && rng.IntN(2) == 0 {
			l.Quota = float64(1+rng.IntN(400)) / 4
		}
		l.Window = roundWindows[rng.IntN(len(roundWindows))]
		if rng.IntN(3) == 0 {
			l.Window = time.Duration(1+rng.Int64N(1e7)) * time.Microsecond
		}
		l.Burst, l.DelayThreshold = 0, 0
		if l.HasBurst() && rng.IntN(2) == 0 {
			l.Burst = float64(1+rng.IntN(100)) / 2
		}
		if alg == sluice.LeakyBucket && rng.IntN(2) == 0 {
			l.DelayThreshold = float64(rng.IntN(int(l.Capacity()) + 1))
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// hugeLimit draws limits near the edges of exact arithmetic (capacities
// and rates close to 2^52 scaled units, windows up to ten years), where a
// store computing in doubles would first lose a unit.
func hugeLimit(rng *rand.Rand, l sluice.Limit) sluice.Limit {
	windows := []time.Duration{time.Microsecond, 7 * time.Microsecond, time.Second, time.Hour, 24 * time.Hour, sluice.MaxWindow}
	for {
		l.Window = windows[rng.IntN(len(windows))]
		l.Burst, l.DelayThreshold = 0, 0
		if l.WholeUnits() {
			l.Quota = float64(1 + rng.IntN(sluice.MaxEntries))
		} else {
			l.Quota = float64(1+rng.Int64N(4e15)) / 1e6
			if l.HasBurst() && rng.IntN(2) == 0 {
				l.Burst = float64(1+rng.Int64N(4e15)) / 1e6
			}
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// randomGap is a time step, in microseconds, around the limit's emission
// interval.
func randomGap(rng *rand.Rand, l sluice.Limit) int64 {
	w := l.Window.Microseconds()
	interval := max(int64(float64(w)/l.Quota), 1)
	switch rng.IntN(3) {
	case 0:
		return rng.Int64N(2 * interval)
	case 1:
		return interval * rng.Int64N(3)
	}
	return rng.Int64N(3 * w)
}

// randomCost is a whole or fractional cost, sometimes above the capacity.
func randomCost(rng *rand.Rand, l sluice.Limit) float64 {
	capacity := l.Capacity()
	if l.WholeUnits() || rng.IntN(2) == 0 {
		return float64(1 + rng.IntN(int(capacity)+1))
	}
	return float64(1+rng.Int64N(int64(capacity*1e6)+1e6)) / 1e6
}
