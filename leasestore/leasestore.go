// Package leasestore is a sluice.Limiter that decides chosen limits in
// process, at memory speed, against the partitions of a fleet-wide limit
// this instance holds under leases (package lease), and hands every other
// limit to another Limiter (Options.Next) unchanged.
//
// It is for the few hot limits — a global 50k/s, a big tenant's
// per-second cap — where a Redis call per decision is the bottleneck.
// For each leased limit and key it runs a lease.Holder, created on the
// key's first request: the Holder holds some of the limit's P partitions
// (each a token bucket of L/P per second and burst B/P) under leases a
// Coordinator grants (redislease), renews them every TTL/3 and asks for
// partitions in proportion to the demand it sees, so that the fleet as a
// whole never admits more than B + L×T in any interval T. A decision is
// one Holder.Take: a lock and a few partitions' arithmetic, no network.
//
// What a leased limit decides differently from a store's token bucket:
//
//   - A key's first requests are rejected: the Holder has no partition
//     until its first round with the Coordinator (RetryAfter: the renew
//     interval), and a partition never held before is quarantined for TTL
//     plus the drift margin (2.1 s by default), because the Coordinator
//     cannot tell a brand-new group from one whose state it lost.
//     Partitions given back gracefully (an idle key stopped, an instance
//     shut down) are spent at once by the next holder.
//   - Acquired partitions start empty: a hand-over never adds a burst.
//   - A cost above one partition's burst (B/P, not B) never fits.
//   - Remaining is 0 (a lower bound: the Holder does not report its
//     tokens) and ResetAfter the refill time of an empty partition (an
//     upper bound), on every decision.
//
// Keys are bounded (Options.MaxKeys); a key idle for Leased.Idle has its
// Holder stopped, which gives its partitions back. The group a key's
// Holder joins is named by the limit and a keyed hash of the key, never
// the key itself. When the Coordinator cannot be reached and a key holds
// nothing usable, the limit's failure policy decides (see Leased.Policy
// and Leased.OutageShare). docs/leasestore.md has the figures and the
// conformance tables a leased limit does not pass.
package leasestore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memstore"
)

// Options configure a Store. Zero fields mean the documented default.
type Options struct {
	// Coordinator grants the leased limits' partitions (redislease on the
	// fleet's Redis). Required.
	Coordinator lease.Coordinator

	// Limits are the limits decided on leases, by name. Every instance of
	// the fleet must lease a limit with the same Partitions and TTL (they
	// describe the group in the Coordinator) and the same Secret. A
	// leased limit is a token_bucket or gcra limit; a request under a
	// leased name with another algorithm is refused (sluice.ErrInvalidLimit).
	Limits []Leased

	// Next decides every limit not named in Limits, unchanged, and
	// Release. Required.
	Next sluice.Limiter

	// Member identifies this instance in every group: 1 to
	// lease.MaxMemberLen bytes of letters, digits and "_-.:/". Default: a
	// random ID, new at each start. Stored in the Coordinator: never a raw
	// identity.
	Member string

	// Secret keys the hash that names a key's group (HMAC-SHA256), so that
	// the Coordinator's keys carry no key and cannot be matched to one
	// without the secret. Default none: SHA-256 of the limit's name and
	// the key. Every instance must use the same secret.
	Secret []byte

	// MaxKeys bounds the Holders (the leased limit and key pairs held at
	// once, over all leased limits). Default 1024. A request for one more
	// key is refused (retry after a renew interval), whatever the limit's
	// failure policy — under fail_open a client keeping MaxKeys keys busy
	// would otherwise make every new key unlimited — and counted
	// (Stats.Overflow); the first one is logged.
	MaxKeys int

	// Now is the clock of the Holders and of the fail_local buckets,
	// read once per leased decision; default: time.Now for the buckets,
	// the runtime's monotonic clock alone for the Holders. It must be
	// monotonic and never stale — no cached reading, such as memstore's
	// coarse clock: a process resumed after a pause must see the time it
	// lost — since the Holders measure their leases' deadlines with it.
	// (time.Now's monotonic reading also makes the Holders' arithmetic
	// on instants cheaper than on wall-clock-only ones.)
	Now func() time.Time

	// Logger receives the Holders' reachability changes (by group, never
	// by key) and the store's warnings; default slog.Default().
	Logger *slog.Logger
}

// Leased is a limit decided on leases and how.
type Leased struct {
	// Name is the Limit.Name decided on leases. Required.
	Name string

	// Partitions is P, how many parts the limit is cut into. Default
	// lease.DefaultPartitions (8). Each part must hold at least one unit of
	// the leased quota and burst (L×(1−OutageShare), B×(1−OutageShare)).
	Partitions int

	// TTL is a lease's length. Default lease.DefaultTTL (2 s); at least
	// lease.MinTTL, whole milliseconds. Leases are renewed every TTL/3.
	TTL time.Duration

	// Policy is what a key decides when its Holder cannot reach the
	// Coordinator and holds nothing usable (and for a key beyond
	// Options.MaxKeys). Default sluice.FailOpen.
	//
	//   - FailOpen allows: the fleet-wide bound no longer holds.
	//   - FailClosed refuses, RetryAfter the renew interval (TTL/3).
	//   - FailLocal spends from a bucket in this process of
	//     OutageShare×L/N per window and burst OutageShare×B/N, N the
	//     member count the Holder last saw: the bound holds as long as N
	//     is right. With no OutageShare, or no member count (a key whose
	//     Holder never reached the Coordinator), it refuses as FailClosed.
	Policy sluice.FailurePolicy

	// OutageShare is the fraction s of the limit kept out of the leases
	// for FailLocal: the partitions hold L×(1−s) with burst B×(1−s), and
	// the instances that lost the Coordinator split s×L among themselves.
	// From 0 (the default: the leases hold the whole limit) to less than 1.
	OutageShare float64

	// Idle is how long a key goes without a request before its Holder is
	// stopped and its partitions given back. Default 30 × TTL (a minute).
	Idle time.Duration
}

// maxFew is the most leased limits found by comparing names.
const maxFew = 8

// Defaults.
const (
	DefaultMaxKeys = 1024
	// DefaultIdleTTLs is Leased.Idle's default, in TTLs.
	DefaultIdleTTLs = 30
)

// Errors.
var (
	// ErrLeased is wrapped, with sluice.ErrInvalidRequest, by the error of
	// an operation a leased limit does not support: Charge, Peek, Reset.
	ErrLeased = errors.New("leasestore: the limit is decided on leases")
	// ErrClosed is returned for a leased limit after Close, or after Run
	// returned.
	ErrClosed = errors.New("leasestore: closed")
)

// Store is the lease-backed sluice.Limiter. It is safe for concurrent use.
// Create it with New, start Run (which stops idle keys), and Close it: the
// Holders' goroutines are the Store's, from a key's first request to Close.
type Store struct {
	o         Options
	holderNow func() time.Time // Options.Now as given: nil lets the Holders read the monotonic clock alone
	next      sluice.Limiter
	leased    map[string]*leasedLimit // immutable after New
	few       []*leasedLimit          // the same, when there are at most maxFew
	keys      keySeeds
	shards    [numShards]shard
	count     atomic.Int64 // entries in the shards
	local     *memstore.Store

	// life guards closed against the Holders started after Close began.
	life    sync.RWMutex
	closed  bool
	ctx     context.Context // the Holders' Run context; cancelled by Close
	cancel  context.CancelFunc
	holders sync.WaitGroup
	running atomic.Bool
	stop    chan struct{} // closed by Close: Run returns
	once    sync.Once

	overflowLogged atomic.Bool
	// statsMu orders a Holder's retirement against Stats.
	statsMu sync.Mutex
}

var (
	_ sluice.Charger   = (*Store)(nil)
	_ sluice.Inspector = (*Store)(nil)
)

// leasedLimit is a Leased with its defaults and counters.
type leasedLimit struct {
	Leased
	hash  [2]uint64 // the name's part of a key's ident
	renew time.Duration

	failOpen, failClosed, failLocal, overflow atomic.Uint64
	stopped                                   atomic.Uint64
	retired                                   retiredStats // counters of the Holders stopped
}

// New checks o and returns a Store. It starts no goroutine: Holders start
// with their key's first request, and Run sweeps the idle ones.
func New(o Options) (*Store, error) {
	switch {
	case o.Coordinator == nil:
		return nil, errors.New("leasestore: Options.Coordinator is required")
	case o.Next == nil:
		return nil, errors.New("leasestore: Options.Next is required: the Limiter of the limits not leased")
	case o.MaxKeys < 0:
		return nil, fmt.Errorf("leasestore: MaxKeys %d: must not be negative (0 means %d)", o.MaxKeys, DefaultMaxKeys)
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Member != "" {
		if err := lease.ValidateMember(o.Member); err != nil {
			return nil, fmt.Errorf("leasestore: %w", err)
		}
	} else {
		o.Member = randomMember()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	holderNow := o.Now // nil: the Holders read the monotonic clock alone, cheaper
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{o: o, holderNow: holderNow, next: o.Next, leased: make(map[string]*leasedLimit, len(o.Limits)), stop: make(chan struct{})}
	s.keys = newKeySeeds()
	for i, l := range o.Limits {
		ll, err := checkLeased(l)
		if err != nil {
			return nil, fmt.Errorf("leasestore: Limits[%d]: %w", i, err)
		}
		if s.leased[ll.Name] != nil {
			return nil, fmt.Errorf("leasestore: Limits[%d]: limit %q is leased twice", i, ll.Name)
		}
		ll.hash = s.keys.limit(ll.Name)
		s.leased[ll.Name] = ll
	}
	if len(s.leased) <= maxFew {
		for _, ll := range s.leased {
			s.few = append(s.few, ll)
		}
	}
	for i := range s.shards {
		s.shards[i].m.Store(newSlots(nil))
	}
	// The fail_local buckets: a few keys per Holder at most (one per
	// member count seen), read on the Holders' clock.
	local, err := memstore.New(memstore.Options{MaxKeys: 4 * o.MaxKeys, Now: o.Now})
	if err != nil {
		return nil, fmt.Errorf("leasestore: the fail_local buckets: %w", err)
	}
	s.local = local
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// checkLeased fills l's defaults and checks it.
func checkLeased(l Leased) (*leasedLimit, error) {
	if err := (sluice.Limit{Name: l.Name, Quota: 1, Window: time.Second}).Validate(); err != nil {
		return nil, err
	}
	if l.Partitions == 0 {
		l.Partitions = lease.DefaultPartitions
	}
	if l.TTL == 0 {
		l.TTL = lease.DefaultTTL
	}
	if err := (lease.Group{Name: "g", Partitions: l.Partitions, TTL: l.TTL}).Validate(); err != nil {
		return nil, fmt.Errorf("limit %q: %w", l.Name, err)
	}
	if !l.Policy.Valid() {
		return nil, fmt.Errorf("limit %q: %w %d", l.Name, sluice.ErrUnknownFailurePolicy, l.Policy)
	}
	if !(l.OutageShare >= 0 && l.OutageShare < 1) {
		return nil, fmt.Errorf("limit %q: outage share %v: want 0 to less than 1 (a fraction of the limit)", l.Name, l.OutageShare)
	}
	if l.Idle < 0 {
		return nil, fmt.Errorf("limit %q: idle %v: must not be negative", l.Name, l.Idle)
	}
	if l.Idle == 0 {
		l.Idle = DefaultIdleTTLs * l.TTL
	}
	return &leasedLimit{Leased: l, renew: l.TTL / 3}, nil
}

// Member returns the instance's member ID in every group (Options.Member,
// or the random one New chose).
func (s *Store) Member() string { return s.o.Member }

// Run stops the Holders of idle keys (their partitions given back) until
// ctx ends or Close is called, then closes the Store: every Holder gives
// its partitions back (within a second) and Run returns nil once their
// goroutines have ended. Run is called at most once; a second call
// returns an error.
func (s *Store) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("leasestore: Run called twice")
	}
	tick := time.Second
	for _, ll := range s.leased {
		tick = min(tick, ll.TTL)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return s.Close()
		case <-s.stop:
			return nil
		case <-t.C:
			s.sweep(tick)
		}
	}
}

// Close stops every Holder — Takes fail, each gives its partitions back
// within a second — and waits for their goroutines; leased limits are then
// refused with ErrClosed. It does not close Next. Close is idempotent and
// returns nil.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.life.Lock()
		s.closed = true
		s.life.Unlock()
		close(s.stop)
		for i := range s.shards {
			for _, e := range s.shards[i].m.Load().entries() {
				e.h.Close()
			}
		}
		s.cancel()
		s.holders.Wait()
		s.local.Close()
	})
	return nil
}

// Allow decides cost on key under limit: on this instance's partitions
// when limit is leased, by Next otherwise. See sluice.Limiter and the
// package documentation for what a leased limit decides differently.
func (s *Store) Allow(ctx context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	ll := s.leasedOf(limit.Name)
	if ll == nil {
		return s.next.Allow(ctx, key, limit, cost)
	}
	e, err := s.resolve(ll, key, limit, cost)
	if err != nil {
		return sluice.Decision{}, err
	}
	return s.decide(ll, e, key, limit, cost)
}

// Charge charges a limit not leased on Next, when Next is a
// sluice.Charger; a leased limit cannot be charged (its partitions carry
// no debt): the error wraps sluice.ErrInvalidRequest and ErrLeased.
func (s *Store) Charge(ctx context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	if s.leasedOf(limit.Name) != nil {
		if err := checkRequest(key, limit, &cost); err != nil {
			return sluice.Decision{}, err
		}
		return sluice.Decision{}, fmt.Errorf("%w: %w: limit %q cannot be charged after the work: its partitions carry no debt", sluice.ErrInvalidRequest, ErrLeased, limit.Name)
	}
	c, ok := s.next.(sluice.Charger)
	if !ok {
		return sluice.Decision{}, fmt.Errorf("%w: leasestore: the Next limiter cannot charge (it is not a sluice.Charger)", sluice.ErrInvalidRequest)
	}
	return c.Charge(ctx, key, limit, cost)
}

// Peek reports a limit not leased as Next does, when Next is a
// sluice.Inspector. A leased limit's state is spread over the fleet's
// partitions: the error wraps sluice.ErrInvalidRequest and ErrLeased.
func (s *Store) Peek(ctx context.Context, key string, limit sluice.Limit) (sluice.State, error) {
	in, err := s.inspector(key, limit)
	if err != nil {
		return sluice.State{}, err
	}
	return in.Peek(ctx, key, limit)
}

// Reset forgets a limit not leased as Next does, when Next is a
// sluice.Inspector; a leased limit is refused as by Peek.
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	in, err := s.inspector(key, limit)
	if err != nil {
		return err
	}
	return in.Reset(ctx, key, limit)
}

func (s *Store) inspector(key string, limit sluice.Limit) (sluice.Inspector, error) {
	if s.leasedOf(limit.Name) != nil {
		if err := checkRequest(key, limit, nil); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w: limit %q: its state is spread over the fleet's partitions and cannot be inspected or reset here", sluice.ErrInvalidRequest, ErrLeased, limit.Name)
	}
	in, ok := s.next.(sluice.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: leasestore: the Next limiter cannot be inspected (it is not a sluice.Inspector)", sluice.ErrInvalidRequest)
	}
	return in, nil
}

// Release gives back a Concurrency limit's slots: Next's (a leased limit
// is a token bucket, which holds no slots).
func (s *Store) Release(ctx context.Context, key string, limit sluice.Limit, ticket uint64) error {
	return s.next.Release(ctx, key, limit, ticket)
}

// leasedOf returns the leased limit of name, nil when it is not leased.
// A few leased limits are found by comparing names (a request's name is
// usually the very string configured, compared by pointer), more by the
// map.
func (s *Store) leasedOf(name string) *leasedLimit {
	if len(s.few) > 0 || len(s.leased) == 0 {
		for _, ll := range s.few {
			if ll.Name == name {
				return ll
			}
		}
		return nil
	}
	return s.leased[name]
}

// resolve checks a leased request and returns its key's entry, nil when
// the key is beyond MaxKeys.
func (s *Store) resolve(ll *leasedLimit, key string, limit sluice.Limit, cost float64) (*entry, error) {
	id := s.keys.ident(ll.hash, key)
	e := s.lookup(id)
	if e == nil || e.limit != limit {
		// A new key, or new parameters: check them all before a Holder.
		params, err := checkLimit(limit)
		if err != nil {
			return nil, err
		}
		if err := sluice.ValidateKey(key); err != nil {
			return nil, err
		}
		if _, err := params.Cost(cost); err != nil {
			return nil, err
		}
		return s.create(ll, id, key, limit, params)
	}
	if err := sluice.ValidateKey(key); err != nil {
		return nil, err
	}
	if _, err := e.params.Cost(cost); err != nil {
		return nil, err
	}
	return e, nil
}

// checkRequest refuses bad input on a leased limit as Allow does: the
// limit, the key and, when given, the cost.
func checkRequest(key string, limit sluice.Limit, cost *float64) error {
	params, err := checkLimit(limit)
	if err != nil {
		return err
	}
	if err := sluice.ValidateKey(key); err != nil {
		return err
	}
	if cost != nil {
		_, err = params.Cost(*cost)
	}
	return err
}

// checkLimit validates a leased request's limit.
func checkLimit(limit sluice.Limit) (*algo.Params, error) {
	params, err := algo.Compile(limit)
	if err != nil {
		return nil, err
	}
	if a := limit.Algorithm; a != sluice.TokenBucket && a != sluice.GCRA {
		return nil, fmt.Errorf("%w: limit %q is leased: a leased limit is a token_bucket or gcra, not %v", sluice.ErrInvalidLimit, limit.Name, a)
	}
	return params, nil
}

// refill is the time an empty partition of limit takes to fill: the
// ResetAfter of every leased decision (an upper bound on the held
// partitions' own).
func refill(limit sluice.Limit) time.Duration {
	d := limit.Capacity() / limit.Quota * float64(limit.Window)
	if d >= math.MaxInt64 {
		return math.MaxInt64 - 1
	}
	return time.Duration(math.Ceil(d/float64(time.Microsecond))) * time.Microsecond
}

// keySeeds hash keys into idents, per process: a leased limit's name and a
// key give a 128-bit ident (no key bytes are kept).
type keySeeds struct{ key, limitSeed [2]maphash.Seed }

func newKeySeeds() keySeeds {
	return keySeeds{
		key:       [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		limitSeed: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
	}
}

func (k *keySeeds) limit(name string) [2]uint64 {
	return [2]uint64{maphash.String(k.limitSeed[0], name), maphash.String(k.limitSeed[1], name)}
}

func (k *keySeeds) ident(limitHash [2]uint64, key string) ident {
	return ident{hi: maphash.String(k.key[0], key) ^ limitHash[0], lo: maphash.String(k.key[1], key) ^ limitHash[1]}
}

type ident struct{ hi, lo uint64 }
