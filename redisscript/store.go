// Package redisscript is the Redis store's core, on any Redis client: the
// sluice.Limiter for a fleet, where every process asks one Redis (or Redis
// Cluster) and every decision is one atomic script on the server, on the
// server's clock. It imports no Redis client: a driver implements Client
// (package redisstore on rueidis, the default, with redisstore.Dial;
// package redisstore/goredis on a go-redis v9 client), so a program
// compiles only the client it uses.
//
// A decision is one EVALSHA of one embedded script (EVAL only after an
// explicit NOSCRIPT, never to replay a call whose outcome is unknown, which
// could spend twice). The script reads Redis TIME, runs the same integer
// algorithms as internal/algo (transcribed in Lua, exact because every
// value stays below 2^53), and writes each state with the expiry of its
// reset: no key is ever left without a TTL. Several limits of one call are
// decided by one script when their keys share a hash slot (always on a
// single node; on a Cluster, the states of one key under several limits
// do); otherwise see Store.AllowAll for the weaker semantics.
//
// When Redis cannot answer (timeout, refused connection, LOADING,
// CLUSTERDOWN…), each limit's sluice.FailurePolicy decides: allow, reject,
// or decide locally at Quota/Instances. A breaker stops calling a dead
// Redis after a few failures, so an outage costs each decision nothing but
// the policy, and lets a probe through every BreakerCooldown: decisions go
// back to Redis as soon as it answers. A Client that connects by itself
// (a ConnectionWatcher, such as redisstore.Dial's) lets a limiter start
// before its Redis: until it is connected, the policies decide. Each
// change of state (Redis unreachable, back; the breaker opened, closed) is
// logged once.
package redisscript

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/units"
	"github.com/sluicehq/sluice/memstore"
)

// Options configures a Store. Client is required; every other zero field
// means its documented default.
type Options struct {
	// Client talks to Redis: a redisstore.Conn (redisstore.Dial),
	// redisstore.NewRueidis(rueidisClient), goredis.New(goRedisClient), or
	// any other driver. Required. The store does not close it.
	Client Client

	// Prefix starts every key. Default "sluice". At most 64 bytes, no '{'
	// or '}'.
	Prefix string

	// KeyHMAC, when set, is the secret with which keys are hashed
	// (HMAC-SHA256, 128 bits kept) before they reach Redis: no raw identity
	// is stored there. Changing it starts every key fresh.
	KeyHMAC []byte

	// Timeout bounds each call to Redis. Default 50 ms. A call that times
	// out is a failure of Redis: the policy decides, and the breaker counts
	// it. A caller's context that ends first (cancelled, or a deadline
	// sooner than Timeout) is the caller's: Allow returns its error and no
	// policy applies; the breaker counts it only if it was a deadline that
	// left Redis at least Timeout/2.
	Timeout time.Duration

	// Policy is what a limit decides when Redis cannot answer, unless
	// Policies names it. Default sluice.FailOpen. sluice.FailClosed
	// rejects, RetryAfter FailClosedRetryAfter; sluice.FailLocal decides
	// in this process, at the limit divided among Instances (see
	// Instances). A value that is not one of the three is refused by New.
	Policy sluice.FailurePolicy
	// Policies sets the policy of limits by name.
	Policies map[string]sluice.FailurePolicy
	// PolicyOf, when set, is asked for the policy of a limit that Policies
	// does not name, when Redis fails (not before: it may change, as a
	// reloaded configuration does); false, or a policy that is not valid,
	// means Policy. It must be fast and safe for concurrent use.
	PolicyOf func(sluice.Limit) (sluice.FailurePolicy, bool)
	// Instances is the number of processes sharing the limits, by which
	// FailLocal divides them: a bucket's rate and burst, a window's
	// quota, rounded down (to a millionth, a thousandth or a unit, the
	// finest that makes a valid limit); a limit that cannot be divided
	// stays whole. Default 1.
	Instances int
	// FailClosedRetryAfter is the RetryAfter of a FailClosed rejection.
	// Default 1 s.
	FailClosedRetryAfter time.Duration

	// BreakerFailures is how many consecutive failed calls open the
	// breaker. Default 3.
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before it lets a
	// probe through. Default 200 ms.
	BreakerCooldown time.Duration

	// DenyCache, when positive, is the number of rejected keys remembered
	// in process: a key Redis rejected a cost on until T is rejected
	// locally until T, for that cost or more, without a round trip. Only
	// single-limit calls (Allow) on limits other than Concurrency use it.
	// Off by default: it trades exact remaining counts (and a RetryAfter
	// that, for a larger cost, may be short) for fewer calls.
	DenyCache int

	// Coalesce configures how concurrent decisions (Allow, AllowAll) share
	// script calls; see CoalesceOptions. On by default: a decision alone
	// goes at once, as it would without it.
	Coalesce CoalesceOptions
	// Logger receives the store's state changes, once per change, never
	// per call: Redis unreachable (a call failed for want of Redis, or a
	// ConnectionWatcher could not connect; Warn, with the error), Redis
	// back (Info),
	// the breaker opened (Warn) and closed (Info). Never a key. Default:
	// discard.
	Logger *slog.Logger

	// TestNow, for tests only, makes decisions use this clock instead of
	// Redis TIME (the conformance suite runs on a fake clock), and keeps
	// keys an hour past their reset so that a clock running ahead of
	// Redis's does not see them expire.
	TestNow func() time.Time
}

// The defaults of Options' zero fields.
const (
	DefaultPrefix               = "sluice"
	DefaultTimeout              = 50 * time.Millisecond
	DefaultFailClosedRetryAfter = time.Second
	DefaultBreakerFailures      = 3
	DefaultBreakerCooldown      = 200 * time.Millisecond
)

// Stats are counters of a Store's life. The fallback counters are named
// for the sluice.FailurePolicy that decided.
type Stats struct {
	Calls          uint64 // script calls sent to Redis
	NoScript       uint64 // NOSCRIPT replies, answered by sending the script (EVAL)
	Failures       uint64 // calls that failed to get an answer (timeout, transport, unavailable)
	Timeouts       uint64 // of which timeouts
	FailOpen       uint64 // decisions made by the FailOpen policy
	FailClosed     uint64 // decisions made by the FailClosed policy
	FailLocal      uint64 // decisions made by the FailLocal policy
	BreakerOpen    bool   // whether the breaker is open now
	Unreachable    bool   // whether Redis is unreachable now: its last call (or a ConnectionWatcher's connection attempt) failed for want of Redis
	BreakerOpens   uint64 // times the breaker opened
	DenyCacheHits  uint64 // rejections answered locally (DenyCache)
	Compensations  uint64 // spends undone (or found already refilled) after a multi-limit call across hash slots was rejected
	ClockBackwards uint64 // decisions whose Redis clock was behind a key's state (clamped)
	ChargesDropped uint64 // charges Redis could not take, under FailOpen or FailClosed
	Batches        uint64 // script calls of coalesced decisions (counted in Calls too)
	Batched        uint64 // decisions sent in them
}

// Store is a Redis-backed sluice.Limiter, sluice.Charger and
// sluice.Inspector. It is safe for concurrent use. Decisions are made in
// Redis, on Redis's clock; FailLocal's are made in process, on the local
// clock.
type Store struct {
	client   Client
	keys     keyer
	timeout  time.Duration
	policy   sluice.FailurePolicy
	policies map[string]sluice.FailurePolicy
	policyOf func(sluice.Limit) (sluice.FailurePolicy, bool)
	fleet    int
	closedRA time.Duration
	testNow  func() time.Time
	breaker  *breaker
	deny     *denyCache
	local    *memstore.Store // FailLocal's limiter
	log      *slog.Logger
	down     atomic.Bool // Redis unreachable: see markDown
	refused  atomic.Bool // while down: the last failure was Redis refusing this client
	unwatch  func()      // stops a ConnectionWatcher's reports; nil for another Client

	limitsMu sync.Mutex
	limits   atomic.Pointer[map[sluice.Limit]*compiled]

	calls, noScript, failures, timeouts     atomic.Uint64
	failOpen, failClosed, failLocal         atomic.Uint64
	denyHits, compensations, clockBackwards atomic.Uint64
	chargesDropped                          atomic.Uint64
	batches, batched                        atomic.Uint64
	coalesce                                CoalesceOptions
	batchAlways                             bool // tests: every decision goes through the batch script
	batchers                                batchers
}

var _ sluice.Charger = (*Store)(nil)

// compiled is a limit ready for the script.
type compiled struct {
	params    *algo.Params
	ints      algo.Integers
	limitPart string    // key prefix of the limit's states
	argv      [9]string // the limit's fixed script parameters
	policy    sluice.FailurePolicy
	// livePolicy: ask Options.PolicyOf at each failure (Policies does not
	// name the limit).
	livePolicy bool
	local      sluice.Limit // the FailLocal limit
}

// New returns a Store on opts.Client. It makes no call to Redis: the
// first decision loads the script (EVALSHA, then EVAL on NOSCRIPT). It
// fails only on bad options, with an error that names the field.
func New(opts Options) (*Store, error) {
	if opts.Client == nil {
		return nil, errors.New("redisscript: Options.Client is required (redisstore.Dial, redisstore.NewRueidis or goredis.New)")
	}
	prefix := cmp.Or(opts.Prefix, DefaultPrefix)
	if len(prefix) > 64 || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisscript: Prefix %q: at most 64 bytes, without '{' or '}'", prefix)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", opts.Timeout}, {"FailClosedRetryAfter", opts.FailClosedRetryAfter}, {"BreakerCooldown", opts.BreakerCooldown}} {
		if d.v < 0 {
			return nil, fmt.Errorf("redisscript: %s %v: must not be negative (0 means the default)", d.name, d.v)
		}
	}
	if opts.Instances < 0 || opts.BreakerFailures < 0 || opts.DenyCache < 0 {
		return nil, fmt.Errorf("redisscript: Instances %d, BreakerFailures %d, DenyCache %d: must not be negative", opts.Instances, opts.BreakerFailures, opts.DenyCache)
	}
	for name, p := range opts.Policies {
		if !p.Valid() {
			return nil, fmt.Errorf("redisscript: Policies[%q]: %w %d", name, sluice.ErrUnknownFailurePolicy, uint8(p))
		}
	}
	if !opts.Policy.Valid() {
		return nil, fmt.Errorf("redisscript: Policy: %w %d", sluice.ErrUnknownFailurePolicy, uint8(opts.Policy))
	}
	coalesce, err := opts.Coalesce.withDefaults()
	if err != nil {
		return nil, err
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		return nil, err
	}
	s := &Store{
		coalesce: coalesce,
		client:   opts.Client,
		keys:     newKeyer(prefix, opts.KeyHMAC),
		timeout:  cmp.Or(opts.Timeout, DefaultTimeout),
		policy:   opts.Policy,
		policies: maps.Clone(opts.Policies),
		policyOf: opts.PolicyOf,
		fleet:    cmp.Or(opts.Instances, 1),
		closedRA: cmp.Or(opts.FailClosedRetryAfter, DefaultFailClosedRetryAfter),
		testNow:  opts.TestNow,
		breaker: &breaker{
			threshold: int64(cmp.Or(opts.BreakerFailures, DefaultBreakerFailures)),
			cooldown:  cmp.Or(opts.BreakerCooldown, DefaultBreakerCooldown),
			now:       time.Now,
		},
		local: local,
		log:   opts.Logger,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.breaker.onChange = s.breakerChanged
	s.batchers.one.s = s
	if opts.DenyCache > 0 {
		s.deny = newDenyCache(opts.DenyCache)
	}
	empty := map[sluice.Limit]*compiled{}
	s.limits.Store(&empty)
	if w, ok := opts.Client.(ConnectionWatcher); ok {
		s.unwatch = w.WatchConnection(s.connReport)
	}
	return s, nil
}

// Close releases the store's in-process resources (the FailLocal limiter)
// and stops hearing a ConnectionWatcher's reports. It does not close the
// Client.
// Idempotent.
func (s *Store) Close() error {
	if s.unwatch != nil {
		s.unwatch()
	}
	return s.local.Close()
}

// connReport hears a ConnectionWatcher's connection attempt: a failure is Redis
// unreachable, a connection is Redis back.
func (s *Store) connReport(err error) {
	if err != nil {
		s.markDown(err)
	} else {
		s.markUp()
	}
}

// markDown records that Redis could not answer, and logs the change from
// reachable (the state a store starts in) once — and once more when the
// reason changes kind while Redis is down: a Redis that comes back
// refusing this client's credentials or rights (its password rotated
// first) is logged as that, not left behind the connection error before it.
func (s *Store) markDown(err error) {
	refused := refusesClient(err)
	if s.down.CompareAndSwap(false, true) {
		s.refused.Store(refused)
		s.logDown(refused, err)
		return
	}
	if s.refused.Swap(refused) != refused {
		s.logDown(refused, err)
	}
}

func (s *Store) logDown(refused bool, err error) {
	if refused {
		s.log.Warn("redis refuses this client (its credentials or its rights): the failure policies decide", "err", err)
		return
	}
	s.log.Warn("redis unreachable: the failure policies decide", "err", err)
}

// refusesClient reports a reply by which Redis refuses this client:
// WRONGPASS, NOAUTH, NOPERM.
func refusesClient(err error) bool {
	var re *ReplyError
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(re.Msg, p) {
			return true
		}
	}
	return false
}

// markUp records that Redis answered, and logs the change from
// unreachable once.
func (s *Store) markUp() {
	if s.down.Load() && s.down.CompareAndSwap(true, false) {
		s.log.Info("redis back: decisions are Redis's again")
	}
}

// breakerChanged logs the breaker's opening and closing.
func (s *Store) breakerChanged(open bool) {
	if open {
		s.log.Warn("redis breaker opened: Redis is not called until a probe answers", "failures", s.breaker.threshold, "cooldown", s.breaker.cooldown.String())
	} else {
		s.log.Info("redis breaker closed")
	}
}

// Ping asks Redis for one state (a script call that reads and writes
// nothing) and returns nil when it answered, the error otherwise (an open
// breaker's included, without a call). It goes through the breaker and
// the state like any call: a Ping that answers after an outage closes the
// breaker and logs Redis back. For readiness checks.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.inspect(ctx, opPeek, "ping", pingLimit)
	return err
}

// pingLimit is the limit of Ping's state (its name, kept from before the
// core left redisstore, is part of a Redis key).
var pingLimit = sluice.Limit{Name: "redisstore.ping", Quota: 1, Window: time.Second}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Calls: s.calls.Load(), NoScript: s.noScript.Load(), Failures: s.failures.Load(), Timeouts: s.timeouts.Load(),
		FailOpen: s.failOpen.Load(), FailClosed: s.failClosed.Load(), FailLocal: s.failLocal.Load(),
		BreakerOpen: s.breaker.isOpen(), BreakerOpens: s.breaker.opens.Load(), Unreachable: s.down.Load(),
		DenyCacheHits: s.denyHits.Load(), Compensations: s.compensations.Load(), ClockBackwards: s.clockBackwards.Load(),
		ChargesDropped: s.chargesDropped.Load(), Batches: s.batches.Load(), Batched: s.batched.Load(),
	}
}

// request is one limit of a call, ready for the script.
type request struct {
	c      *compiled
	key    string // the Redis key
	slot   uint16
	cost   int64 // atoms
	ticket uint64
	at     int64 // for undo: the instant the spend was decided (µs)
	stamp  int64 // a call that may be undone: the mark its spend leaves in a bucket's state
}

// Allow decides whether cost may be spent on key under limit now; see
// sluice.Limiter. Bad input is refused before any call to Redis. When
// Redis cannot answer, the limit's Policy decides (and the error is nil).
// A reply Redis should never send is an error naming it, never an allow.
func (s *Store) Allow(ctx context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	var r request
	if err := s.resolve(&r, key, limit, cost); err != nil {
		return sluice.Decision{}, err
	}
	cacheable := s.deny != nil && limit.Algorithm != sluice.Concurrency
	if cacheable {
		if d, ok := s.deny.get(r.key, r.cost, s.localNow()); ok {
			s.denyHits.Add(1)
			return d, nil
		}
	}
	var res [1]result
	if err := s.decideCall(ctx, sluice.AllOrNothing, []request{r}, res[:]); err != nil {
		if !isOutage(err) {
			return sluice.Decision{}, err
		}
		ds, err := s.fallback(ctx, []request{r}, []sluice.Request{{Key: key, Limit: limit, Cost: cost}}, sluice.AllOrNothing)
		return ds[0], err
	}
	d, err := s.decision(&r, res[0])
	if cacheable && !d.Allowed && err == nil {
		s.deny.put(r.key, r.cost, d, s.localNow())
	}
	return d, err
}

// localNow is the clock of what the store does in process (the deny
// cache): TestNow when set.
func (s *Store) localNow() time.Time {
	if s.testNow != nil {
		return s.testNow()
	}
	return time.Now()
}

// AllowAll decides several limits as one; see sluice.Limiter. When all the
// keys share a hash slot (always on a single Redis; on a Cluster, a key's
// states under several limits do) it is one atomic script. Across hash
// slots of a Cluster the guarantee is weaker: each slot's limits are
// decided atomically, all slots at once; if any rejects, the spends of
// the others are undone by a second call (in RejectionsCount mode, only
// Concurrency slots are). In between, a concurrent caller can see those
// spends, so it may be rejected where it would not have been: the weaker
// semantics under-admit, they never over-admit. A spend whose undo fails
// stays spent.
func (s *Store) AllowAll(ctx context.Context, reqs []sluice.Request, mode sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	if err := sluice.ValidateRequests(reqs, mode, each); err != nil {
		return sluice.Decision{}, err
	}
	rs := make([]request, len(reqs))
	for i, q := range reqs {
		if err := s.resolve(&rs[i], q.Key, q.Limit, q.Cost); err != nil {
			return sluice.Decision{}, fmt.Errorf("request %d: %w", i, err)
		}
		for j := range i {
			if rs[j].key == rs[i].key {
				return sluice.Decision{}, fmt.Errorf("%w: requests %d and %d have the same limit name %q and key", sluice.ErrInvalidRequest, j, i, q.Limit.Name)
			}
		}
	}
	res := make([]result, len(rs))
	if err := s.decideGroups(ctx, rs, mode, res); err != nil {
		if !isOutage(err) {
			return sluice.Decision{}, err
		}
		ds, err := s.fallback(ctx, rs, reqs, mode)
		copy(each, ds)
		return sluice.Combine(ds), err
	}
	ds := make([]sluice.Decision, len(rs))
	var errs []error
	for i := range rs {
		var err error
		if ds[i], err = s.decision(&rs[i], res[i]); err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", i, err))
		}
	}
	copy(each, ds)
	return sluice.Combine(ds), errors.Join(errs...)
}

// Charge spends cost on key under limit whatever the limit holds, running
// the key into debt; see sluice.Charger. One round trip, like Allow. When
// Redis cannot answer, a FailLocal limit is charged locally; under the
// other policies the charge is dropped (the work is done: there is nothing
// to refuse) and counted in Stats.ChargesDropped.
func (s *Store) Charge(ctx context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	var r request
	if err := s.resolve(&r, key, limit, cost); err != nil {
		return sluice.Decision{}, err
	}
	if err := r.c.params.Chargeable(); err != nil {
		return sluice.Decision{}, err
	}
	var res [1]result
	if err := s.run(ctx, opCharge, sluice.AllOrNothing, []request{r}, res[:]); err != nil {
		if !isOutage(err) {
			return sluice.Decision{}, err
		}
		if s.policyFor(r.c) == sluice.FailLocal {
			if d, err := s.local.Charge(ctx, key, r.c.local, cost); err == nil {
				s.failLocal.Add(1)
				d.Limit = limit
				return d, nil
			}
		}
		s.chargesDropped.Add(1)
		return sluice.Decision{Allowed: true, Limit: limit}, nil
	}
	return s.decision(&r, res[0])
}

// Release frees the slots a Concurrency decision holds; see sluice.Limiter.
func (s *Store) Release(ctx context.Context, key string, limit sluice.Limit, ticket uint64) error {
	if err := sluice.ValidateRelease(limit); err != nil {
		return err
	}
	var r request
	if err := s.resolve(&r, key, limit, 1); err != nil {
		return err
	}
	r.ticket = ticket
	var res [1]result
	_ = s.local.Release(ctx, key, r.c.local, ticket) // in case FailLocal granted it
	// A release is an undo of the ticket's grant.
	if err := s.run(ctx, opUndo, sluice.AllOrNothing, []request{r}, res[:]); err != nil {
		return fmt.Errorf("%w (a slot not released frees itself after the limit's window)", err)
	}
	return nil
}

var _ sluice.Inspector = (*Store)(nil)

// Peek reports key's state under limit as Redis holds it, spending
// nothing; see sluice.Inspector. It has no failure policy: when Redis
// cannot answer, the error says so.
func (s *Store) Peek(ctx context.Context, key string, limit sluice.Limit) (sluice.State, error) {
	return s.inspect(ctx, opPeek, key, limit)
}

// Check decides a cost of nothing on key under limit: it spends nothing
// and reports the state, as Peek does, as an allowed decision (Remaining,
// ResetAfter). When Redis cannot answer, the limit's Policy decides as it
// does for Allow: FailOpen allows (Remaining 0, as a FailOpen Allow
// reports), FailClosed rejects (RetryAfter Options.FailClosedRetryAfter),
// FailLocal reports the in-process limiter's state of key. Bad input is an
// error, as for Allow; so is a caller's context that ended first. For an
// RLS descriptor with hits_addend 0.
func (s *Store) Check(ctx context.Context, key string, limit sluice.Limit) (sluice.Decision, error) {
	var r request
	if err := s.resolve(&r, key, limit, 1); err != nil {
		return sluice.Decision{}, err
	}
	var res [1]result
	err := s.run(ctx, opPeek, sluice.AllOrNothing, []request{r}, res[:])
	switch {
	case err == nil:
		return sluice.Decision{Allowed: true, Limit: limit, Remaining: units.ToCost(res[0].remaining),
			ResetAfter: time.Duration(res[0].reset) * time.Microsecond}, nil
	case !isOutage(err):
		return sluice.Decision{}, err
	}
	switch s.policyFor(r.c) {
	case sluice.FailOpen:
		s.failOpen.Add(1)
		return sluice.Decision{Allowed: true, Limit: limit}, nil
	case sluice.FailClosed:
		s.failClosed.Add(1)
		return sluice.Decision{Limit: limit, RetryAfter: s.closedRA}, nil
	}
	s.failLocal.Add(1)
	st, err := s.local.Peek(ctx, key, r.c.local)
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("redisscript: fail_local: %w", err)
	}
	return sluice.Decision{Allowed: true, Limit: limit, Remaining: st.Remaining, ResetAfter: st.ResetAfter}, nil
}

// Reset forgets key's state under limit in Redis: it starts full. See
// sluice.Inspector. (A state FailLocal keeps in process is not touched.)
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	_, err := s.inspect(ctx, opReset, key, limit)
	return err
}

// inspect runs o, a peek or a reset, on key's state under limit.
func (s *Store) inspect(ctx context.Context, o op, key string, limit sluice.Limit) (sluice.State, error) {
	var r request
	if err := s.resolve(&r, key, limit, 1); err != nil {
		return sluice.State{}, err
	}
	var res [1]result
	if err := s.run(ctx, o, sluice.AllOrNothing, []request{r}, res[:]); err != nil {
		return sluice.State{}, err
	}
	if o == opReset && s.deny != nil {
		s.deny.forget(r.key) // its rejections no longer hold
	}
	return sluice.State{Remaining: units.ToCost(res[0].remaining), ResetAfter: time.Duration(res[0].reset) * time.Microsecond}, nil
}

// resolve validates one (key, limit, cost) and locates its state.
func (s *Store) resolve(r *request, key string, limit sluice.Limit, cost float64) error {
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
	r.key, r.slot = s.keys.stateKey(c.limitPart, key)
	if limit.Algorithm == sluice.Concurrency {
		r.ticket = rand.Uint64() | 1
	}
	return nil
}

// compile returns the cached compilation of limit.
func (s *Store) compile(limit sluice.Limit) (*compiled, error) {
	if c, ok := (*s.limits.Load())[limit]; ok {
		return c, nil
	}
	p, err := algo.Compile(limit)
	if err != nil {
		return nil, err
	}
	ints := p.Integers()
	c := &compiled{params: p, ints: ints, limitPart: s.keys.limitPart(limit.Name, p.Fingerprint), policy: s.policy}
	pol, named := s.policies[limit.Name]
	if named {
		c.policy = pol
	}
	c.livePolicy = !named && s.policyOf != nil
	for i, v := range []int64{int64(ints.Algorithm), ints.CapU, ints.PerMicro, ints.PerAtom, ints.Cap, ints.Quota, ints.Window, ints.DelayU, ints.Fills} {
		c.argv[i] = strconv.FormatInt(v, 10)
	}
	c.local = scaleDown(limit, s.fleet)
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	old := *s.limits.Load()
	next := make(map[sluice.Limit]*compiled, len(old)+1)
	if len(old) < 4096 {
		for k, v := range old {
			next[k] = v
		}
	}
	next[limit] = c
	s.limits.Store(&next)
	return c, nil
}
