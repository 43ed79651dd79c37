package algo

// Concurrency is a semaphore of quota slots whose holders expire: an
// allowed call holds its cost in slots until Release or until the limit's
// Window has passed since it was granted, so a crashed holder's slots come
// back. Holders are kept in order of expiry.
type Concurrency struct {
	Holders []Holder // by Until, earliest first
	Total   int64    // atoms held, expired holders included until dropped
}

// Holder is one grant of slots.
type Holder struct {
	Ticket uint64
	Until  int64 // Unix microseconds at which the slots free themselves
	Cost   int64 // atoms
}

var _ State = (*Concurrency)(nil)

// Init forgets every holder, keeping the memory.
func (s *Concurrency) Init(*Params, int64) { s.Holders, s.Total = s.Holders[:0], 0 }

// Floor accepts any instant: an earlier now only keeps holders longer.
func (s *Concurrency) Floor() int64 { return minInstant }

// ResetAt is when the last holder expires.
func (s *Concurrency) ResetAt(*Params) int64 {
	if n := len(s.Holders); n > 0 {
		return s.Holders[n-1].Until
	}
	return minInstant
}

// Step decides c; an allowed decision's Ticket is c.Ticket. See State.
func (s *Concurrency) Step(p *Params, c Call, commit bool) (Result, error) {
	if c.Force {
		return Result{}, p.Chargeable() // not chargeable: the error says why
	}
	expired, total := 0, s.Total
	for expired < len(s.Holders) && s.Holders[expired].Until <= c.Now {
		total -= s.Holders[expired].Cost
		expired++
	}
	live := s.Holders[expired:]
	var err error
	allowed, wait := false, int64(0)
	if c.Cost > p.quota {
		wait, err = neverWait, p.never(c.Cost)
	} else if total+c.Cost <= p.quota {
		allowed = true
		total += c.Cost
	} else {
		need := total + c.Cost - p.quota
		for _, h := range live {
			need -= h.Cost
			if need <= 0 {
				wait = (h.Until - c.Now)
				break
			}
		}
	}
	until := c.Now + p.window
	last := minInstant
	if len(live) > 0 {
		last = live[len(live)-1].Until
	}
	if allowed {
		last = max(last, until)
	}
	reset := int64(0)
	if last > c.Now {
		reset = (last - c.Now)
	}
	if commit && allowed {
		s.drop(expired)
		s.insert(Holder{Ticket: c.Ticket, Until: until, Cost: c.Cost})
	}
	return result(allowed, false, p.quota-total, wait, reset), err
}

// Release frees the slots of ticket and reports whether it held any.
func (s *Concurrency) Release(ticket uint64) bool {
	for i, h := range s.Holders {
		if h.Ticket == ticket {
			s.Total -= h.Cost
			s.Holders = append(s.Holders[:i], s.Holders[i+1:]...)
			return true
		}
	}
	return false
}

func (s *Concurrency) drop(n int) {
	if n == 0 {
		return
	}
	for _, h := range s.Holders[:n] {
		s.Total -= h.Cost
	}
	s.Holders = s.Holders[:copy(s.Holders, s.Holders[n:])]
}

// insert keeps Holders ordered by Until; with a steady clock and window it
// appends.
func (s *Concurrency) insert(h Holder) {
	s.Total += h.Cost
	i := len(s.Holders)
	for i > 0 && s.Holders[i-1].Until > h.Until {
		i--
	}
	s.Holders = append(s.Holders, Holder{})
	copy(s.Holders[i+1:], s.Holders[i:])
	s.Holders[i] = h
}
