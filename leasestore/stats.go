package leasestore

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// LimitStats are one leased limit's figures, summed over its keys'
// Holders (never by key). Its fields are metrics.LeaseStats' (names,
// types and order), so a caller converts one to the other.
type LimitStats struct {
	// Limit is the leased limit's name.
	Limit string
	// Keys are the keys with a Holder now.
	Keys int
	// Held, Usable and Quarantined are the partitions held now, those
	// spendable now, and those waiting out a quarantine.
	Held, Usable, Quarantined int
	// Unreachable counts the keys whose Holder's last round did not reach
	// the Coordinator.
	Unreachable int
	// Acquired, Released (given back gracefully), Lost (lapsed at the
	// local deadline, not renewed, or fenced) and Fenced leases, since
	// New, over every Holder the limit had.
	Acquired, Released, Lost, Fenced uint64
	// Quarantine is the time partitions spent in quarantine.
	Quarantine time.Duration
	// Syncs and SyncErrors count the rounds with the Coordinator.
	Syncs, SyncErrors uint64
	// FailOpen, FailClosed and FailLocal count the decisions the failure
	// policy made (the Coordinator out of reach, or a key beyond MaxKeys).
	FailOpen, FailClosed, FailLocal uint64
	// Overflow counts the requests for a new key beyond MaxKeys.
	Overflow uint64
	// Stopped counts the Holders stopped (idle keys, changed parameters).
	Stopped uint64
}

// retiredStats are the counters of a limit's Holders that have ended.
type retiredStats struct {
	acquired, released, lost, fenced, syncs, syncErrors atomic.Uint64
	quarantine                                          atomic.Int64
}

// retireStats moves the counters of e's ended Holder to its limit, under
// statsMu, so that a Stats counts each Holder once.
func (s *Store) retireStats(e *entry) {
	st := e.h.Stats()
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	r := &e.ll.retired
	r.acquired.Add(st.Acquired)
	r.released.Add(st.Released)
	r.lost.Add(st.Lost)
	r.fenced.Add(st.Fenced)
	r.syncs.Add(st.Syncs)
	r.syncErrors.Add(st.SyncErrors)
	r.quarantine.Add(int64(st.Quarantine))
	e.retired = true
}

// Stats reports each leased limit's figures, by name. It is safe for
// concurrent use; a scrape reads every Holder once.
func (s *Store) Stats() []LimitStats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	by := make(map[*leasedLimit]*LimitStats, len(s.leased))
	out := make([]LimitStats, 0, len(s.leased))
	for _, ll := range s.leased {
		out = append(out, LimitStats{
			Limit: ll.Name, FailOpen: ll.failOpen.Load(), FailClosed: ll.failClosed.Load(), FailLocal: ll.failLocal.Load(),
			Overflow: ll.overflow.Load(), Stopped: ll.stopped.Load(),
			Acquired: ll.retired.acquired.Load(), Released: ll.retired.released.Load(), Lost: ll.retired.lost.Load(),
			Fenced: ll.retired.fenced.Load(), Syncs: ll.retired.syncs.Load(), SyncErrors: ll.retired.syncErrors.Load(),
			Quarantine: time.Duration(ll.retired.quarantine.Load()),
		})
	}
	for i := range out {
		by[s.leased[out[i].Limit]] = &out[i]
	}
	for i := range s.shards {
		for _, e := range s.shards[i].m.Load().entries() {
			if e.retired {
				continue
			}
			x := by[e.ll]
			st := e.h.Stats()
			x.Keys++
			x.Held += st.Held
			x.Usable += st.Usable
			x.Quarantined += st.Quarantined
			if st.Syncs > 0 && !st.Reachable {
				x.Unreachable++
			}
			x.Acquired += st.Acquired
			x.Released += st.Released
			x.Lost += st.Lost
			x.Fenced += st.Fenced
			x.Quarantine += st.Quarantine
			x.Syncs += st.Syncs
			x.SyncErrors += st.SyncErrors
		}
	}
	slices.SortFunc(out, func(a, b LimitStats) int { return strings.Compare(a.Limit, b.Limit) })
	return out
}
