package lease

import (
	"context"
	"slices"
	"time"
)

// leaveTimeout bounds the graceful Leave when Run ends.
const leaveTimeout = time.Second

// Run keeps the Holder's leases until ctx ends: every Renew (and at once
// when demand appears with nothing held) it reports its demand, renews
// what it holds, gives back what the rule (Allot) no longer gives it and
// acquires what it does. A round the Coordinator does not answer changes
// nothing: the leases run out at their local deadlines. When ctx ends Run
// stops spending, gives every partition back (within a second) and
// returns nil. Run is called once.
func (h *Holder) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	var last time.Time // when the last round started
	for {
		select {
		case <-ctx.Done():
			h.leave()
			return nil
		case <-t.C:
		case <-h.kick:
			// Demand with nothing held asks for a round now — but not more
			// than four per renew interval, whatever the callers do.
			if wait := h.o.Renew/4 - time.Since(last); wait > 0 {
				t.Reset(wait)
				continue
			}
		}
		last = time.Now()
		if h.round(ctx) && ctx.Err() == nil {
			// The rule moved: settle at once, once.
			h.round(ctx)
		}
		t.Reset(h.o.Renew)
	}
}

// Close stops spending: pending and later Takes and Waits return
// ErrClosed. It does not give the leases back; cancel Run's context for
// that. Close is idempotent.
func (h *Holder) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		h.wakeLocked()
	}
}

// round is one Sync. It reports whether this member's allotment differs
// from what it holds afterwards (another round would move partitions).
func (h *Holder) round(ctx context.Context) bool {
	req, releasing := h.prepare()
	sent := h.now()
	rctx, cancel := context.WithTimeout(ctx, h.o.Renew)
	reply, err := h.o.Coordinator.Sync(rctx, req)
	cancel()
	h.stats.syncs.Add(1)
	if err != nil {
		h.stats.syncErrors.Add(1)
		h.reachable(false, err)
		// What was given back was not heard: it lapses, and its next
		// holder takes it over.
		h.stats.lost.Add(uint64(releasing))
		return false
	}
	h.reachable(true, nil)
	h.stats.released.Add(uint64(releasing))
	return h.apply(req, reply, sent)
}

// prepare drops the leases past their local deadline, reads the demand,
// and decides what to give back and how many to ask for. The partitions
// given back stop being spent here, before the request is sent.
func (h *Holder) prepare() (SyncRequest, int) {
	now := h.now()
	demand := -1.0
	if h.o.Demand != nil {
		demand = h.o.Demand()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.parts) - 1; i >= 0; i-- {
		if !h.o.naive && !now.Before(h.parts[i].deadline) {
			h.dropLocked(i, now)
			h.stats.lost.Add(1)
		}
	}
	want := h.want
	if since := now.Sub(h.lastRound); h.lastRound.IsZero() || since >= h.o.Renew/4 {
		// Measure the demand over the time since the last measure (a
		// round right after another keeps the last one).
		if h.lastRound.IsZero() {
			since = h.o.Renew
		}
		h.lastRound = now
		if demand < 0 {
			// Smoothed over the last rounds: a want that follows every
			// round's noise moves partitions back and forth.
			h.rateSeen = 0.5*h.rateSeen + 0.5*h.asked/since.Seconds()
			if h.asked == 0 && h.rateSeen < h.rate/10 {
				h.rateSeen = 0 // idle: give everything back
			}
			demand = h.rateSeen
		}
		want = h.o.wantFor(demand)
		// Hungry: Waits were blocked for most of the time and what was
		// asked used nine tenths of what is held, so what was asked is
		// only what was granted; ask for all the rule gives.
		blocked := h.blockedFor
		if h.waiting > 0 {
			blocked += now.Sub(h.blockedSince)
			h.blockedSince = now
		}
		if h.o.Demand == nil && blocked > since/2 && h.asked/since.Seconds() >= 0.9*h.usableRateLocked(now) {
			want = h.o.Partitions
		}
		if want == 0 && h.asked > 0 {
			want = 1
		}
		h.asked, h.blockedFor, h.want = 0, 0, want
	}

	allot := 0
	if h.wants != nil {
		ws := slices.Clone(h.wants)
		ws[h.self] = want
		allot = Allot(ws, h.o.Partitions)[h.self]
	}
	h.allot = allot
	req := SyncRequest{Group: h.group, Member: h.o.Member, Want: want}
	// Give back the surplus: partitions still in quarantine first (they
	// are not spent yet), then the newest.
	surplus := len(h.parts) - allot
	for surplus > 0 {
		i := h.releaseCandidate(now)
		req.Release = append(req.Release, h.parts[i].Grant)
		h.dropLocked(i, now)
		surplus--
	}
	for _, p := range h.parts {
		req.Held = append(req.Held, p.Grant)
	}
	if h.wants != nil {
		req.Acquire = max(0, allot-len(h.parts))
	}
	return req, len(req.Release)
}

func (h *Holder) releaseCandidate(now instant) int {
	for i := len(h.parts) - 1; i >= 0; i-- {
		if now.Before(h.parts[i].usable) {
			return i
		}
	}
	return len(h.parts) - 1
}

// apply takes a reply in: renewed leases run to sent+TTL, the others are
// lost; acquired partitions start empty, after a quarantine if taken over.
func (h *Holder) apply(req SyncRequest, reply SyncReply, sent instant) bool {
	now := h.now()
	deadline := sent.Add(h.o.TTL)
	h.mu.Lock()
	defer h.mu.Unlock()
	renewed := make(map[Grant]bool, len(reply.Renewed))
	for _, g := range reply.Renewed {
		renewed[g] = true
	}
	for i := len(h.parts) - 1; i >= 0; i-- {
		p := h.parts[i]
		switch {
		case renewed[p.Grant]:
			p.deadline = deadline
		case slices.Contains(req.Held, p.Grant):
			h.dropLocked(i, now)
			h.stats.lost.Add(1)
		}
	}
	grew := false
	for _, a := range reply.Acquired {
		if h.closed {
			continue
		}
		p := &part{Grant: a.Grant, last: now, usable: now, deadline: deadline}
		if a.TakenOver && !h.o.naive {
			p.usable = now.Add(h.o.TTL + h.o.Drift)
			h.stats.quarantineNanos.Add(int64(h.o.TTL + h.o.Drift))
		}
		h.parts = append(h.parts, p)
		h.stats.acquired.Add(1)
		grew = true
	}
	if grew {
		h.wakeLocked() // a Wait computes its own timer to a quarantine's end
	}
	if reply.Self < 0 || reply.Self >= len(reply.Wants) {
		return false // a reply that does not name this member: keep the allotment
	}
	h.wants, h.self = slices.Clone(reply.Wants), reply.Self
	return Allot(h.wants, h.o.Partitions)[h.self] != len(h.parts)
}

// reachable logs a change of the Coordinator's reachability, once.
func (h *Holder) reachable(ok bool, err error) {
	h.mu.Lock()
	prev := h.reach
	h.reach.known, h.reach.ok = true, ok
	if prev.ok != ok || !prev.known {
		h.reach.since = h.now()
	}
	h.mu.Unlock()
	switch {
	case ok && prev.known && !prev.ok:
		h.o.Logger.Info("lease: coordinator reachable again", "group", h.group.Name, "member", h.o.Member)
	case !ok && (!prev.known || prev.ok):
		h.o.Logger.Warn("lease: coordinator unreachable; leases run out at their local deadlines", "group", h.group.Name, "member", h.o.Member, "err", err)
	}
}

// leave stops spending and gives every partition back.
func (h *Holder) leave() {
	h.mu.Lock()
	held := make([]Grant, 0, len(h.parts))
	now := h.now()
	for i := len(h.parts) - 1; i >= 0; i-- {
		held = append(held, h.parts[i].Grant)
		h.dropLocked(i, now)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := h.o.Coordinator.Leave(ctx, h.group, h.o.Member, held); err == nil {
		h.stats.released.Add(uint64(len(held)))
	}
}
