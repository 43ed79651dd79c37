package algo

import (
	"github.com/sluicehq/sluice/internal/units"
)

// GCRA is the generic cell rate algorithm (virtual scheduling) with the
// token bucket's contract: its one timestamp, the theoretical arrival time
// TAT, is the instant at which the bucket would be full again. At now the
// backlog is (TAT − now) × r scaled units; a cost is admitted when backlog +
// cost ≤ B, and then TAT = max(TAT, now) + cost / r. It decides exactly as
// TokenBucket does (the property tests check it on random traces).
//
// The TAT is kept exactly: TAT microseconds plus Frac scaled units,
// Frac < r, i.e. TAT + Frac/r microseconds. A charge (Call.Force) moves
// the TAT up to two capacities ahead of now: a backlog beyond the burst, a
// debt.
type GCRA struct {
	TAT  int64 // Unix microseconds, whole part
	Frac int64 // the sub-microsecond rest, in scaled units, 0 ≤ Frac < r
}

var _ State = (*GCRA)(nil)

// Init makes an empty backlog.
func (s *GCRA) Init(_ *Params, now int64) { *s = GCRA{TAT: now} }

// Floor accepts any instant: an earlier now only means a larger backlog.
func (s *GCRA) Floor() int64 { return minInstant }

// ResetAt is the TAT rounded up to a microsecond.
func (s *GCRA) ResetAt(*Params) int64 {
	if s.Frac > 0 {
		return s.TAT + 1
	}
	return s.TAT
}

// Step decides c; see State.
func (s *GCRA) Step(p *Params, c Call, commit bool) (Result, error) {
	r := p.rate.PerMicro
	// backlog = (TAT − now) × r + Frac, or "more than the capacity" when the
	// product would be large (only when the clock stepped far back).
	var backlog int64
	over := false
	if s.TAT > c.Now || (s.TAT == c.Now && s.Frac > 0) {
		if dt := s.TAT - c.Now; dt > p.capU/r { // dt×r > capU: the backlog is over capacity
			over = true
		} else {
			backlog = dt*r + s.Frac
		}
	}
	var err error
	allowed, wait := false, int64(0)
	next := *s
	if c.Force {
		if err := p.Chargeable(); err != nil {
			return Result{}, err
		}
		allowed = true
		if dt := s.TAT - c.Now; dt <= 2*p.capU/r { // else deeper than the floor already (a clock far back)
			b := max(0, dt)*r + s.Frac
			if dt < 0 {
				b = 0
			}
			b = min(b+min(c.Cost, 2*p.cap)*p.rate.PerAtom, 2*p.capU) // ≤ 4capU + r < 2^53 (Chargeable)
			next = GCRA{TAT: c.Now + b/r, Frac: b % r}
			backlog, over = b, b > p.capU
		}
	} else if c.Cost > p.cap {
		wait, err = neverWait, p.never(c.Cost)
	} else if cost := c.Cost * p.rate.PerAtom; !over && cost <= p.capU-backlog {
		allowed = true
		backlog += cost
		next = GCRA{TAT: c.Now + backlog/r, Frac: backlog % r}
	} else {
		// First t with (TAT − t) × r + Frac + cost ≤ capU.
		wait = (s.TAT + ceilDivSigned(s.Frac+cost-p.capU, r) - c.Now)
	}
	remaining := int64(0)
	if !over {
		remaining = p.rate.Atoms(p.capU - min(backlog, p.capU))
	}
	reset := int64(0)
	if at := next.ResetAt(p); at > c.Now {
		reset = (at - c.Now)
	}
	if commit && allowed {
		*s = next
	}
	return result(allowed, false, remaining, wait, reset), err
}

// ceilDivSigned returns ceil(a/b) for any a and b > 0.
func ceilDivSigned(a, b int64) int64 { return -units.FloorDiv(-a, b) }
