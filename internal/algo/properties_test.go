package algo

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/units"
)

// traceCase is a limit and a sequence of calls on one key.
type traceCase struct {
	Limit sluice.Limit
	Calls []callSpec
}

type callSpec struct {
	DT      int64  // microseconds since the previous call (≥ 0)
	Cost    int64  // atoms
	Release uint64 // Concurrency only: instead of a call, release this ticket
}

var windows = []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, time.Hour}

// genLimit draws a valid limit of the algorithm: integer and fractional
// quotas and bursts, round and odd windows.
func genLimit(alg sluice.Algorithm) *rapid.Generator[sluice.Limit] {
	return rapid.Custom(func(t *rapid.T) sluice.Limit {
		l := sluice.Limit{Name: "prop", Algorithm: alg}
		whole := l.WholeUnits()
		if whole || rapid.Bool().Draw(t, "integerQuota") {
			l.Quota = float64(rapid.IntRange(1, 30).Draw(t, "quota"))
		} else {
			l.Quota = float64(rapid.IntRange(1, 400).Draw(t, "quarterQuota")) / 4
		}
		if rapid.Bool().Draw(t, "roundWindow") {
			l.Window = rapid.SampledFrom(windows).Draw(t, "window")
		} else {
			l.Window = time.Duration(rapid.Int64Range(1, 1e7).Draw(t, "oddWindow")) * time.Microsecond
		}
		if l.HasBurst() && rapid.Bool().Draw(t, "hasBurst") {
			l.Burst = float64(rapid.IntRange(1, 200).Draw(t, "halfBurst")) / 2
		}
		if alg == sluice.LeakyBucket && rapid.Bool().Draw(t, "hasDelay") {
			l.DelayThreshold = math.Floor(l.Capacity() * rapid.Float64Range(0, 1).Draw(t, "delayShare"))
		}
		if err := l.Validate(); err != nil {
			t.Skip(err) // out of the exact-arithmetic range: not a case
		}
		return l
	})
}

// genCase draws a limit and up to 80 calls whose spacing is around the
// limit's emission interval, so traces cross every boundary.
func genCase(alg sluice.Algorithm) *rapid.Generator[traceCase] {
	return rapid.Custom(func(t *rapid.T) traceCase {
		l := genLimit(alg).Draw(t, "limit")
		capAtoms, _ := units.FromCost(l.Capacity())
		interval := max(int64(float64(l.Window.Microseconds())/l.Quota), 1)
		n := rapid.IntRange(1, 80).Draw(t, "n")
		c := traceCase{Limit: l, Calls: make([]callSpec, n)}
		for i := range c.Calls {
			var call callSpec
			switch rapid.IntRange(0, 3).Draw(t, "spacing") {
			case 0:
				call.DT = 0
			case 1:
				call.DT = rapid.Int64Range(0, 2*interval).Draw(t, "near")
			case 2:
				call.DT = rapid.Int64Range(0, 3*l.Window.Microseconds()).Draw(t, "far")
			case 3:
				call.DT = interval * rapid.Int64Range(0, 3).Draw(t, "multiple")
			}
			if l.WholeUnits() || rapid.Bool().Draw(t, "wholeCost") {
				call.Cost = units.PerCost * rapid.Int64Range(1, capAtoms/units.PerCost+1).Draw(t, "cost")
			} else {
				call.Cost = rapid.Int64Range(1, capAtoms+units.PerCost).Draw(t, "fracCost")
			}
			if alg == sluice.Concurrency && i > 0 && rapid.IntRange(0, 3).Draw(t, "release") == 0 {
				call.Release = uint64(rapid.IntRange(1, i).Draw(t, "ticket"))
			}
			c.Calls[i] = call
		}
		return c
	})
}

// event is one call of a trace and its decision.
type event struct {
	Now  int64
	Cost int64
	D    Result
	Err  error
}

// run replays the case on s from a fresh start and returns the events.
func run(t interface{ Fatal(...any) }, c traceCase, s State) []event {
	p, err := Compile(c.Limit)
	if err != nil {
		t.Fatal(err)
	}
	now := epoch
	s.Init(p, now)
	events := make([]event, 0, len(c.Calls))
	for i, call := range c.Calls {
		now += call.DT
		if call.Release != 0 {
			s.(*Concurrency).Release(call.Release)
			continue
		}
		in := Call{Now: now, Cost: call.Cost, Ticket: uint64(i + 1)}
		d, err := s.Step(p, in, true)
		events = append(events, event{now, call.Cost, d, err})
	}
	return events
}

// checkDecision: the fields of every decision are consistent.
func checkDecision(p *Params, e event) error {
	d := e.D
	switch {
	case e.Err != nil && !errors.Is(e.Err, sluice.ErrCostExceedsLimit):
		return fmt.Errorf("unexpected error %v", e.Err)
	case (e.Err != nil) != (e.Cost > p.cap):
		return fmt.Errorf("cost %d over capacity %d: err = %v", e.Cost, p.cap, e.Err)
	case e.Err != nil && d.RetryAfter() != sluice.Never:
		return fmt.Errorf("never-fitting cost: RetryAfter %v, want Never", d.RetryAfter())
	case d.Allowed() && (d.RetryAfter() != 0 || e.Err != nil):
		return fmt.Errorf("allowed with RetryAfter %v, err %v", d.RetryAfter(), e.Err)
	case !d.Allowed() && d.RetryAfter() <= 0:
		return fmt.Errorf("rejected with RetryAfter %v", d.RetryAfter())
	case d.Remaining() < 0 || d.Remaining() > p.cap:
		return fmt.Errorf("remaining %v outside [0, %v]", d.Remaining(), p.cap)
	case d.ResetAfter() < 0 || d.Delay() < 0:
		return fmt.Errorf("negative duration: reset %v, delay %v", d.ResetAfter(), d.Delay())
	case !d.Allowed() && d.Delay() != 0:
		return fmt.Errorf("rejected with a delay %v", d.Delay())
	}
	return nil
}

// Every algorithm: decisions are consistent, a check without commit leaves
// the state alone, RetryAfter is the first instant at which the same cost
// fits, and ResetAfter the first at which the key is back to full.
func TestPropDecisionsExact(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms {
		t.Run(alg.String(), rapid.MakeCheck(func(rt *rapid.T) {
			c := genCase(alg).Draw(rt, "case")
			p, _ := Compile(c.Limit)
			s := NewState(alg)
			now := epoch
			s.Init(p, now)
			probe := p.cap + 1 // a never-fitting cost reads the state without spending
			for i, call := range c.Calls {
				now += call.DT
				if call.Release != 0 {
					s.(*Concurrency).Release(call.Release)
					continue
				}
				in := Call{Now: now, Cost: call.Cost, Ticket: uint64(i + 1)}
				before := fmt.Sprint(s)
				check, _ := s.Step(p, in, false)
				if after := fmt.Sprint(s); after != before {
					rt.Fatalf("call %d: a check changed the state from %s to %s", i, before, after)
				}
				d, err := s.Step(p, in, true)
				if d != check {
					rt.Fatalf("call %d: check %+v, commit %+v", i, check, d)
				}
				if err := checkDecision(p, event{now, call.Cost, d, err}); err != nil {
					rt.Fatalf("call %d at +%vµs cost %d: %v (%+v)", i, now-epoch, call.Cost, err, d)
				}
				if !d.Allowed() && !d.Never() {
					at := now + d.RetryAfter().Microseconds()
					if got, _ := s.Step(p, Call{Now: at, Cost: call.Cost, Ticket: 1 << 62}, false); !got.Allowed() {
						rt.Fatalf("call %d: not allowed at now+RetryAfter (%v): %+v", i, d.RetryAfter(), got)
					}
					if got, _ := s.Step(p, Call{Now: at - 1, Cost: call.Cost, Ticket: 1 << 62}, false); got.Allowed() {
						rt.Fatalf("call %d: allowed 1µs before now+RetryAfter (%v)", i, d.RetryAfter())
					}
				}
				full := p.cap
				at := now + d.ResetAfter().Microseconds()
				if got, _ := s.Step(p, Call{Now: at, Cost: probe}, false); got.Remaining() != full {
					rt.Fatalf("call %d: remaining %v at now+ResetAfter (%v), want %v", i, got.Remaining(), d.ResetAfter(), full)
				}
				if d.ResetAfter() > 0 {
					if got, _ := s.Step(p, Call{Now: at - 1, Cost: probe}, false); got.Remaining() == full {
						rt.Fatalf("call %d: full 1µs before now+ResetAfter (%v)", i, d.ResetAfter())
					}
				}
			}
		}))
	}
}

// The token bucket and GCRA decide identically on every trace.
func TestPropTokenBucketEqualsGCRA(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		c := genCase(sluice.TokenBucket).Draw(rt, "case")
		tb := run(rt, c, new(TokenBucket))
		c.Limit.Algorithm = sluice.GCRA
		gc := run(rt, c, new(GCRA))
		for i := range tb {
			a, b := tb[i].D, gc[i].D
			if a != b || (tb[i].Err == nil) != (gc[i].Err == nil) {
				rt.Fatalf("call %d: token bucket %+v (%v), GCRA %+v (%v)", i, a, tb[i].Err, b, gc[i].Err)
			}
		}
	})
}

// burstBound checks the token bucket's theorem on the admitted events: over
// every interval [t_i, t_j], admitted cost ≤ B + r × (t_j − t_i), exactly.
func burstBound(p *Params, events []event) error {
	var admitted []event
	for _, e := range events {
		if e.D.Allowed() {
			admitted = append(admitted, e)
		}
	}
	for i := range admitted {
		sum := int64(0) // scaled units
		for j := i; j < len(admitted); j++ {
			sum += admitted[j].Cost * p.rate.PerAtom
			if sum <= p.capU {
				continue
			}
			// sum − B must have been refilled in t_j − t_i.
			if elapsed := admitted[j].Now - admitted[i].Now; elapsed < p.rate.Micros(sum-p.capU) {
				return fmt.Errorf("admitted %v in %vµs, bound %v + rate × elapsed",
					units.ToCost(sum/p.rate.PerAtom), elapsed, units.ToCost(p.cap))
			}
		}
	}
	return nil
}

func TestPropBurstPlusRateBound(t *testing.T) {
	t.Parallel()
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		t.Run(alg.String(), rapid.MakeCheck(func(rt *rapid.T) {
			c := genCase(alg).Draw(rt, "case")
			p, _ := Compile(c.Limit)
			if err := burstBound(p, run(rt, c, NewState(alg))); err != nil {
				rt.Fatal(err)
			}
		}))
	}
}

// uncappedBucket is the negative control of the bound: a token bucket that
// forgets to cap its tokens at B.
type uncappedBucket struct{ TokenBucket }

func (s *uncappedBucket) Step(p *Params, c Call, _ bool) (Result, error) {
	s.Tokens += min(c.Now-s.Last, p.capU/p.rate.PerMicro) * p.rate.PerMicro // no min(B, …)
	s.Last = c.Now
	allowed := false
	if cost := c.Cost * p.rate.PerAtom; cost <= s.Tokens {
		allowed = true
		s.Tokens -= cost
	}
	return result(allowed, false, 0, 0, 0), nil
}

// The bound is not vacuous: the naive bucket breaks it on some trace.
func TestPropBurstPlusRateBoundCatchesUncappedBucket(t *testing.T) {
	t.Parallel()
	gen := genCase(sluice.TokenBucket)
	for seed := range 2000 {
		c := gen.Example(seed)
		p, _ := Compile(c.Limit)
		if burstBound(p, run(t, c, new(uncappedBucket))) != nil {
			return
		}
	}
	t.Fatal("no trace in 2000 shows the uncapped bucket over B + r×T")
}

// windowBound checks that every span of length span ending at an admitted
// call, (t − span, t], holds at most max admitted atoms.
func windowBound(events []event, span int64, max int64) error {
	for j, e := range events {
		if !e.D.Allowed() {
			continue
		}
		sum := int64(0)
		for i := j; i >= 0 && events[i].Now > e.Now-span; i-- {
			if events[i].D.Allowed() {
				sum += events[i].Cost
			}
		}
		if sum > max {
			return fmt.Errorf("%v admitted in the %vµs ending at +%vµs, more than %v",
				units.ToCost(sum), span, e.Now-epoch, units.ToCost(max))
		}
	}
	return nil
}

// fixedWindowBound checks at most max atoms per epoch-aligned window.
func fixedWindowBound(events []event, w, max int64) error {
	sums := map[int64]int64{}
	for _, e := range events {
		if e.D.Allowed() {
			k := windowStart(e.Now, w)
			if sums[k] += e.Cost; sums[k] > max {
				return fmt.Errorf("%v admitted in the window at +%vµs, more than %v", units.ToCost(sums[k]), k-epoch, units.ToCost(max))
			}
		}
	}
	return nil
}

func TestPropSlidingLogExact(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		c := genCase(sluice.SlidingLog).Draw(rt, "case")
		p, _ := Compile(c.Limit)
		if err := windowBound(run(rt, c, new(SlidingLog)), p.window, p.quota); err != nil {
			rt.Fatal(err)
		}
	})
}

// The negative control: a fixed window, run on the sliding log's property,
// breaks it (twice the quota across a window boundary).
func TestPropSlidingLogCatchesFixedWindow(t *testing.T) {
	t.Parallel()
	gen := genCase(sluice.FixedWindow)
	for seed := range 2000 {
		c := gen.Example(seed)
		p, _ := Compile(c.Limit)
		if windowBound(run(t, c, new(FixedWindow)), p.window, p.quota) != nil {
			return
		}
	}
	t.Fatal("no trace in 2000 shows a fixed window over quota in a sliding span")
}

func TestPropFixedWindow(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		c := genCase(sluice.FixedWindow).Draw(rt, "case")
		p, _ := Compile(c.Limit)
		events := run(rt, c, new(FixedWindow))
		if err := fixedWindowBound(events, p.window, p.quota); err != nil {
			rt.Fatal(err)
		}
		if err := windowBound(events, p.window, 2*p.quota); err != nil {
			rt.Fatal(err)
		}
	})
}

// The sliding window counter never does worse than a fixed window, and
// admits less than twice the quota in any span of one window.
func TestPropSlidingWindow(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		c := genCase(sluice.SlidingWindow).Draw(rt, "case")
		p, _ := Compile(c.Limit)
		events := run(rt, c, new(SlidingWindow))
		if err := fixedWindowBound(events, p.window, p.quota); err != nil {
			rt.Fatal(err)
		}
		if err := windowBound(events, p.window, 2*p.quota-1); err != nil {
			rt.Fatal(err)
		}
	})
}

// Concurrency never has more than N slots held by live holders, counting
// releases and expiries independently of the algorithm.
func TestPropConcurrencyNeverExceeds(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		c := genCase(sluice.Concurrency).Draw(rt, "case")
		p, _ := Compile(c.Limit)
		s := new(Concurrency)
		now := epoch
		s.Init(p, now)
		type grant struct{ until, cost int64 }
		held := map[uint64]grant{}
		for i, call := range c.Calls {
			now += call.DT
			if call.Release != 0 {
				s.Release(call.Release)
				delete(held, call.Release)
				continue
			}
			d, _ := s.Step(p, Call{Now: now, Cost: call.Cost, Ticket: uint64(i + 1)}, true)
			if d.Allowed() {
				held[uint64(i+1)] = grant{now + p.window, call.Cost}
			}
			sum := int64(0)
			for _, g := range held {
				if g.until > now {
					sum += g.cost
				}
			}
			if sum > p.quota {
				rt.Fatalf("call %d: %v slots held, more than %v", i, units.ToCost(sum), units.ToCost(p.quota))
			}
		}
	})
}

// The leaky bucket with no delay threshold starts work no faster than the
// rate: each admitted call starts (at now + Delay) no earlier than the
// previous start plus the previous cost's drain time.
func TestPropLeakyBucketPacesStarts(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		c := genCase(sluice.LeakyBucket).Draw(rt, "case")
		c.Limit.DelayThreshold = 0
		p, _ := Compile(c.Limit)
		var prevStart, prevCost int64 = math.MinInt64, 0
		for i, e := range run(rt, c, new(LeakyBucket)) {
			if !e.D.Allowed() {
				continue
			}
			start := e.Now + e.D.Delay().Microseconds()
			if prevStart != math.MinInt64 && start < prevStart+(prevCost*p.rate.PerAtom)/p.rate.PerMicro {
				rt.Fatalf("call %d starts at +%vµs, %vµs after the previous start, before its cost drained",
					i, start-epoch, start-prevStart)
			}
			prevStart, prevCost = start, e.Cost
		}
	})
}
