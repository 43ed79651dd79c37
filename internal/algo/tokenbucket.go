package algo

// TokenBucket is the classic token bucket: Tokens, in scaled units, refilled
// at the limit's rate since Last and capped at the burst; a cost is admitted
// when Tokens holds at least that much, and taken from it:
//
//	tokens = min(B, tokens + r × (now − last)); last = now
//	if tokens ≥ cost { tokens −= cost; allow } else { reject }
//
// With serialized calls and a clock that does not go back, 0 ≤ Tokens ≤ B
// and the cost admitted over any interval T is at most B + r × T. A charge
// (Call.Force) may take Tokens below zero, down to −B: a debt the refill
// pays off before anything fits again.
type TokenBucket struct {
	Tokens int64 // scaled units, −capacity ≤ Tokens ≤ capacity
	Last   int64 // Unix microseconds of the latest call
}

var _ State = (*TokenBucket)(nil)

// Init fills the bucket.
func (s *TokenBucket) Init(p *Params, now int64) { *s = TokenBucket{Tokens: p.capU, Last: now} }

// Floor is Last: the token bucket rejects time that moves backwards.
func (s *TokenBucket) Floor() int64 { return s.Last }

// ResetAt is when the bucket is full again.
func (s *TokenBucket) ResetAt(p *Params) int64 { return s.Last + p.rate.Micros(p.capU-s.Tokens) }

// Step decides c; see State.
func (s *TokenBucket) Step(p *Params, c Call, commit bool) (Result, error) {
	clamped, err := c.clampTo(s.Last)
	if err != nil {
		return Result{}, err
	}
	tokens := p.rate.Refill(s.Tokens, p.capU, c.Now-s.Last)
	allowed, wait := false, int64(0)
	if c.Force {
		if err := p.Chargeable(); err != nil {
			return Result{}, err
		}
		allowed = true
		tokens = max(tokens-min(c.Cost, 2*p.cap)*p.rate.PerAtom, -p.capU) // ≤ 2capU: exact
	} else if c.Cost > p.cap {
		wait, err = neverWait, p.never(c.Cost)
	} else if cost := c.Cost * p.rate.PerAtom; cost <= tokens { // ≤ capU: no overflow
		allowed = true
		tokens -= cost
	} else {
		wait = (p.rate.Micros(cost - tokens))
	}
	if commit && allowed {
		s.Tokens, s.Last = tokens, c.Now
	}
	return result(allowed, clamped, p.rate.Atoms(max(tokens, 0)), wait, (p.rate.Micros(p.capU - tokens))), err
}
