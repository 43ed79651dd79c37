package algo

import (
	"errors"
	"fmt"
	"math/big"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/units"
)

// chargeable are the algorithms that carry a debt.
var chargeable = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindow}

// chargeCase is a trace whose calls are charges (Call.Force) or usual
// decisions; a charge's cost may exceed the capacity (what a response used
// is not bounded by the limit).
type chargeCase struct {
	traceCase
	Charge []bool
}

func genChargeCase(alg sluice.Algorithm) *rapid.Generator[chargeCase] {
	return rapid.Custom(func(t *rapid.T) chargeCase {
		c := chargeCase{traceCase: genCase(alg).Draw(t, "trace")}
		capAtoms, _ := units.FromCost(c.Limit.Capacity())
		c.Charge = make([]bool, len(c.Calls))
		for i := range c.Calls {
			if rapid.IntRange(0, 3).Draw(t, "charge") == 0 {
				c.Charge[i] = true
				c.Calls[i].Cost = rapid.Int64Range(1, 3*capAtoms).Draw(t, "chargeCost")
			}
		}
		return c
	})
}

// debtModel is the specification of a charged limit, in exact rationals
// and written without the algorithms' integer tricks: a token bucket whose
// level lives in [−B, B], or window counts that reach 2 × quota.
type debtModel struct {
	alg    sluice.Algorithm
	b, r   *big.Rat // token bucket: capacity (atoms), refill (atoms per µs)
	q, w   int64    // windows: quota (atoms), window (µs)
	level  *big.Rat
	last   int64
	start  int64 // windows: the current window
	prev   int64
	cur    int64
	inited bool
}

func newDebtModel(l sluice.Limit) *debtModel {
	capAtoms, _ := units.FromCost(l.Capacity())
	quota, _ := units.FromCost(l.Quota)
	return &debtModel{
		alg: l.Algorithm,
		b:   new(big.Rat).SetInt64(capAtoms),
		r:   new(big.Rat).SetFrac64(quota, l.Window.Microseconds()),
		q:   quota, w: l.Window.Microseconds(),
	}
}

// step answers a call: allowed, and the remaining atoms after it (rounded
// down; 0 in debt).
func (m *debtModel) step(now, cost int64, charge bool) (bool, int64) {
	c := new(big.Rat).SetInt64(cost)
	switch m.alg {
	case sluice.TokenBucket, sluice.GCRA:
		if !m.inited {
			m.level, m.last, m.inited = new(big.Rat).Set(m.b), now, true
		}
		refill := new(big.Rat).Mul(m.r, new(big.Rat).SetInt64(now-m.last))
		level := new(big.Rat).Add(m.level, refill)
		if level.Cmp(m.b) > 0 {
			level.Set(m.b)
		}
		allowed := charge || c.Cmp(level) <= 0
		if allowed {
			level.Sub(level, c)
			if floor := new(big.Rat).Neg(m.b); level.Cmp(floor) < 0 {
				level = floor
			}
			m.level, m.last = level, now
		}
		if level.Sign() <= 0 {
			return allowed, 0
		}
		return allowed, new(big.Int).Quo(level.Num(), level.Denom()).Int64()
	default: // fixed and sliding windows
		start := units.FloorDiv(now, m.w) * m.w
		prev, cur := m.prev, m.cur
		switch {
		case !m.inited || start > m.start+m.w:
			prev, cur = 0, 0
		case start == m.start+m.w:
			prev, cur = cur, 0
		}
		// estimate = prev × (w − e)/w + cur (fixed window: cur alone).
		estimate := func(cur int64) *big.Rat {
			est := new(big.Rat).SetInt64(cur)
			if m.alg == sluice.SlidingWindow {
				weighted := new(big.Int).Mul(big.NewInt(prev), big.NewInt(m.w-(now-start)))
				est.Add(est, new(big.Rat).SetFrac(weighted, big.NewInt(m.w)))
			}
			return est
		}
		allowed := charge || new(big.Rat).Add(estimate(cur), c).Cmp(new(big.Rat).SetInt64(m.q)) <= 0
		if allowed {
			cur = min(cur+cost, 2*m.q)
			m.start, m.prev, m.cur, m.inited = start, prev, cur, true
		}
		room := new(big.Rat).Sub(new(big.Rat).SetInt64(m.q), estimate(cur))
		if room.Sign() <= 0 {
			return allowed, 0
		}
		return allowed, new(big.Int).Quo(room.Num(), room.Denom()).Int64()
	}
}

// replayCharges runs the case on s; charge decides how a charge is made
// (the real one: Call.Force).
func replayCharges(p *Params, c chargeCase, s State, charge func(State, Call) (Result, error)) ([]Result, []error) {
	now := epoch
	s.Init(p, now)
	var rs []Result
	var errs []error
	for i, call := range c.Calls {
		now += call.DT
		in := Call{Now: now, Cost: call.Cost}
		var r Result
		var err error
		if c.Charge[i] {
			r, err = charge(s, in)
		} else {
			r, err = s.Step(p, in, true)
		}
		rs, errs = append(rs, r), append(errs, err)
	}
	return rs, errs
}

func forced(p *Params) func(State, Call) (Result, error) {
	return func(s State, c Call) (Result, error) {
		c.Force = true
		return s.Step(p, c, true)
	}
}

// matchesDebtModel compares a replay with the model: the same admissions
// and the same remaining counts.
func matchesDebtModel(c chargeCase, rs []Result, errs []error) error {
	m := newDebtModel(c.Limit)
	now := epoch
	for i, call := range c.Calls {
		now += call.DT
		if errs[i] != nil && !(errors.Is(errs[i], sluice.ErrCostExceedsLimit) && !c.Charge[i]) {
			return fmt.Errorf("call %d: %v", i, errs[i])
		}
		if errs[i] != nil { // a usual call above the capacity: Never, nothing spent
			continue
		}
		allowed, remaining := m.step(now, call.Cost, c.Charge[i])
		if rs[i].Allowed() != allowed {
			return fmt.Errorf("call %d (charge %v, cost %v) at +%vµs: allowed %v, the model says %v",
				i, c.Charge[i], units.ToCost(call.Cost), now-epoch, rs[i].Allowed(), allowed)
		}
		if rs[i].Remaining() != remaining {
			return fmt.Errorf("call %d: remaining %v, the model says %v", i, rs[i].Remaining(), remaining)
		}
	}
	return nil
}

// A charge runs the key into debt and later calls wait it out, exactly as
// a token bucket whose level may go down to −B (or window counts that may
// reach 2 × quota), computed in rationals, says. GCRA is held to the
// token bucket's model.
func TestPropChargeMatchesDebtModel(t *testing.T) {
	t.Parallel()
	for _, alg := range chargeable {
		t.Run(alg.String(), rapid.MakeCheck(func(rt *rapid.T) {
			c := genChargeCase(alg).Draw(rt, "case")
			p, _ := Compile(c.Limit)
			rs, errs := replayCharges(p, c, NewState(alg), forced(p))
			if err := matchesDebtModel(c, rs, errs); err != nil {
				rt.Fatal(err)
			}
		}))
	}
}

// The property is not vacuous: a charge made as a usual decision (refused
// when it does not fit, so the cost is never paid) fails it.
func TestPropChargeCatchesUnpaidCharges(t *testing.T) {
	t.Parallel()
	for _, alg := range chargeable {
		gen := genChargeCase(alg)
		found := false
		for seed := range 2000 {
			c := gen.Example(seed)
			p, _ := Compile(c.Limit)
			naive := func(s State, c Call) (Result, error) { return s.Step(p, c, true) }
			rs, errs := replayCharges(p, c, NewState(alg), naive)
			if matchesDebtModel(c, rs, errs) != nil {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%v: no trace in 2000 shows an unpaid charge", alg)
		}
	}
}

// Decisions stay exact in debt: RetryAfter is the first instant the cost
// fits, ResetAfter the first at which the key is full; the token bucket and
// GCRA agree on every charged trace; charges are always allowed, never an
// error; a check without commit changes nothing.
func TestPropChargeDecisionsExact(t *testing.T) {
	t.Parallel()
	for _, alg := range chargeable {
		t.Run(alg.String(), rapid.MakeCheck(func(rt *rapid.T) {
			c := genChargeCase(alg).Draw(rt, "case")
			p, _ := Compile(c.Limit)
			s := NewState(alg)
			now := epoch
			s.Init(p, now)
			var twin State // token bucket ≡ GCRA
			var twinP *Params
			if alg == sluice.TokenBucket {
				l := c.Limit
				l.Algorithm = sluice.GCRA
				twinP, _ = Compile(l)
				twin = new(GCRA)
				twin.Init(twinP, now)
			}
			for i, call := range c.Calls {
				now += call.DT
				in := Call{Now: now, Cost: call.Cost, Force: c.Charge[i]}
				before := fmt.Sprint(s)
				check, _ := s.Step(p, in, false)
				if after := fmt.Sprint(s); after != before {
					rt.Fatalf("call %d: a check changed the state from %s to %s", i, before, after)
				}
				d, err := s.Step(p, in, true)
				if d != check {
					rt.Fatalf("call %d: check %+v, commit %+v", i, check, d)
				}
				if c.Charge[i] && (err != nil || !d.Allowed() || d.Remaining() < 0) {
					rt.Fatalf("call %d: a charge: %+v, %v", i, d, err)
				}
				if twin != nil {
					if g, _ := twin.Step(twinP, in, true); g != d {
						rt.Fatalf("call %d (charge %v): token bucket %+v, GCRA %+v", i, c.Charge[i], d, g)
					}
				}
				if !d.Allowed() && !d.Never() {
					at := now + d.RetryAfter().Microseconds()
					if got, _ := s.Step(p, Call{Now: at, Cost: call.Cost}, false); !got.Allowed() {
						rt.Fatalf("call %d: not allowed at now+RetryAfter (%v): %+v", i, d.RetryAfter(), got)
					}
					if got, _ := s.Step(p, Call{Now: at - 1, Cost: call.Cost}, false); got.Allowed() {
						rt.Fatalf("call %d: allowed 1µs before now+RetryAfter (%v)", i, d.RetryAfter())
					}
				}
				probe := p.cap + 1
				at := now + d.ResetAfter().Microseconds()
				if got, _ := s.Step(p, Call{Now: at, Cost: probe}, false); got.Remaining() != p.cap {
					rt.Fatalf("call %d: remaining %v at now+ResetAfter (%v), want %v", i, got.Remaining(), d.ResetAfter(), p.cap)
				}
				if d.ResetAfter() > 0 {
					if got, _ := s.Step(p, Call{Now: at - 1, Cost: probe}, false); got.Remaining() == p.cap {
						rt.Fatalf("call %d: full 1µs before now+ResetAfter (%v)", i, d.ResetAfter())
					}
				}
			}
		}))
	}
}

// The algorithms without a debt refuse a charge, saying why; a limit too
// large for a debt in exact arithmetic too.
func TestChargeRefused(t *testing.T) {
	t.Parallel()
	for _, alg := range []sluice.Algorithm{sluice.SlidingLog, sluice.LeakyBucket, sluice.Concurrency} {
		p, err := Compile(limitFor(alg, 10, 1e9))
		if err != nil {
			t.Fatal(err)
		}
		s := NewState(alg)
		s.Init(p, epoch)
		if _, err := s.Step(p, Call{Now: epoch, Cost: units.PerCost, Force: true}, true); !errors.Is(err, sluice.ErrInvalidRequest) {
			t.Errorf("%v: charge: %v, want ErrInvalidRequest", alg, err)
		}
	}
	huge := sluice.Limit{Name: "huge", Quota: 4e9, Window: 1e9}
	p, err := Compile(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Chargeable(); !errors.Is(err, sluice.ErrInvalidRequest) {
		t.Errorf("a capacity of 4e9: Chargeable = %v, want ErrInvalidRequest", err)
	}
}
