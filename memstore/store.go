// Package memstore is the in-process store of sluice: a sluice.Limiter that
// keeps every key's state in memory, for one process (the embedded default).
//
// Keys are spread over shards, each a lock and one open-addressing table
// per algorithm. A key's state belongs to the limit's name and parameters
// and the key, identified by a 128-bit keyed hash (raw keys are never
// stored); a changed limit's keys start fresh, and the states it left are
// swept. A decision allocates nothing, for a held key or a new one, except
// for the SlidingLog and Concurrency states, whose entries grow with use,
// and when a table grows.
//
// Memory is bounded: at most MaxKeys keys are held; to admit a new key into
// a full shard the store evicts, among a few sampled keys, the one closest
// to its reset (an evicted key restarts full, and that is counted), and a
// background sweep forgets keys that are back to full, which loses nothing.
// A key costs about 56 bytes; a SlidingLog or Concurrency key also holds up
// to Quota entries of 16 or 24 bytes.
//
// For a fleet of processes sharing limits, use redisstore.
package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/monoclock"
	"github.com/sluicehq/sluice/internal/units"
)

// Options configures a Store. The zero value is valid: every zero field
// means its documented default.
type Options struct {
	// Now is the clock. Default: the runtime's monotonic clock, anchored to
	// the wall clock when the store is created (so it never steps back), read
	// as ClockResolution says. A Now that steps backwards is tolerated: an
	// algorithm that remembers an instant (token and leaky bucket, sliding
	// log; fixed and sliding window when the reading falls before the
	// counted window) decides at that instant instead — no refill, durations
	// measured from it — and the store counts it in Stats.ClockBackwards;
	// GCRA and Concurrency take the earlier reading as it is, which only
	// means less capacity.
	Now func() time.Time

	// ClockResolution is the resolution of the default clock: a background
	// goroutine reads the monotonic clock once per resolution and decisions
	// use that reading, an atomic load instead of a clock read (which costs
	// 25-55 ns on a VM, more than the rest of a decision). Decisions then
	// see time late by the clock's lag — one resolution while the goroutine
	// runs on time, more if it is starved of CPU. That is conservative (less
	// refill), and the cost admitted over any real interval T stays within
	// B + rate × (T + lag). Default 1 ms, the resolution of nginx's
	// limit_req. Negative: read the monotonic clock at every decision.
	// Ignored when Now is set.
	ClockResolution time.Duration

	// MaxKeys bounds the states held, over all limits. Default 1,048,576
	// (about 56 MiB of token-bucket states; no key bytes are kept). The
	// store holds at most MaxKeys, a little fewer when keys fall unevenly on
	// shards.
	MaxKeys int

	// SweepInterval is how often the background sweep forgets keys that are
	// back to full. Default one minute; negative disables the sweep (memory
	// is then bounded by MaxKeys alone).
	SweepInterval time.Duration

	// Shards is the number of locks and tables, a power of two. Default:
	// 256, fewer when MaxKeys is small, so that each shard holds at least 64
	// keys.
	Shards int
}

// Default option values.
const (
	DefaultMaxKeys         = 1 << 20
	DefaultSweepInterval   = time.Minute
	DefaultShards          = 256
	DefaultClockResolution = time.Millisecond
)

// Stats are counters of a Store's life.
type Stats struct {
	Keys           int    // states held now (a key under two limits is two)
	Evictions      uint64 // keys dropped while they held live state, to stay under MaxKeys; each restarts full
	Expired        uint64 // keys forgotten because they were back to full (nothing lost)
	ClockBackwards uint64 // decisions whose clock reading was earlier than the key's state (clamped)
}

// Store is an in-memory sluice.Limiter. It is safe for concurrent use.
// Create it with New; Close stops its background goroutine (the default
// clock's ticks and the sweep).
type Store struct {
	seeds    identSeeds
	clock    func() int64      // Unix ns
	coarse   *monoclock.Coarse // the default clock, ticked by run; nil otherwise
	epoch    int64             // Unix µs of the store's second 0, for reset seconds
	shards   []shard
	shift    uint // 64 − log2(len(shards))
	perShard int

	limits   atomic.Pointer[map[sluice.Limit]*compiled]
	limitsMu sync.Mutex               // serializes writers of limits
	last     atomic.Pointer[compiled] // the limit compiled last looked up: most calls hit it
	tickets  atomic.Uint64

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var _ sluice.Charger = (*Store)(nil)

// shard is one lock and the tables of the keys whose hash selects it.
type shard struct {
	mu    sync.Mutex
	n     int    // keys in all tables
	rng   uint64 // xorshift state for eviction sampling
	stats Stats  // counters, guarded by mu (Keys unused)

	tokenBucket   table[algo.TokenBucket]
	gcra          table[algo.GCRA]
	fixedWindow   table[algo.FixedWindow]
	slidingLog    table[algo.SlidingLog]
	slidingWindow table[algo.SlidingWindow]
	leakyBucket   table[algo.LeakyBucket]
	concurrency   table[algo.Concurrency]

	_ [64]byte // keep neighbouring shards' locks off each other's cache lines
}

// compiled is a limit compiled once and cached.
type compiled struct {
	params    *algo.Params
	algorithm sluice.Algorithm
	limitHash [2]uint64 // of the limit's name and parameters: see ident
	kind      kindOps
}

// resolved is one (limit, key) of a call, located.
type resolved struct {
	c     *compiled
	id    ident
	shard int
	cost  int64
}

// maxCompiled bounds the cache of compiled limits; past it the cache starts
// over (limits are cheap to compile again).
const maxCompiled = 4096

// New returns a Store, starting its background sweep unless disabled.
func New(opts Options) (*Store, error) {
	if opts.MaxKeys < 0 {
		return nil, fmt.Errorf("memstore: MaxKeys %d: must be positive (0 means %d)", opts.MaxKeys, DefaultMaxKeys)
	}
	if opts.Shards < 0 || opts.Shards&(opts.Shards-1) != 0 || opts.Shards > 1<<16 {
		return nil, fmt.Errorf("memstore: Shards %d: must be a power of two up to 65536 (0 means the default)", opts.Shards)
	}
	maxKeys := cmp.Or(opts.MaxKeys, DefaultMaxKeys)
	n := opts.Shards
	if n == 0 {
		n = DefaultShards
		for n > 1 && maxKeys/n < 64 {
			n /= 2
		}
	}
	if maxKeys < n {
		return nil, fmt.Errorf("memstore: MaxKeys %d is fewer than Shards %d", maxKeys, n)
	}
	s := &Store{
		seeds:    newIdentSeeds(),
		shards:   make([]shard, n),
		shift:    uint(64 - bits.TrailingZeros(uint(n))),
		perShard: maxKeys / n,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if n == 1 {
		s.shift = 64 // h >> 64 is 0 in Go
	}
	tick := time.Duration(0)
	switch res := cmp.Or(opts.ClockResolution, DefaultClockResolution); {
	case opts.Now != nil:
		now := opts.Now
		s.clock = func() int64 { return now().UnixNano() }
	case res < 0:
		s.clock = monoclock.New().Now
	default:
		s.coarse = monoclock.NewCoarse(monoclock.New())
		s.clock, tick = s.coarse.Now, res
	}
	// Reset seconds are uint32 counted from 2^31 s (68 years) before now,
	// so they cover the next 68 years and a fake clock set far back.
	s.epoch = s.now() - math.MaxInt32*microsPerSecond
	for i := range s.shards {
		s.shards[i].rng = uint64(i)*0x9e3779b97f4a7c15 | 1
	}
	empty := map[sluice.Limit]*compiled{}
	s.limits.Store(&empty)
	s.tickets.Store(rand.Uint64()) // an earlier process's tickets are unlikely to be valid here
	sweep := max(cmp.Or(opts.SweepInterval, DefaultSweepInterval), 0)
	if tick == 0 && sweep == 0 {
		close(s.done)
	} else {
		go s.run(tick, sweep)
	}
	return s, nil
}

// Allow decides whether cost may be spent on key under limit now; see
// sluice.Limiter. It never blocks on anything but its shard's lock; ctx is
// not used.
func (s *Store) Allow(_ context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	return s.one(key, limit, cost, false)
}

// Charge spends cost on key under limit whatever the limit holds, running
// the key into debt; see sluice.Charger.
func (s *Store) Charge(_ context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	return s.one(key, limit, cost, true)
}

// one decides a single limit: Allow, or with force Charge.
func (s *Store) one(key string, limit sluice.Limit, cost float64, force bool) (sluice.Decision, error) {
	c, err := s.compile(limit)
	if err != nil {
		return sluice.Decision{}, err
	}
	if err := sluice.ValidateKey(key); err != nil {
		return sluice.Decision{}, err
	}
	call := algo.Call{Force: force}
	if call.Cost, err = c.params.Cost(cost); err != nil {
		return sluice.Decision{}, err
	}
	if force {
		if err := c.params.Chargeable(); err != nil {
			return sluice.Decision{}, err
		}
	}
	if c.algorithm == sluice.Concurrency {
		call.Ticket = s.ticket()
	}
	id := identify(&s.seeds, c.limitHash, key)
	sh := &s.shards[id.hi>>s.shift]
	sh.mu.Lock()
	call.Now = s.now()
	res, err := s.step(sh, c, id, call, true, nil)
	sh.mu.Unlock()
	return res.Decision(limit, call.Ticket), err
}

// AllowAll decides several limits as one; see sluice.Limiter. The limits are
// decided atomically: their shards are locked together (in index order) and
// read one clock instant. In RejectionsCount mode a Concurrency limit is
// never charged for a rejected request (its slots would stay held).
func (s *Store) AllowAll(_ context.Context, reqs []sluice.Request, mode sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	if err := sluice.ValidateRequests(reqs, mode, each); err != nil {
		return sluice.Decision{}, err
	}
	var (
		rsBuf     [8]resolved
		callsBuf  [8]algo.Call
		dsBuf     [8]sluice.Decision
		pinnedBuf [8]ident
	)
	rs, calls, ds, pinned := rsBuf[:0], callsBuf[:0], dsBuf[:0], pinnedBuf[:0]
	for i, q := range reqs {
		rs = append(rs, resolved{})
		if err := s.resolve(&rs[i], q.Key, q.Limit, q.Cost); err != nil {
			return sluice.Decision{}, fmt.Errorf("request %d: %w", i, err)
		}
		for j := range i {
			if rs[j].id == rs[i].id {
				return sluice.Decision{}, fmt.Errorf("%w: requests %d and %d have the same limit name %q and key", sluice.ErrInvalidRequest, j, i, q.Limit.Name)
			}
		}
		call := algo.Call{Cost: rs[i].cost}
		if q.Limit.Algorithm == sluice.Concurrency {
			call.Ticket = s.ticket()
		}
		calls = append(calls, call)
		ds = append(ds, sluice.Decision{})
		pinned = append(pinned, rs[i].id)
	}
	// A Concurrency limit is charged only for an allowed request, whatever
	// the mode; in RejectionsCount mode the others are charged at once.
	chargeNow := func(i int) bool {
		return mode == sluice.RejectionsCount && rs[i].c.algorithm != sluice.Concurrency
	}
	s.lockAll(rs)
	now := s.now()
	var errs []error
	allowed := true
	for i := range rs {
		calls[i].Now = now
		res, err := s.step(&s.shards[rs[i].shard], rs[i].c, rs[i].id, calls[i], chargeNow(i), pinned)
		if err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", i, err))
		}
		ds[i] = res.Decision(reqs[i].Limit, calls[i].Ticket)
		allowed = allowed && res.Allowed()
	}
	for i := range rs {
		switch {
		case chargeNow(i):
		case allowed:
			res, _ := s.step(&s.shards[rs[i].shard], rs[i].c, rs[i].id, calls[i], true, pinned)
			ds[i] = res.Decision(reqs[i].Limit, calls[i].Ticket)
		case ds[i].Allowed:
			// Would have allowed, but nothing was spent: report the state as
			// it is, read with a cost that never fits.
			peek := calls[i]
			peek.Cost = rs[i].c.params.CapacityAtoms() + 1
			res, _ := s.step(&s.shards[rs[i].shard], rs[i].c, rs[i].id, peek, false, nil)
			ds[i] = res.Decision(reqs[i].Limit, 0)
			ds[i].Allowed, ds[i].RetryAfter = true, 0
		}
	}
	s.unlockAll(rs)
	copy(each, ds)
	return sluice.Combine(ds), errors.Join(errs...)
}

// Release frees the slots a Concurrency decision holds; see sluice.Limiter.
func (s *Store) Release(_ context.Context, key string, limit sluice.Limit, ticket uint64) error {
	if err := sluice.ValidateRelease(limit); err != nil {
		return err
	}
	var r resolved
	if err := s.resolve(&r, key, limit, 1); err != nil {
		return err
	}
	sh := &s.shards[r.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := &sh.concurrency
	if at, _ := t.find(r.id); at >= 0 {
		st := &t.slots[at].state
		st.Release(ticket)
		// A state that is fresh now is forgotten at once, as Redis does.
		if resetAt := st.ResetAt(r.c.params); resetAt <= s.now() {
			t.remove(at)
			sh.n--
		} else {
			t.slots[at].reset = s.resetSecond(resetAt)
		}
	}
	return nil
}

var _ sluice.Inspector = (*Store)(nil)

// Peek reports key's state under limit as it is, spending nothing; see
// sluice.Inspector.
func (s *Store) Peek(_ context.Context, key string, limit sluice.Limit) (sluice.State, error) {
	var r resolved
	if err := s.resolve(&r, key, limit, 1); err != nil {
		return sluice.State{}, err
	}
	sh := &s.shards[r.shard]
	sh.mu.Lock()
	// A cost that never fits reads the state without changing it.
	call := algo.Call{Cost: r.c.params.CapacityAtoms() + 1, Now: s.now()}
	res, _ := s.step(sh, r.c, r.id, call, false, nil)
	sh.mu.Unlock()
	d := res.Decision(limit, 0)
	return sluice.State{Remaining: d.Remaining, ResetAfter: d.ResetAfter}, nil
}

// Reset forgets key's state under limit: it starts full. See
// sluice.Inspector.
func (s *Store) Reset(_ context.Context, key string, limit sluice.Limit) error {
	var r resolved
	if err := s.resolve(&r, key, limit, 1); err != nil {
		return err
	}
	sh := &s.shards[r.shard]
	sh.mu.Lock()
	r.c.kind.forget(sh, r.id)
	sh.mu.Unlock()
	return nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.n
		st.Evictions += sh.stats.Evictions
		st.Expired += sh.stats.Expired
		st.ClockBackwards += sh.stats.ClockBackwards
		sh.mu.Unlock()
	}
	return st
}

// Close stops the background goroutine (the default clock's ticks and the
// sweep) and waits for it to exit. The store keeps deciding (on a clock
// that no longer advances, if it was the default one: close a store only
// when done with it). Close is idempotent and always returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// Sweep forgets, now, every key that is back to full; the background sweep
// calls it. It returns how many keys it forgot.
func (s *Store) Sweep() int {
	total := 0
	for i := range s.shards {
		if s.coarse != nil {
			s.coarse.Tick() // a long sweep must not freeze the clock
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		nowSec := s.second(s.now())
		removed := 0
		for _, k := range kinds {
			removed += k.sweep(s, sh, nowSec)
		}
		sh.stats.Expired += uint64(removed)
		sh.mu.Unlock()
		total += removed
	}
	return total
}

// run is the store's background goroutine: it ticks the default clock
// every tick and sweeps every sweep (either may be 0: never).
func (s *Store) run(tick, sweep time.Duration) {
	defer close(s.done)
	var tickC, sweepC <-chan time.Time
	if tick > 0 {
		t := time.NewTicker(tick)
		defer t.Stop()
		tickC = t.C
	}
	if sweep > 0 {
		t := time.NewTicker(sweep)
		defer t.Stop()
		sweepC = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-tickC:
			s.coarse.Tick()
		case <-sweepC:
			s.Sweep()
		}
	}
}

// step runs c's algorithm on its table of sh; see the generic step.
func (s *Store) step(sh *shard, c *compiled, id ident, call algo.Call, commit bool, pinned []ident) (algo.Result, error) {
	switch c.algorithm {
	case sluice.TokenBucket:
		return step[algo.TokenBucket](s, sh, &sh.tokenBucket, c, id, call, commit, pinned)
	case sluice.GCRA:
		return step[algo.GCRA](s, sh, &sh.gcra, c, id, call, commit, pinned)
	case sluice.FixedWindow:
		return step[algo.FixedWindow](s, sh, &sh.fixedWindow, c, id, call, commit, pinned)
	case sluice.SlidingLog:
		return step[algo.SlidingLog](s, sh, &sh.slidingLog, c, id, call, commit, pinned)
	case sluice.SlidingWindow:
		return step[algo.SlidingWindow](s, sh, &sh.slidingWindow, c, id, call, commit, pinned)
	case sluice.LeakyBucket:
		return step[algo.LeakyBucket](s, sh, &sh.leakyBucket, c, id, call, commit, pinned)
	default:
		return step[algo.Concurrency](s, sh, &sh.concurrency, c, id, call, commit, pinned)
	}
}

// ticket returns a fresh non-zero concurrency ticket.
func (s *Store) ticket() uint64 {
	for {
		if t := s.tickets.Add(1); t != 0 {
			return t
		}
	}
}

// now reads the store's clock, in Unix microseconds (rounded down: a
// little early, which is conservative).
func (s *Store) now() int64 {
	if s.coarse != nil {
		return units.FloorDiv(s.coarse.Now(), units.Micro)
	}
	return units.FloorDiv(s.clock(), units.Micro)
}

// resolve validates one (key, limit, cost) and locates it.
func (s *Store) resolve(r *resolved, key string, limit sluice.Limit, cost float64) error {
	c, err := s.compile(limit)
	if err != nil {
		return err
	}
	if err := sluice.ValidateKey(key); err != nil {
		return err
	}
	if r.cost, err = c.params.Cost(cost); err != nil {
		return err
	}
	r.c = c
	r.id = identify(&s.seeds, c.limitHash, key)
	r.shard = int(r.id.hi >> s.shift)
	return nil
}

// compile returns the cached compilation of limit, compiling it on a miss.
func (s *Store) compile(limit sluice.Limit) (*compiled, error) {
	if c := s.last.Load(); c != nil && c.params.Limit == limit {
		return c, nil
	}
	if c, ok := (*s.limits.Load())[limit]; ok {
		s.last.Store(c)
		return c, nil
	}
	p, err := algo.Compile(limit)
	if err != nil {
		return nil, err
	}
	c := &compiled{
		params:    p,
		algorithm: limit.Algorithm,
		limitHash: hashLimit(&s.seeds, limitID{limit.Name, p.Fingerprint}),
		kind:      kinds[limit.Algorithm],
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	old := *s.limits.Load()
	next := make(map[sluice.Limit]*compiled, len(old)+1)
	if len(old) < maxCompiled {
		for k, v := range old {
			next[k] = v
		}
	}
	next[limit] = c
	s.limits.Store(&next)
	s.last.Store(c)
	return c, nil
}

// makeRoom evicts one key from sh, from the table of the key about to be
// inserted if it can, else from another. It never evicts a pinned key (one
// of the same multi-limit call); when every key of the shard is pinned, it
// evicts nothing and the shard goes over its share of MaxKeys by that
// call's keys.
func (s *Store) makeRoom(sh *shard, prefer kindOps, now int64, pinned []ident) {
	nowSec := s.second(now)
	live, ok := prefer.evict(s, sh, nowSec, pinned)
	for i := 0; !ok && i < len(kinds); i++ {
		if kinds[i] != prefer {
			live, ok = kinds[i].evict(s, sh, nowSec, pinned)
		}
	}
	switch {
	case ok && live:
		sh.stats.Evictions++
	case ok:
		sh.stats.Expired++
	}
}

// lockAll locks the distinct shards of rs in index order.
func (s *Store) lockAll(rs []resolved) {
	s.eachShard(rs, func(sh *shard) { sh.mu.Lock() })
}

func (s *Store) unlockAll(rs []resolved) {
	s.eachShard(rs, func(sh *shard) { sh.mu.Unlock() })
}

// eachShard calls f once per distinct shard of rs, in increasing index.
func (s *Store) eachShard(rs []resolved, f func(*shard)) {
	last := -1
	for {
		next := len(s.shards)
		for i := range rs {
			if rs[i].shard > last && rs[i].shard < next {
				next = rs[i].shard
			}
		}
		if next == len(s.shards) {
			return
		}
		f(&s.shards[next])
		last = next
	}
}

// second is the store-clock second holding now, for reset comparisons.
func (s *Store) second(now int64) uint32 {
	return clampSecond((now - s.epoch) / microsPerSecond)
}

const microsPerSecond = int64(time.Second / time.Microsecond)

// resetSecond is the first store-clock second at or after the reset instant.
func (s *Store) resetSecond(at int64) uint32 {
	if at <= s.epoch {
		return 0
	}
	return clampSecond((at - s.epoch + microsPerSecond - 1) / microsPerSecond)
}

func clampSecond(sec int64) uint32 {
	return uint32(min(max(sec, 0), math.MaxUint32))
}

// random is xorshift64 on the shard's state; the shard's lock guards it.
func (sh *shard) random() uint64 {
	x := sh.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	sh.rng = x
	return x
}
