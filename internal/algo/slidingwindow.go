package algo

import (
	"github.com/sluicehq/sluice/internal/units"
)

// SlidingWindow is the sliding window counter: the counts of the previous
// and the current epoch-aligned windows, the previous one weighted by the
// part of it that a sliding window of length W ending now still covers:
//
//	estimate = Prev × (W − e) / W + Cur,   e = now − Start
//
// A cost is admitted when estimate + cost ≤ quota. Since the estimate is at
// least Cur, no fixed window ever admits more than the quota, so it never
// does worse than FixedWindow; in any span of length W it admits less than
// 2 × quota, and exactly the quota when arrivals in the previous window were
// uniform. All comparisons are exact (128-bit products). A charge
// (Call.Force) may count up to 2 × quota in the current window: a debt.
type SlidingWindow struct {
	Start int64 // Unix microseconds at which the current window starts
	Prev  int64 // atoms admitted in the previous window
	Cur   int64 // atoms admitted in the current window
}

var _ State = (*SlidingWindow)(nil)

// Init starts empty counts in now's window.
func (s *SlidingWindow) Init(p *Params, now int64) {
	*s = SlidingWindow{Start: windowStart(now, p.window)}
}

// Floor is the start of the current window.
func (s *SlidingWindow) Floor() int64 { return s.Start }

// ResetAt is when the estimate reaches zero: the end of the next window
// when the current one has counts, else the end of the current one when
// the previous one has counts.
func (s *SlidingWindow) ResetAt(p *Params) int64 {
	switch {
	case s.Cur > 0:
		return s.Start + 2*p.window
	case s.Prev > 0:
		return s.Start + p.window
	}
	return s.Start
}

// at returns the state rolled forward to now's window.
func (s SlidingWindow) at(now, w int64) SlidingWindow {
	switch start := windowStart(now, w); {
	case start == s.Start:
		return s
	case start == s.Start+w:
		return SlidingWindow{Start: start, Prev: s.Cur}
	default:
		return SlidingWindow{Start: start}
	}
}

// Step decides c; see State.
func (s *SlidingWindow) Step(p *Params, c Call, commit bool) (Result, error) {
	clamped, err := c.clampTo(s.Start)
	if err != nil {
		return Result{}, err
	}
	w, q := p.window, p.quota
	next := s.at(c.Now, w)
	e := c.Now - next.Start
	allowed, wait := false, int64(0)
	// estimate×W = Prev×(W−e) + Cur×W, compared with quota×W.
	weighted := units.Mul(next.Prev, w-e)
	if c.Force {
		allowed = true // a debt: the current count may reach 2 × quota
		next.Cur = min(next.Cur+min(c.Cost, 2*q), 2*q)
	} else if c.Cost > q {
		wait, err = neverWait, p.never(c.Cost)
	} else if !units.Mul(q, w).Less(weighted.Add(units.Mul(next.Cur+c.Cost, w))) {
		allowed = true
		next.Cur += c.Cost
	} else {
		wait = (next.retryAt(q, w, c.Cost) - c.Now)
	}
	// Remaining = floor((quota×W − Prev×(W−e) − Cur×W) / W), at least 0.
	remaining := int64(0)
	if room := q - next.Cur; room > 0 && weighted.Less(units.Mul(room, w)) {
		remaining = room - ceilDiv128(weighted, w)
	}
	reset := int64(0)
	if at := next.ResetAt(p); at > c.Now {
		reset = (at - c.Now)
	}
	if commit && allowed {
		*s = next
	}
	return result(allowed, clamped, remaining, wait, reset), err
}

// retryAt is the first instant at which cost (≤ q) fits, given that it does
// not fit now.
func (s SlidingWindow) retryAt(q, w, cost int64) int64 {
	// In the current window at elapsed e: Prev×(W−e) ≤ (q − Cur − cost)×W,
	// so e ≥ W − floor((q − Cur − cost)×W / Prev).
	if room := q - s.Cur - cost; room >= 0 && s.Prev > 0 {
		// room < Prev here (else it would fit now), so the quotient < W. A
		// quotient of 0 means not before the window ends: see the next one.
		if f, _ := units.MulDiv(room, w, s.Prev); f > 0 {
			return s.Start + w - f
		}
	}
	// In the next window (Prev' = Cur, Cur' = 0): e ≥ W − floor((q−cost)×W / Cur).
	next := s.Start + w
	if s.Cur == 0 || q-cost >= s.Cur {
		return next
	}
	f, _ := units.MulDiv(q-cost, w, s.Cur)
	return next + w - f
}

// ceilDiv128 returns ceil(x / w) for a 128-bit x whose quotient fits an int64.
func ceilDiv128(x units.Mul128, w int64) int64 {
	q, r := x.Div(w)
	if r != 0 {
		q++
	}
	return q
}
