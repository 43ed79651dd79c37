package algo

// LeakyBucket is a queue of capacity B (the burst) drained at the limit's
// rate, in the manner of nginx's limit_req. Level is the work queued at
// Last, in scaled units. At now the work ahead is
// ahead = max(0, Level − r × (now − Last)); a cost is admitted when
// ahead + cost ≤ B, and must then wait (ahead − threshold) / r before it
// runs, where threshold is the limit's DelayThreshold (nginx's delay=).
//
// With unit costs this is nginx's rule exactly: nginx's excess is ahead,
// its burst b is B − 1, a request is rejected when excess > b and delayed by
// (excess − delay) / rate.
type LeakyBucket struct {
	Level int64 // scaled units queued at Last, 0 ≤ Level ≤ capacity
	Last  int64 // Unix microseconds of the latest call
}

var _ State = (*LeakyBucket)(nil)

// Init empties the queue.
func (s *LeakyBucket) Init(_ *Params, now int64) { *s = LeakyBucket{Last: now} }

// Floor is Last.
func (s *LeakyBucket) Floor() int64 { return s.Last }

// ResetAt is when the queue has drained.
func (s *LeakyBucket) ResetAt(p *Params) int64 { return s.Last + p.rate.Micros(s.Level) }

// Step decides c; see State.
func (s *LeakyBucket) Step(p *Params, c Call, commit bool) (Result, error) {
	if c.Force {
		return Result{}, p.Chargeable() // not chargeable: the error says why
	}
	clamped, err := c.clampTo(s.Last)
	if err != nil {
		return Result{}, err
	}
	// What has drained since Last: the same arithmetic as a refill of the
	// free space.
	ahead := p.capU - p.rate.Refill(p.capU-s.Level, p.capU, c.Now-s.Last)
	level := ahead
	allowed, wait := false, int64(0)
	if c.Cost > p.cap {
		wait, err = neverWait, p.never(c.Cost)
	} else if cost := c.Cost * p.rate.PerAtom; ahead+cost <= p.capU {
		allowed = true
		level += cost
		if ahead > p.delayU {
			wait = (p.rate.Micros(ahead - p.delayU)) // the delay
		}
	} else {
		wait = (p.rate.Micros(ahead + cost - p.capU))
	}
	if commit && allowed {
		s.Level, s.Last = level, c.Now
	}
	return result(allowed, clamped, p.rate.Atoms(p.capU-level), wait, (p.rate.Micros(level))), err
}
