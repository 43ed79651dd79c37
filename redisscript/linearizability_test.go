package redisscript_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/redisscript"
)

type lzInput struct{ cost int64 }

type lzOutput struct {
	now        int64 // the server's instant, µs
	allowed    bool
	remaining  float64
	retryAfter time.Duration
	resetAfter time.Duration
}

// tokenBucketModel is the pure token bucket (internal/algo) as a
// porcupine model: a history is linearizable when some order consistent
// with real time gives every call the answer the pure algorithm gives at
// the server's instant.
func tokenBucketModel(limit sluice.Limit) porcupine.Model {
	p, err := algo.Compile(limit)
	if err != nil {
		panic(err)
	}
	type state struct {
		fresh bool
		tb    algo.TokenBucket
	}
	return porcupine.Model{
		Init: func() any { return state{fresh: true} },
		Step: func(st, in, out any) (bool, any) {
			s, i, o := st.(state), in.(lzInput), out.(lzOutput)
			if s.fresh {
				s.tb.Init(p, o.now)
			}
			// Like the script, write the state only when the call spends: a
			// rejection changes nothing (the pure algorithm's refreshed
			// state on rejection is equivalent, but would make every order
			// of rejections a different state for the checker).
			call := algo.Call{Now: o.now, Cost: i.cost, Clamp: true}
			r, _ := s.tb.Step(p, call, false)
			if r.Allowed() {
				s.tb.Step(p, call, true)
			}
			d := r.Decision(limit, 0)
			ok := d.Allowed == o.allowed && d.Remaining == o.remaining && d.RetryAfter == o.retryAfter && d.ResetAfter == o.resetAfter
			return ok, state{tb: s.tb}
		},
		Equal: func(a, b any) bool { return a == b },
		DescribeOperation: func(in, out any) string {
			o := out.(lzOutput)
			return fmt.Sprintf("@%d allowed=%v rem=%v", o.now, o.allowed, o.remaining)
		},
	}
}

// record runs workers goroutines × ops calls on one key and returns the
// history.
func record(t *testing.T, s *redisscript.Store, key string, limit sluice.Limit, workers, ops int) []porcupine.Operation {
	t.Helper()
	start := time.Now()
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range ops {
				call := time.Since(start).Nanoseconds()
				d, now, err := s.AllowNow(context.Background(), key, limit, 1)
				ret := time.Since(start).Nanoseconds()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				history = append(history, porcupine.Operation{
					ClientId: w, Input: lzInput{cost: 1e6}, Call: call, Return: ret,
					Output: lzOutput{now: now, allowed: d.Allowed, remaining: d.Remaining, retryAfter: d.RetryAfter, resetAfter: d.ResetAfter},
				})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return history
}

func TestLinearizable(t *testing.T) {
	for _, coalesce := range []bool{true, false} {
		t.Run(fmt.Sprintf("coalesce=%v", coalesce), func(t *testing.T) {
			s := newStore(t, redisscript.Options{Client: sharedClient(t), Timeout: 5 * time.Second, Coalesce: redisscript.CoalesceOptions{Off: !coalesce}})
			testLinearizable(t, s)
			if st := s.Stats(); coalesce && st.Batched == 0 {
				t.Errorf("no decision was coalesced (%d calls): the histories checked none", st.Calls)
			}
		})
	}
}

func testLinearizable(t *testing.T, s *redisscript.Store) {
	for _, c := range []struct {
		name           string
		limit          sluice.Limit
		workers, ops   int
		keys           int
		wantRejections bool
	}{
		// The race: 64 callers, 4 tries each, for a capacity of 100 that
		// does not refill.
		{"race", sluice.Limit{Name: "lz-race", Quota: 100, Window: time.Hour}, 64, 4, 5, true},
		// A bucket that refills while 8 callers hammer it.
		{"refilling", sluice.Limit{Name: "lz-refill", Quota: 2000, Window: time.Second, Burst: 10}, 8, 150, 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := tokenBucketModel(c.limit)
			for k := range c.keys {
				history := record(t, s, unique(t, fmt.Sprint(k)), c.limit, c.workers, c.ops)
				rejected := 0
				for _, op := range history {
					if !op.Output.(lzOutput).allowed {
						rejected++
					}
				}
				if c.wantRejections && rejected == 0 {
					t.Fatalf("history %d: no rejection in %d calls: the limit was never reached", k, len(history))
				}
				switch res := porcupine.CheckOperationsTimeout(model, history, time.Minute); res {
				case porcupine.Ok:
				default:
					t.Fatalf("history %d (%d calls, %d rejected): %v", k, len(history), rejected, res)
				}
			}
		})
	}
}

// The checker is not vacuous: a recorded history made wrong in the two
// ways a broken store would be — one admission too many, or two answers
// that contradict their real-time order — is refused.
func TestLinearizableCatchesBrokenHistories(t *testing.T) {
	s := newStore(t, redisscript.Options{Client: sharedClient(t), Timeout: 5 * time.Second})
	limit := sluice.Limit{Name: "lz-neg", Quota: 20, Window: time.Hour}
	model := tokenBucketModel(limit)
	history := record(t, s, unique(t, "k"), limit, 1, 20) // one caller: 20 allowed, in order
	if res := porcupine.CheckOperationsTimeout(model, history, time.Minute); res != porcupine.Ok {
		t.Fatalf("the recorded history itself: %v", res)
	}
	last := history[len(history)-1]
	extra := last
	extra.Call, extra.Return = last.Return+1, last.Return+2 // a 21st admission, later
	if res := porcupine.CheckOperationsTimeout(model, append(history[:len(history):len(history)], extra), time.Minute); res != porcupine.Illegal {
		t.Fatalf("21 admissions of a capacity of 20: %v, want Illegal", res)
	}
	swapped := append([]porcupine.Operation(nil), history...)
	swapped[3].Output, swapped[4].Output = swapped[4].Output, swapped[3].Output
	if res := porcupine.CheckOperationsTimeout(model, swapped, time.Minute); res != porcupine.Illegal {
		t.Fatalf("two answers swapped against real time: %v, want Illegal", res)
	}
}
