package leasestore

import (
	"context"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/lease"
)

// numShards splits the table of keys: each shard is a map read without a
// lock (an atomic pointer) and copied on the rare write (a key's first
// request, an idle key stopped), so that decisions on one hot key contend
// only on its Holder.
const numShards = 16

type shard struct {
	m  atomic.Pointer[slots] // replaced whole, under mu
	mu sync.Mutex
	_  [48]byte // keep neighbouring shards' pointers off each other's cache lines
}

// slots are a shard's entries: an open-addressing table indexed by the
// low bits of the ident (a hash already, so a lookup hashes nothing),
// never changed once published.
type slots struct {
	mask uint64
	e    []*entry // nil: empty
	n    int
}

// get returns id's entry, nil when it has none.
func (t *slots) get(id ident) *entry {
	for i := id.lo & t.mask; ; i = (i + 1) & t.mask {
		e := t.e[i]
		if e == nil || e.id == id {
			return e
		}
	}
}

// entries returns the table's entries.
func (t *slots) entries() []*entry {
	out := make([]*entry, 0, t.n)
	for _, e := range t.e {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// newSlots makes a table of es, at most half full.
func newSlots(es []*entry) *slots {
	size := uint64(8)
	for size < 2*uint64(len(es)) {
		size *= 2
	}
	t := &slots{mask: size - 1, e: make([]*entry, size), n: len(es)}
	for _, e := range es {
		i := e.id.lo & t.mask
		for t.e[i] != nil {
			i = (i + 1) & t.mask
		}
		t.e[i] = e
	}
	return t
}

// entry is a leased limit and key: its Holder and what a decision needs.
type entry struct {
	id     ident
	ll     *leasedLimit
	limit  sluice.Limit // the requests' limit, as given
	params *algo.Params
	h      *lease.Holder
	burst  float64       // one partition's burst: a cost above it never fits
	reset  time.Duration // refill of an empty partition: every decision's ResetAfter
	cancel context.CancelFunc
	done   chan struct{} // closed when the Holder's Run has returned

	used    atomic.Bool   // a request since the last sweep
	idle    time.Duration // since the last request, as the sweeps count it
	retired bool          // its counters moved to ll.retired; under Store.statsMu

	local atomic.Pointer[localLimit] // the fail_local bucket's limit, by member count

	asked  [askedStripes]askedStripe // cost asked, in millionths, striped to spare the hot key's cache line
	demand demandState               // the Holder's Run reads it (Options.Demand)
}

// askedStripes is how many counters a key's asked cost is spread over:
// concurrent decisions add to different cache lines.
const askedStripes = 8

type askedStripe struct {
	n atomic.Int64
	_ [56]byte
}

// demandState is what the demand measure remembers between two of the
// Holder's rounds; only the Holder's Run goroutine touches it.
type demandState struct {
	total     int64     // asked, in millionths, at the last round
	at        time.Time // the last round
	lastAsked time.Time // the last round that saw a request
}

// ask counts cost as demand.
func (e *entry) ask(cost float64) {
	e.asked[rand.Uint32()%askedStripes].n.Add(int64(cost * 1e6))
}

// measure is the key's demand in cost per second, read by the Holder at
// each round: what was asked (allowed or not) since the last round. A key
// asked nothing for a round still wants one partition's rate until it is
// stopped idle, so that sparse traffic keeps a partition (whose tokens
// refill) instead of giving it back each round and starting empty again.
func (e *entry) measure(now func() time.Time, floor float64) float64 {
	var total int64
	for i := range e.asked {
		total += e.asked[i].n.Load()
	}
	d := &e.demand
	t := now()
	rate := 0.0
	if el := t.Sub(d.at).Seconds(); !d.at.IsZero() && el > 0 {
		rate = float64(total-d.total) / 1e6 / el
	}
	if total != d.total || d.lastAsked.IsZero() {
		d.lastAsked = t
	}
	d.total, d.at = total, t
	return max(rate, floor)
}

// localLimit is a fail_local bucket's limit for a member count.
type localLimit struct {
	members int
	limit   sluice.Limit
	ok      bool // false: the share cannot be cut into a valid limit
}

func (s *Store) shardOf(id ident) *shard { return &s.shards[id.hi>>60] }

// lookup returns id's entry, nil when it has none.
func (s *Store) lookup(id ident) *entry {
	e := s.shardOf(id).m.Load().get(id)
	if e != nil && !e.used.Load() {
		e.used.Store(true)
	}
	return e
}

// create makes key's entry and starts its Holder, or returns the entry a
// concurrent request made; nil (and no error) when MaxKeys are held. An
// entry under other parameters of the same limit is replaced: its Holder
// stops and the new one starts once it has given its partitions back.
func (s *Store) create(ll *leasedLimit, id ident, key string, limit sluice.Limit, params *algo.Params) (*entry, error) {
	sh := s.shardOf(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := sh.m.Load().get(id)
	if old != nil && old.limit == limit {
		return old, nil
	}
	if old == nil && s.count.Load() >= int64(s.o.MaxKeys) {
		ll.overflow.Add(1)
		if s.overflowLogged.CompareAndSwap(false, true) {
			s.o.Logger.Warn("leasestore: MaxKeys leased keys are held: a new key is refused (logged once; see the overflow counter)",
				"max_keys", s.o.MaxKeys, "limit", ll.Name, "policy", ll.Policy.String())
		}
		return nil, nil
	}
	e, err := s.newEntry(ll, key, limit, params)
	if err != nil {
		return nil, err
	}
	e.id = id
	var after <-chan struct{}
	if old != nil {
		// The same group and member: the old Holder leaves first.
		s.retire(old)
		after = old.done
	}
	if err := s.start(e, after); err != nil {
		return nil, err
	}
	es := sh.m.Load().entries()
	if old != nil {
		es = slices.DeleteFunc(es, func(x *entry) bool { return x == old })
	}
	sh.m.Store(newSlots(append(es, e)))
	if old == nil {
		s.count.Add(1)
	}
	e.used.Store(true)
	return e, nil
}

// newEntry builds key's Holder: the leased part of limit, L×(1−s) with
// burst B×(1−s), in the group named by the limit and key's hash.
func (s *Store) newEntry(ll *leasedLimit, key string, limit sluice.Limit, params *algo.Params) (*entry, error) {
	held, err := ll.part(limit)
	if err != nil {
		return nil, err
	}
	held.Name = s.group(ll.Name, key)
	e := &entry{
		ll: ll, limit: limit, params: params,
		burst: held.Capacity() / float64(ll.Partitions), // as the Holder computes it
		reset: refill(limit),
		done:  make(chan struct{}),
	}
	// Less than one partition's rate: the Holder asks for one.
	floor := held.Quota / held.Window.Seconds() / float64(ll.Partitions) / 2
	now := s.o.Now
	h, err := lease.New(lease.Options{
		Coordinator: s.o.Coordinator,
		Limit:       held,
		Partitions:  ll.Partitions,
		TTL:         ll.TTL,
		Member:      s.o.Member,
		Demand:      func() float64 { return e.measure(now, floor) },
		Now:         s.holderNow,
		Logger:      s.o.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: leasestore: limit %q on leases: %w", sluice.ErrInvalidLimit, limit.Name, err)
	}
	e.h = h
	return e, nil
}

// start runs e's Holder until the Store closes or e is stopped, after
// after is closed (a replaced Holder's end). It fails with ErrClosed once
// Close has begun.
func (s *Store) start(e *entry, after <-chan struct{}) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(s.ctx)
	e.cancel = cancel
	s.holders.Add(1)
	go func() {
		defer s.holders.Done()
		defer close(e.done)
		if after != nil {
			select {
			case <-after:
			case <-ctx.Done():
				s.retireStats(e)
				return
			}
		}
		_ = e.h.Run(ctx)
		s.retireStats(e)
	}()
	return nil
}

// retire stops e's Holder: Takes fail from now, and Run gives the
// partitions back. The caller removes e from its shard.
func (s *Store) retire(e *entry) {
	e.h.Close()
	e.cancel()
	e.ll.stopped.Add(1)
}

// sweep stops the Holders of the keys idle for their limit's Idle, tick
// being the time since the last sweep.
func (s *Store) sweep(tick time.Duration) {
	for i := range s.shards {
		sh := &s.shards[i]
		idle := false
		for _, e := range sh.m.Load().entries() {
			if e.used.Swap(false) {
				e.idle = 0
				continue
			}
			if e.idle += tick; e.idle >= e.ll.Idle {
				idle = true
			}
		}
		if !idle {
			continue
		}
		sh.mu.Lock()
		es := sh.m.Load().entries()
		es = slices.DeleteFunc(es, func(e *entry) bool {
			// A request may have come since: it keeps the key.
			if e.idle < e.ll.Idle || e.used.Load() {
				return false
			}
			s.count.Add(-1)
			s.retire(e)
			return true
		})
		sh.m.Store(newSlots(es))
		sh.mu.Unlock()
	}
}

// group names the group of key under the leased limit name: the name
// (cut to leave room) and 16 hex digits of a hash of both — HMAC-SHA256
// with the Store's secret, or SHA-256 without one — so the Coordinator
// never sees the key.
func (s *Store) group(name, key string) string {
	var sum []byte
	if len(s.o.Secret) > 0 {
		m := hmac.New(sha256.New, s.o.Secret)
		m.Write([]byte(name))
		m.Write([]byte{0})
		m.Write([]byte(key))
		sum = m.Sum(nil)
	} else {
		h := sha256.New()
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(key))
		sum = h.Sum(nil)
	}
	const keep = sluice.MaxNameLen - 17 // ":" and 16 hex digits
	if len(name) > keep {
		name = name[:keep]
	}
	return name + ":" + hex.EncodeToString(sum[:8])
}

// part is the part of limit the leases hold: L×(1−s), burst B×(1−s).
func (ll *leasedLimit) part(limit sluice.Limit) (sluice.Limit, error) {
	held, ok := cut(limit, 1-ll.OutageShare)
	if !ok {
		return sluice.Limit{}, fmt.Errorf("%w: limit %q: its leased part (%v of it, outage share %v) is not a valid limit", sluice.ErrInvalidLimit, limit.Name, 1-ll.OutageShare, ll.OutageShare)
	}
	return held, nil
}

// Check reports whether limit can be decided on leases as l says — a
// token_bucket or gcra limit named l.Name whose leased part, cut into
// l.Partitions, gives each partition at least one unit of quota and of
// burst — with the error a request under it would get. A configuration
// loader calls it, so that a limit the leases cannot hold is refused at
// load rather than at its first request.
func (l Leased) Check(limit sluice.Limit) error {
	ll, err := checkLeased(l)
	if err != nil {
		return fmt.Errorf("leasestore: %w", err)
	}
	if limit.Name != l.Name {
		return fmt.Errorf("%w: limit %q is not the leased %q", sluice.ErrInvalidLimit, limit.Name, l.Name)
	}
	if _, err := checkLimit(limit); err != nil {
		return err
	}
	held, err := ll.part(limit)
	if err != nil {
		return err
	}
	held.Name = l.Name
	if len(held.Name) > sluice.MaxNameLen-17 {
		held.Name = held.Name[:sluice.MaxNameLen-17]
	}
	held.Name += ":0000000000000000" // as a key's group is named
	// A Holder that never runs: New only checks.
	if _, err := lease.New(lease.Options{Coordinator: noCoordinator{}, Limit: held, Partitions: ll.Partitions, TTL: ll.TTL, Member: "check"}); err != nil {
		return fmt.Errorf("%w: leasestore: limit %q on leases: %w", sluice.ErrInvalidLimit, limit.Name, err)
	}
	return nil
}

// MaxCost is the largest cost a request under limit can be granted on
// leases as l says: one partition's burst, B×(1−OutageShare)/Partitions.
// A larger cost never fits (RetryAfter sluice.Never and an error wrapping
// sluice.ErrCostExceedsLimit), so a configuration loader refuses a fixed
// cost above it at load. The error is Check's.
func (l Leased) MaxCost(limit sluice.Limit) (float64, error) {
	if err := l.Check(limit); err != nil {
		return 0, err
	}
	ll, _ := checkLeased(l) // checked by Check
	held, _ := ll.part(limit)
	return held.Capacity() / float64(ll.Partitions), nil
}

// Validate reports what is wrong with l alone (its name, partitions,
// TTL, policy, outage share and idle time), as New would refuse it.
func (l Leased) Validate() error {
	if _, err := checkLeased(l); err != nil {
		return fmt.Errorf("leasestore: %w", err)
	}
	return nil
}

// noCoordinator is the Coordinator of a Holder that is only checked.
type noCoordinator struct{}

func (noCoordinator) Sync(context.Context, lease.SyncRequest) (lease.SyncReply, error) {
	return lease.SyncReply{}, ErrClosed
}

func (noCoordinator) Leave(context.Context, lease.Group, string, []lease.Grant) error {
	return ErrClosed
}

// cut returns limit scaled by f (0 < f ≤ 1): quota and burst times f,
// rounded down to the resolution of a millionth, else a thousandth, else a
// unit, whichever first gives a valid limit; false when none does.
func cut(limit sluice.Limit, f float64) (sluice.Limit, bool) {
	if f == 1 {
		return limit, true
	}
	for _, perUnit := range []float64{1e6, 1e3, 1} {
		down := func(v float64) float64 { return math.Floor(v*f*perUnit*(1+1e-12)) / perUnit }
		c := limit
		c.Quota, c.Burst = down(limit.Quota), down(limit.Capacity())
		if c.Quota > 0 && c.Burst > 0 && c.Validate() == nil {
			return c, true
		}
	}
	return sluice.Limit{}, false
}

func randomMember() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return "leasestore-" + hex.EncodeToString(b[:])
}
