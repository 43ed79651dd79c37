package algo

import (
	"github.com/sluicehq/sluice/internal/units"
)

// FixedWindow counts the cost admitted in the current window, windows being
// aligned to the Unix epoch: [k×W, (k+1)×W). A cost is admitted while the
// window's count stays within the quota. Up to 2 × quota can pass in a short
// span across a window boundary (10 per minute admits 10 at 00:59.9 and 10
// more at 01:00.1);
// SlidingLog and SlidingWindow do not have that weakness. A charge
// (Call.Force) may count up to 2 × quota: a debt until the window ends.
type FixedWindow struct {
	Start int64 // Unix microseconds at which the counted window starts
	Count int64 // atoms admitted in it
}

var _ State = (*FixedWindow)(nil)

// Init starts an empty count in now's window.
func (s *FixedWindow) Init(p *Params, now int64) {
	*s = FixedWindow{Start: windowStart(now, p.window)}
}

// Floor is the start of the counted window: an instant in an earlier window
// is time moving backwards.
func (s *FixedWindow) Floor() int64 { return s.Start }

// ResetAt is the end of the counted window, or its start when it is empty.
func (s *FixedWindow) ResetAt(p *Params) int64 {
	if s.Count == 0 {
		return s.Start
	}
	return s.Start + p.window
}

// Step decides c; see State.
func (s *FixedWindow) Step(p *Params, c Call, commit bool) (Result, error) {
	clamped, err := c.clampTo(s.Start)
	if err != nil {
		return Result{}, err
	}
	next := *s
	if start := windowStart(c.Now, p.window); start > s.Start {
		next = FixedWindow{Start: start}
	}
	allowed, wait := false, int64(0)
	if c.Force {
		allowed = true // a debt: the count may reach 2 × quota
		next.Count = min(next.Count+min(c.Cost, 2*p.quota), 2*p.quota)
	} else if c.Cost > p.quota {
		wait, err = neverWait, p.never(c.Cost)
	} else if next.Count+c.Cost <= p.quota {
		allowed = true
		next.Count += c.Cost
	} else {
		wait = (next.Start + p.window - c.Now)
	}
	reset := int64(0)
	if next.Count > 0 {
		reset = (next.Start + p.window - c.Now)
	}
	if commit && allowed {
		*s = next
	}
	return result(allowed, clamped, max(p.quota-next.Count, 0), wait, reset), err
}

// windowStart is the start of the epoch-aligned window of length w holding t.
func windowStart(t, w int64) int64 { return units.FloorDiv(t, w) * w }
