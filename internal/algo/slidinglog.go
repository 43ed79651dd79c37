package algo

// SlidingLog keeps the instant and cost of every admitted call still inside
// the sliding window, and admits a cost when the costs admitted in
// (now − W, now] plus this one stay within the quota: at most the quota in
// every span of length W, exactly. Calls at the same instant share an entry,
// so the log holds at most quota entries (costs are whole units).
type SlidingLog struct {
	Entries []LogEntry // oldest first
	Total   int64      // atoms in Entries
}

// LogEntry is the cost admitted at one instant.
type LogEntry struct {
	At   int64 // Unix microseconds
	Cost int64 // atoms
}

var _ State = (*SlidingLog)(nil)

// Init empties the log, keeping its memory.
func (s *SlidingLog) Init(*Params, int64) { s.Entries, s.Total = s.Entries[:0], 0 }

// Floor is the newest entry's instant.
func (s *SlidingLog) Floor() int64 {
	if n := len(s.Entries); n > 0 {
		return s.Entries[n-1].At
	}
	return minInstant
}

// ResetAt is when the newest entry leaves the window.
func (s *SlidingLog) ResetAt(p *Params) int64 {
	if n := len(s.Entries); n > 0 {
		return s.Entries[n-1].At + p.window
	}
	return minInstant
}

// Step decides c; see State.
func (s *SlidingLog) Step(p *Params, c Call, commit bool) (Result, error) {
	if c.Force {
		return Result{}, p.Chargeable() // not chargeable: the error says why
	}
	clamped, err := c.clampTo(s.Floor())
	if err != nil {
		return Result{}, err
	}
	// Entries at or before now − W have left the window.
	expired, total := 0, s.Total
	for expired < len(s.Entries) && s.Entries[expired].At <= c.Now-p.window {
		total -= s.Entries[expired].Cost
		expired++
	}
	live := s.Entries[expired:]
	allowed, wait := false, int64(0)
	if c.Cost > p.quota {
		wait, err = neverWait, p.never(c.Cost)
	} else if total+c.Cost <= p.quota {
		allowed = true
		total += c.Cost
	} else {
		// The first instant at which enough of the oldest entries have left.
		need := total + c.Cost - p.quota
		for _, e := range live {
			need -= e.Cost
			if need <= 0 {
				wait = (e.At + p.window - c.Now)
				break
			}
		}
	}
	reset := int64(0)
	if allowed {
		reset = (p.window)
	} else if len(live) > 0 {
		reset = (live[len(live)-1].At + p.window - c.Now)
	}
	if commit && allowed {
		s.drop(expired)
		s.add(c.Now, c.Cost)
	}
	return result(allowed, clamped, p.quota-total, wait, reset), err
}

// drop forgets the n oldest entries, moving the rest to the front of the
// array when that frees at least half of it.
func (s *SlidingLog) drop(n int) {
	if n == 0 {
		return
	}
	for _, e := range s.Entries[:n] {
		s.Total -= e.Cost
	}
	rest := s.Entries[n:]
	if len(rest) <= cap(s.Entries)/2 {
		s.Entries = s.Entries[:copy(s.Entries, rest)]
	} else {
		s.Entries = rest
	}
}

func (s *SlidingLog) add(at, cost int64) {
	s.Total += cost
	if n := len(s.Entries); n > 0 && s.Entries[n-1].At == at {
		s.Entries[n-1].Cost += cost
		return
	}
	s.Entries = append(s.Entries, LogEntry{At: at, Cost: cost})
}
