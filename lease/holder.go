package lease

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/monoclock"
)

// Holder holds, renews and spends one process's partitions of a shared
// limit. Run keeps the leases; Take and Wait spend from them. A Holder is
// safe for concurrent use.
type Holder struct {
	o           Options
	group       Group
	rate        float64 // one partition's refill, cost per second
	ratePerNano float64 // the same per nanosecond
	clock       monoclock.Clock
	anchor      time.Time // Options.Now at New, when it is set
	burst       float64   // one partition's burst

	kick chan struct{} // asks Run for a round now (demand with nothing held)

	mu      sync.Mutex
	parts   []*part       // held, in the order of acquisition
	cur     int           // the index in parts that paid last
	wants   []int         // the members' wants, from the last reply
	self    int           // this member's index in wants
	changed chan struct{} // closed and replaced when the usable set may have grown
	closed  bool
	reach   reachability

	// demand measured since the last round
	asked        float64
	waiting      int           // Waits blocked now
	blockedSince instant       // when waiting last went from 0 to 1
	blockedFor   time.Duration // time with a Wait blocked since the last round
	lastRound    instant       // when the last round was prepared
	rateSeen     float64       // the smoothed rate asked, cost per second
	want         int
	allot        int

	stats counters
}

// part is a held partition and its bucket.
type part struct {
	Grant
	tokens   float64
	last     instant // tokens are as of last
	usable   instant // not spent before (quarantine)
	deadline instant // not spent from (local deadline)
}

type reachability struct {
	known, ok bool
	since     instant
}

type counters struct {
	acquired, lost, released, fenced, syncs, syncErrors atomic.Uint64
	quarantineNanos                                     atomic.Int64
}

// Spend is what one Take or Wait spent from: the partition and the epoch
// it is held under. Send the epoch with the work (FormatFence) so that a
// target that checks fences refuses it once the partition moved on.
type Spend struct {
	Group string
	Grant
}

// New checks o and returns a Holder that holds nothing until Run.
func New(o Options) (*Holder, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	p := float64(o.Partitions)
	return &Holder{
		o:           o,
		group:       o.group(),
		rate:        o.perSecond() / p,
		ratePerNano: o.perSecond() / p / 1e9,
		clock:       monoclock.New(),
		anchor:      anchorOf(o),
		burst:       o.Limit.Capacity() / p,
		kick:        make(chan struct{}, 1),
		changed:     make(chan struct{}),
	}, nil
}

// Member returns this Holder's member ID.
func (h *Holder) Member() string { return h.o.Member }

// Group returns the group this Holder belongs to.
func (h *Holder) Group() Group { return h.group }

// Take spends cost now if a usable partition holds it, and reports which
// partition paid. Otherwise it spends nothing and says how long until it
// might (at least a millisecond; the renew interval when nothing is held).
// Take counts cost as demand either way. A cost above one partition's
// burst (B/P) is refused with ErrCostTooLarge; a negative or NaN cost with
// ErrInvalid.
func (h *Holder) Take(cost float64) (Spend, bool, time.Duration, error) {
	return h.take(cost, true)
}

func (h *Holder) take(cost float64, count bool) (Spend, bool, time.Duration, error) {
	if !(cost >= 0) || math.IsInf(cost, 0) {
		return Spend{}, false, 0, fmt.Errorf("%w: cost %v", ErrInvalid, cost)
	}
	if cost > h.burst {
		return Spend{}, false, 0, fmt.Errorf("%w: cost %g, burst per partition %g (B/P)", ErrCostTooLarge, cost, h.burst)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now() // under the lock: a caller preempted before it cannot spend on a stale instant
	if h.closed {
		return Spend{}, false, 0, ErrClosed
	}
	if count {
		h.asked += cost
	}
	// The partition that paid last usually pays again: try it alone
	// before looking at every partition.
	if h.cur < len(h.parts) {
		if p := h.parts[h.cur]; h.usableLocked(p, now) {
			h.refill(p, now)
			if p.tokens >= cost {
				p.tokens -= cost
				return Spend{Group: h.group.Name, Grant: p.Grant}, true, 0, nil
			}
		}
	}
	var best *part
	bestAt := 0
	wait := time.Duration(math.MaxInt64)
	for i, p := range h.parts {
		if !h.usableLocked(p, now) {
			if now.Before(p.usable) && now.Before(p.deadline) {
				wait = min(wait, p.usable.Sub(now))
			}
			continue
		}
		h.refill(p, now)
		if p.tokens >= cost && (best == nil || p.tokens > best.tokens) {
			best, bestAt = p, i
		}
		if p.tokens < cost {
			need := time.Duration((cost - p.tokens) / h.rate * float64(time.Second))
			if now.Add(need).Before(p.deadline) || h.o.naive {
				wait = min(wait, need)
			}
		}
	}
	if best != nil {
		h.cur = bestAt
		best.tokens -= cost
		return Spend{Group: h.group.Name, Grant: best.Grant}, true, 0, nil
	}
	if len(h.parts) == 0 || wait == time.Duration(math.MaxInt64) {
		wait = h.o.Renew
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
	return Spend{}, false, max(wait, time.Millisecond), nil
}

// usableLocked reports whether p may be spent at now: out of quarantine
// and before its local deadline.
func (h *Holder) usableLocked(p *part, now instant) bool {
	if h.o.naive {
		return true
	}
	return !now.Before(p.usable) && now.Before(p.deadline)
}

func (h *Holder) refill(p *part, now instant) {
	from := p.last
	if from.Before(p.usable) {
		from = p.usable
	}
	if el := now - from; el > 0 {
		p.tokens = min(h.burst, p.tokens+float64(el)*h.ratePerNano)
		p.last = now
	}
}

// Wait spends cost as soon as a held partition holds it, or returns the
// context's error, ErrClosed, or Take's error for a cost that never fits.
// While a Wait is blocked the Holder asks for more partitions (unless
// Options.Demand says what it wants).
func (h *Holder) Wait(ctx context.Context, cost float64) (Spend, error) {
	count, waiting := true, false
	defer func() {
		if waiting {
			h.mu.Lock()
			h.waiting--
			if h.waiting == 0 {
				h.blockedFor += h.now().Sub(h.blockedSince)
			}
			h.mu.Unlock()
		}
	}()
	for {
		// Taken before the try, so that a change between the try and the
		// wait below is not missed.
		h.mu.Lock()
		changed := h.changed
		h.mu.Unlock()
		s, ok, wait, err := h.take(cost, count)
		if err != nil || ok {
			return s, err
		}
		count = false
		h.mu.Lock()
		if !waiting {
			waiting = true
			if h.waiting == 0 {
				h.blockedSince = h.now()
			}
			h.waiting++
		}
		h.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Spend{}, ctx.Err()
		case <-changed:
			t.Stop()
		case <-t.C:
		}
	}
}

// Fenced tells the Holder that a target refused s as a stale epoch: the
// partition has a newer holder, so it is dropped at once and counted.
func (h *Holder) Fenced(s Spend) {
	h.stats.fenced.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, p := range h.parts {
		if p.Grant == s.Grant {
			h.dropLocked(i, h.now())
			h.stats.lost.Add(1)
			return
		}
	}
}

// Rate returns what this process may spend now, in cost per second: the
// refill of its usable partitions.
func (h *Holder) Rate() float64 {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.usableRateLocked(now)
}

func (h *Holder) usableRateLocked(now instant) float64 {
	n := 0
	for _, p := range h.parts {
		if h.usableLocked(p, now) {
			n++
		}
	}
	return float64(n) * h.rate
}

// Reachable reports whether the last round reached the Coordinator (false
// before the first).
func (h *Holder) Reachable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reach.known && h.reach.ok
}

// Stats is a Holder's state and counters.
type Stats struct {
	Member string
	// Held partitions; Usable now; in Quarantine now.
	Held, Usable, Quarantined int
	// Want is what this process asked for at the last round, Allotment
	// what the rule gives it, Members the live members it saw.
	Want, Allotment, Members int
	// Rate is what it may spend now, cost per second.
	Rate float64
	// Reachable: the last round reached the Coordinator.
	Reachable bool
	// Acquired, Released (given back gracefully) and Lost (lapsed at the
	// local deadline, not renewed, or fenced) leases since New.
	Acquired, Released, Lost uint64
	// Fenced counts stale epochs targets refused (Holder.Fenced).
	Fenced uint64
	// Quarantine is the total time partitions spent in quarantine (one
	// under way counts whole).
	Quarantine time.Duration
	// Syncs and SyncErrors count rounds with the Coordinator.
	Syncs, SyncErrors uint64
}

// Stats reports the Holder's state now.
func (h *Holder) Stats() Stats {
	now := h.now()
	h.mu.Lock()
	s := Stats{Member: h.o.Member, Held: len(h.parts), Want: h.want, Allotment: h.allot, Members: len(h.wants), Reachable: h.reach.known && h.reach.ok}
	for _, p := range h.parts {
		switch {
		case h.usableLocked(p, now):
			s.Usable++
		case now.Before(p.usable):
			s.Quarantined++
		}
	}
	h.mu.Unlock()
	s.Rate = float64(s.Usable) * h.rate
	s.Acquired, s.Released, s.Lost = h.stats.acquired.Load(), h.stats.released.Load(), h.stats.lost.Load()
	s.Fenced = h.stats.fenced.Load()
	s.Quarantine = time.Duration(h.stats.quarantineNanos.Load())
	s.Syncs, s.SyncErrors = h.stats.syncs.Load(), h.stats.syncErrors.Load()
	return s
}

// dropLocked forgets parts[i]; a quarantine it had not finished counts
// only as far as it went.
func (h *Holder) dropLocked(i int, now instant) {
	p := h.parts[i]
	if left := p.usable.Sub(now); left > 0 {
		h.stats.quarantineNanos.Add(-int64(left))
	}
	h.parts = append(h.parts[:i], h.parts[i+1:]...)
}

// wakeLocked wakes the blocked Waits: the usable set may have grown.
func (h *Holder) wakeLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// instant is a reading of the Holder's clock in nanoseconds: monotonic
// (internal/monoclock) unless Options.Now is set. Its methods read as
// time.Time's do.
type instant int64

func (a instant) Before(b instant) bool       { return a < b }
func (a instant) After(b instant) bool        { return a > b }
func (a instant) Sub(b instant) time.Duration { return time.Duration(a - b) }
func (a instant) Add(d time.Duration) instant { return a + instant(d) }
func (a instant) IsZero() bool                { return a == 0 }

// now reads the Holder's clock. Options.Now is read as the time since
// an instant taken at New, so that time.Now's monotonic reading counts,
// not its wall clock.
func (h *Holder) now() instant {
	if h.o.Now != nil {
		return instant(anchorOrigin + int64(h.o.Now().Sub(h.anchor)))
	}
	return instant(h.clock.Now())
}

// anchorOrigin is the instant Options.Now's anchor stands for: any
// positive origin does (instants only compare and subtract; zero means
// unset).
const anchorOrigin = 1 << 40

func anchorOf(o Options) time.Time {
	if o.Now == nil {
		return time.Time{}
	}
	return o.Now()
}
