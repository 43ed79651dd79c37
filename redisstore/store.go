// Package redisstore is the sluice.Limiter for a fleet: every process asks
// one Redis (or Redis Cluster), and every decision is one atomic script on
// the server, on the server's clock.
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
// CLUSTERDOWN…), each limit's Policy decides: allow, reject, or decide
// locally at Quota/Instances. A breaker stops calling a dead Redis after a
// few failures, so an outage costs each decision nothing but the policy,
// and lets a probe through every BreakerCooldown: decisions go back to
// Redis as soon as it answers. Dial makes a Client that connects by
// itself, so that a limiter can start before its Redis: until it is
// connected, the policies decide. Each change of state (Redis
// unreachable, back; the breaker opened, closed) is logged once.
package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
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

// Policy is what a limit decides when Redis cannot answer.
type Policy uint8

const (
	// FailOpen allows the request (the default: availability first).
	FailOpen Policy = iota
	// FailClosed rejects it, RetryAfter Options.FailClosedRetryAfter.
	FailClosed
	// FailLocal decides it in this process, at Quota/Instances and
	// Burst/Instances, so that a fleet of Instances keeps roughly the limit.
	FailLocal
)

// String returns "fail_open", "fail_closed" or "fail_local".
func (p Policy) String() string {
	switch p {
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	case FailLocal:
		return "fail_local"
	}
	return "policy(" + strconv.Itoa(int(p)) + ")"
}

// Options configures a Store. Client is required; every other zero field
// means its documented default.
type Options struct {
	// Client talks to Redis: NewRueidis(rueidisClient), or
	// goredis.New(goRedisClient). Required. The store does not close it.
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
	// Policies names it. Default FailOpen.
	Policy Policy
	// Policies sets the policy of limits by name.
	Policies map[string]Policy
	// PolicyOf, when set, is asked for the policy of a limit that Policies
	// does not name, when Redis fails (not before: it may change, as a
	// reloaded configuration does); false means Policy. It must be fast
	// and safe for concurrent use.
	PolicyOf func(sluice.Limit) (Policy, bool)
	// Instances is the number of processes sharing the limits, by which
	// FailLocal divides them. Default 1.
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

	// Logger receives the store's state changes, once per change, never
	// per call: Redis unreachable (a call failed for want of Redis, or a
	// Conn could not connect; Warn, with the error), Redis back (Info),
	// the breaker opened (Warn) and closed (Info). Never a key. Default:
	// discard.
	Logger *slog.Logger

	// TestNow, for tests only, makes decisions use this clock instead of
	// Redis TIME (the conformance suite runs on a fake clock), and keeps
	// keys an hour past their reset so that a clock running ahead of
	// Redis's does not see them expire.
	TestNow func() time.Time
}

// Defaults.
const (
	DefaultPrefix               = "sluice"
	DefaultTimeout              = 50 * time.Millisecond
	DefaultFailClosedRetryAfter = time.Second
	DefaultBreakerFailures      = 3
	DefaultBreakerCooldown      = 200 * time.Millisecond
)

// Stats are counters of a Store's life.
type Stats struct {
	Calls          uint64 // script calls sent to Redis
	NoScript       uint64 // NOSCRIPT replies, answered by sending the script (EVAL)
	Failures       uint64 // calls that failed to get an answer (timeout, transport, unavailable)
	Timeouts       uint64 // of which timeouts
	FailOpen       uint64 // decisions made by the FailOpen policy
	FailClosed     uint64 // decisions made by the FailClosed policy
	FailLocal      uint64 // decisions made by the FailLocal policy
	BreakerOpen    bool   // whether the breaker is open now
	Unreachable    bool   // whether Redis is unreachable now: its last call (or a Conn's connection attempt) failed for want of Redis
	BreakerOpens   uint64 // times the breaker opened
	DenyCacheHits  uint64 // rejections answered locally (DenyCache)
	Compensations  uint64 // spends undone (or found already refilled) after a multi-limit call across hash slots was rejected
	ClockBackwards uint64 // decisions whose Redis clock was behind a key's state (clamped)
	ChargesDropped uint64 // charges Redis could not take, under FailOpen or FailClosed
}

// Store is a Redis-backed sluice.Limiter. It is safe for concurrent use.
type Store struct {
	client   Client
	keys     keyer
	timeout  time.Duration
	policy   Policy
	policies map[string]Policy
	policyOf func(sluice.Limit) (Policy, bool)
	fleet    int
	closedRA time.Duration
	testNow  func() time.Time
	breaker  *breaker
	deny     *denyCache
	local    *memstore.Store // FailLocal's limiter
	log      *slog.Logger
	down     atomic.Bool // Redis unreachable: see markDown
	unwatch  func()      // stops a Conn's reports; nil for another Client

	limitsMu sync.Mutex
	limits   atomic.Pointer[map[sluice.Limit]*compiled]

	calls, noScript, failures, timeouts     atomic.Uint64
	failOpen, failClosed, failLocal         atomic.Uint64
	denyHits, compensations, clockBackwards atomic.Uint64
	chargesDropped                          atomic.Uint64
}

var _ sluice.Charger = (*Store)(nil)

// compiled is a limit ready for the script.
type compiled struct {
	params    *algo.Params
	ints      algo.Integers
	limitPart string    // key prefix of the limit's states
	argv      [9]string // the limit's fixed script parameters
	policy    Policy
	// livePolicy: ask Options.PolicyOf at each failure (Policies does not
	// name the limit).
	livePolicy bool
	local      sluice.Limit // the FailLocal limit
}

// policyFor is c's policy now.
func (s *Store) policyFor(c *compiled) Policy {
	if c.livePolicy {
		if p, ok := s.policyOf(c.params.Limit); ok && p <= FailLocal {
			return p
		}
	}
	return c.policy
}

// New returns a Store.
func New(opts Options) (*Store, error) {
	if opts.Client == nil {
		return nil, errors.New("redisstore: Options.Client is required (redisstore.NewRueidis or goredis.New)")
	}
	prefix := cmp.Or(opts.Prefix, DefaultPrefix)
	if len(prefix) > 64 || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisstore: Prefix %q: at most 64 bytes, without '{' or '}'", prefix)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", opts.Timeout}, {"FailClosedRetryAfter", opts.FailClosedRetryAfter}, {"BreakerCooldown", opts.BreakerCooldown}} {
		if d.v < 0 {
			return nil, fmt.Errorf("redisstore: %s %v: must not be negative (0 means the default)", d.name, d.v)
		}
	}
	if opts.Instances < 0 || opts.BreakerFailures < 0 || opts.DenyCache < 0 {
		return nil, fmt.Errorf("redisstore: Instances %d, BreakerFailures %d, DenyCache %d: must not be negative", opts.Instances, opts.BreakerFailures, opts.DenyCache)
	}
	for name, p := range opts.Policies {
		if p > FailLocal {
			return nil, fmt.Errorf("redisstore: Policies[%q] = %d: unknown policy", name, p)
		}
	}
	if opts.Policy > FailLocal {
		return nil, fmt.Errorf("redisstore: Policy %d: unknown policy", opts.Policy)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		return nil, err
	}
	s := &Store{
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
	if opts.DenyCache > 0 {
		s.deny = newDenyCache(opts.DenyCache)
	}
	empty := map[sluice.Limit]*compiled{}
	s.limits.Store(&empty)
	if w, ok := opts.Client.(interface{ watch(func(error)) func() }); ok {
		s.unwatch = w.watch(s.connReport)
	}
	return s, nil
}

// Close releases the store's in-process resources (the FailLocal limiter)
// and stops hearing a Conn's reports. It does not close the Client.
// Idempotent.
func (s *Store) Close() error {
	if s.unwatch != nil {
		s.unwatch()
	}
	return s.local.Close()
}

// connReport hears a Conn's connection attempt: a failure is Redis
// unreachable, a connection is Redis back.
func (s *Store) connReport(err error) {
	if err != nil {
		s.markDown(err)
	} else {
		s.markUp()
	}
}

// markDown records that Redis could not answer, and logs the change from
// reachable (the state a store starts in) once.
func (s *Store) markDown(err error) {
	if s.down.CompareAndSwap(false, true) {
		s.log.Warn("redis unreachable: the failure policies decide", "err", err)
	}
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
	_, err := s.inspect(ctx, 'p', "ping", pingLimit)
	return err
}

// pingLimit is the limit of Ping's state.
var pingLimit = sluice.Limit{Name: "redisstore.ping", Quota: 1, Window: time.Second}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Calls: s.calls.Load(), NoScript: s.noScript.Load(), Failures: s.failures.Load(), Timeouts: s.timeouts.Load(),
		FailOpen: s.failOpen.Load(), FailClosed: s.failClosed.Load(), FailLocal: s.failLocal.Load(),
		BreakerOpen: s.breaker.isOpen(), BreakerOpens: s.breaker.opens.Load(), Unreachable: s.down.Load(),
		DenyCacheHits: s.denyHits.Load(), Compensations: s.compensations.Load(), ClockBackwards: s.clockBackwards.Load(),
		ChargesDropped: s.chargesDropped.Load(),
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
	if err := s.run(ctx, 'd', sluice.AllOrNothing, []request{r}, res[:]); err != nil {
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
	if err := s.run(ctx, 'c', sluice.AllOrNothing, []request{r}, res[:]); err != nil {
		if !isOutage(err) {
			return sluice.Decision{}, err
		}
		if s.policyFor(r.c) == FailLocal {
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
	if err := s.run(ctx, 'r', sluice.AllOrNothing, []request{r}, res[:]); err != nil {
		return fmt.Errorf("%w (a slot not released frees itself after the limit's window)", err)
	}
	return nil
}

var _ sluice.Inspector = (*Store)(nil)

// Peek reports key's state under limit as Redis holds it, spending
// nothing; see sluice.Inspector. It has no failure policy: when Redis
// cannot answer, the error says so.
func (s *Store) Peek(ctx context.Context, key string, limit sluice.Limit) (sluice.State, error) {
	return s.inspect(ctx, 'p', key, limit)
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
	err := s.run(ctx, 'p', sluice.AllOrNothing, []request{r}, res[:])
	switch {
	case err == nil:
		return sluice.Decision{Allowed: true, Limit: limit, Remaining: units.ToCost(res[0].remaining),
			ResetAfter: time.Duration(res[0].reset) * time.Microsecond}, nil
	case !isOutage(err):
		return sluice.Decision{}, err
	}
	switch s.policyFor(r.c) {
	case FailOpen:
		s.failOpen.Add(1)
		return sluice.Decision{Allowed: true, Limit: limit}, nil
	case FailClosed:
		s.failClosed.Add(1)
		return sluice.Decision{Limit: limit, RetryAfter: s.closedRA}, nil
	}
	s.failLocal.Add(1)
	st, err := s.local.Peek(ctx, key, r.c.local)
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("redisstore: fail_local: %w", err)
	}
	return sluice.Decision{Allowed: true, Limit: limit, Remaining: st.Remaining, ResetAfter: st.ResetAfter}, nil
}

// Reset forgets key's state under limit in Redis: it starts full. See
// sluice.Inspector. (A state FailLocal keeps in process is not touched.)
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	_, err := s.inspect(ctx, 'x', key, limit)
	return err
}

func (s *Store) inspect(ctx context.Context, op byte, key string, limit sluice.Limit) (sluice.State, error) {
	var r request
	if err := s.resolve(&r, key, limit, 1); err != nil {
		return sluice.State{}, err
	}
	var res [1]result
	if err := s.run(ctx, op, sluice.AllOrNothing, []request{r}, res[:]); err != nil {
		return sluice.State{}, err
	}
	if op == 'x' && s.deny != nil {
		s.deny.forget(r.key) // its rejections no longer hold
	}
	return sluice.State{Remaining: units.ToCost(res[0].remaining), ResetAfter: time.Duration(res[0].reset) * time.Microsecond}, nil
}

// decideGroups runs one script per hash slot (one in all when the keys
// share one, or on a single node), and undoes the spends of the others
// when a Cluster call across slots is rejected.
func (s *Store) decideGroups(ctx context.Context, rs []request, mode sluice.Mode, res []result) error {
	groups := s.groups(rs)
	if len(groups) == 1 {
		return s.run(ctx, 'd', mode, rs, res)
	}
	// Across slots: each slot at once, then compensation. Each spend
	// leaves a random stamp in a bucket's state, so that its undo can tell
	// the state it wrote from one written since (by another call, or after
	// the key expired and came back).
	for i := range rs {
		rs[i].stamp = rand.Int64N(1<<52) + 1 // exact in Lua's doubles
	}
	grouped := make([][]request, len(groups))
	results := make([][]result, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g, idx := range groups {
		grouped[g] = make([]request, len(idx))
		for j, i := range idx {
			grouped[g][j] = rs[i]
		}
		results[g] = make([]result, len(idx))
		wg.Go(func() { errs[g] = s.run(ctx, 'd', mode, grouped[g], results[g]) })
	}
	wg.Wait()
	allowed := true
	for g, idx := range groups {
		for j, i := range idx {
			res[i] = results[g][j]
			allowed = allowed && (errs[g] != nil || res[i].allowed())
		}
	}
	rejected := !allowed || errors.Join(errs...) != nil
	if rejected {
		// Undo what the answering slots spent, in AllOrNothing mode all of
		// it, in RejectionsCount mode the concurrency slots only.
		for g, idx := range groups {
			if errs[g] != nil {
				continue
			}
			var undo []request
			var where []int
			for j, i := range idx {
				if r := results[g][j]; r.allowed() && !r.unspent() && (mode == sluice.AllOrNothing || rs[i].c.ints.Algorithm == sluice.Concurrency) {
					u := grouped[g][j]
					u.at = r.at
					undo, where = append(undo, u), append(where, i)
				}
			}
			if len(undo) == 0 {
				continue
			}
			// The undo runs even if the caller has given up meanwhile: a
			// spend left behind is capacity lost until it refills.
			out := make([]result, len(undo))
			if err := s.run(context.WithoutCancel(ctx), 'u', mode, undo, out); err == nil {
				s.compensations.Add(uint64(len(undo)))
				for k, i := range where {
					out[k].flags |= flagAllowed // it would have fit
					res[i] = out[k]
				}
			}
		}
	}
	return errors.Join(errs...)
}

// groups splits request indexes by hash slot, keeping their order; one
// group off a Cluster.
func (s *Store) groups(rs []request) [][]int {
	all := make([]int, len(rs))
	for i := range rs {
		all[i] = i
	}
	if !s.client.Cluster() {
		return [][]int{all}
	}
	var groups [][]int
	var slots []uint16
	for i, r := range rs {
		g := 0
		for g < len(slots) && slots[g] != r.slot {
			g++
		}
		if g == len(slots) {
			slots, groups = append(slots, r.slot), append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
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

// scaleDown is limit divided among n processes, for FailLocal. A bucket
// (TokenBucket, GCRA, LeakyBucket) keeps its quota over n windows, which
// divides its rate exactly, and divides its burst; the other algorithms
// divide their quota. Divided amounts are rounded down, to the limit's
// resolution if the result is a valid limit, else to thousandths, else to
// units, and are at least that step (whole units for SlidingLog and
// Concurrency). A limit that cannot be divided into a valid one is kept
// whole: each process then allows the whole limit while Redis is away.
func scaleDown(l sluice.Limit, n int) sluice.Limit {
	if n <= 1 {
		return l
	}
	for _, perUnit := range []float64{1e6, 1e3, 1} {
		if l.WholeUnits() && perUnit > 1 {
			continue
		}
		div := func(v float64) float64 {
			return max(1/perUnit, math.Floor(v/float64(n)*perUnit*(1+1e-12))/perUnit)
		}
		scaled := l
		if l.HasBurst() && l.Window <= sluice.MaxWindow/time.Duration(n) {
			scaled.Window = l.Window * time.Duration(n)
			scaled.Burst = div(l.Capacity())
		} else {
			scaled.Quota = div(l.Quota)
			if l.Burst != 0 {
				scaled.Burst = div(l.Burst)
			}
		}
		if l.DelayThreshold != 0 {
			scaled.DelayThreshold = min(div(l.DelayThreshold), scaled.Capacity())
		}
		if scaled.Validate() == nil {
			return scaled
		}
	}
	return l
}

// result is one key's part of a script reply.
type result struct {
	flags     int64
	remaining int64 // atoms
	wait      int64 // µs, -1 never
	reset     int64 // µs
	at        int64 // µs: the instant decided
}

const (
	flagAllowed = 1
	flagClamped = 2
	flagUnspent = 4 // the state as it is: nothing was spent (a rejected call's part that fit, an undo)
)

func (r result) allowed() bool { return r.flags&flagAllowed != 0 }
func (r result) unspent() bool { return r.flags&flagUnspent != 0 }

// run makes one script call for rs (which must share a hash slot on a
// Cluster) and parses its reply into res. It applies the timeout and the
// breaker; an error is an outage (see isOutage) or a reply that makes no
// sense.
func (s *Store) run(ctx context.Context, op byte, mode sluice.Mode, rs []request, res []result) error {
	ok, probe := s.breaker.allow()
	if !ok {
		return errBreakerOpen
	}
	keys := make([]string, len(rs))
	args := make([]string, 4, 4+scriptParams*len(rs))
	args[0] = scriptProtocolArg
	if s.testNow != nil {
		args[1] = strconv.FormatInt(s.testNow().UnixMicro(), 10)
	}
	args[2] = string(op)
	if op == 'r' {
		args[2] = "u" // the script releases a ticket by undoing its grant
	}
	args[3] = "0"
	if mode == sluice.RejectionsCount {
		args[3] = "1"
	}
	for i, r := range rs {
		keys[i] = r.key
		args = append(args, r.c.argv[:]...)
		args = append(args, costArg(r.cost), uintArg(r.ticket), intArg(r.at), intArg(r.stamp))
	}
	parent, budget := ctx, s.timeout // budget: the time Redis is given
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.timeout {
		budget = time.Until(d)
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	sc := scriptFor(rs)
	s.calls.Add(1)
	reply, err := s.client.EvalSHA(ctx, sc.sha, keys, args)
	if re := (*ReplyError)(nil); errors.As(err, &re) && re.NoScript() {
		s.noScript.Add(1)
		reply, err = s.client.Eval(ctx, sc.src, keys, args)
	}
	if err != nil {
		if callerDone(parent) {
			// The caller's context ended first: its error, no policy. A
			// cancel says nothing about Redis; a deadline that gave Redis at
			// least half of Timeout is Redis's failure too, for the breaker
			// (else callers that pass short deadlines would never open it).
			if !errors.Is(parent.Err(), context.Canceled) && budget >= s.timeout/2 {
				s.failures.Add(1)
				s.timeouts.Add(1)
				s.breaker.failure(probe)
			} else {
				s.breaker.release(probe)
			}
			return fmt.Errorf("%w: %w", errCallerDone, cmp.Or(parent.Err(), context.DeadlineExceeded))
		}
		if isOutage(err) {
			s.failures.Add(1)
			if errors.Is(err, context.DeadlineExceeded) {
				s.timeouts.Add(1)
			}
			s.markDown(err)
			s.breaker.failure(probe)
		} else {
			s.markUp()
			s.breaker.success(probe) // Redis answered
		}
		return fmt.Errorf("redisstore: %w", err)
	}
	s.markUp()
	s.breaker.success(probe)
	return parseReply(op, reply, rs, res)
}

// costArg and the others format script arguments, sparing the allocation
// of the usual values (a cost of one unit, no ticket, no instant).
func costArg(atoms int64) string {
	if atoms == units.PerCost {
		return "1000000"
	}
	return strconv.FormatInt(atoms, 10)
}

func uintArg(v uint64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatUint(v, 10)
}

func intArg(v int64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatInt(v, 10)
}

// parseReply checks a script reply to op against the protocol and the
// limits asked about, and fills res.
func parseReply(op byte, reply []int64, rs []request, res []result) error {
	bad := func(why string) error { return fmt.Errorf("%w: %s (reply %v)", ErrBadReply, why, truncated(reply)) }
	if len(reply) != 2+replyValues*len(rs) {
		return bad(fmt.Sprintf("%d values for %d keys", len(reply), len(rs)))
	}
	if reply[0] != scriptProtocol {
		return bad(fmt.Sprintf("script protocol %d, want %d: an old or foreign script answered", reply[0], scriptProtocol))
	}
	for i, r := range rs {
		v := reply[2+replyValues*i : 2+replyValues*(i+1)]
		x := result{flags: v[0], remaining: v[1], wait: v[2], reset: v[3], at: v[4]}
		decided := op == 'd' || op == 'c'
		if x.flags < 0 || x.flags > 7 || x.remaining < 0 || x.remaining > r.c.ints.Cap || x.wait < -1 || x.reset < 0 ||
			(x.allowed() && (x.wait == -1 || !decided)) ||
			(decided && !x.allowed() && (x.unspent() || x.wait == 0 || (x.wait == -1) != (r.cost > r.c.ints.Cap))) ||
			(!decided && (x.wait != 0 || !x.unspent())) || (op == 'c' && (!x.allowed() || x.unspent())) {
			return bad(fmt.Sprintf("key %d: flags %d, remaining %d, wait %d, reset %d", i, x.flags, x.remaining, x.wait, x.reset))
		}
		res[i] = x
	}
	if op == 'd' {
		// A part is left unspent only when another part rejects the call.
		rejected, unspent := false, false
		for _, x := range res[:len(rs)] {
			rejected = rejected || !x.allowed()
			unspent = unspent || x.unspent()
		}
		if unspent && !rejected {
			return bad("a part left unspent in a call allowed whole")
		}
	}
	return nil
}

func truncated(v []int64) []int64 {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

// decision turns a result into the sluice.Decision about r's limit.
func (s *Store) decision(r *request, x result) (sluice.Decision, error) {
	if x.flags&flagClamped != 0 {
		s.clockBackwards.Add(1)
	}
	d := sluice.Decision{
		Allowed:    x.allowed(),
		Limit:      r.c.params.Limit,
		Remaining:  units.ToCost(x.remaining),
		ResetAfter: time.Duration(x.reset) * time.Microsecond,
	}
	switch {
	case d.Allowed:
		d.Delay = time.Duration(x.wait) * time.Microsecond
		if r.c.ints.Algorithm == sluice.Concurrency && !x.unspent() {
			d.Ticket = r.ticket
		}
	case x.wait == -1:
		d.RetryAfter = sluice.Never
		return d, r.c.params.NeverError(r.cost)
	default:
		d.RetryAfter = time.Duration(x.wait) * time.Microsecond
	}
	return d, nil
}

// callerDone reports whether ctx has ended, or its deadline has passed (a
// client may time a call out on its own timer, a moment before ctx's
// fires).
func callerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// errCallerDone: the caller's context ended before Redis answered. The
// error goes back to the caller; no policy applies.
var errCallerDone = errors.New("redisstore: the call's context ended before Redis answered")

// errBreakerOpen: the breaker is open; no call was made.
var errBreakerOpen = errors.New("redisstore: breaker open after repeated failures")

// isOutage reports an error that means Redis could not answer (as opposed
// to answering something wrong): the failure policy applies.
func isOutage(err error) bool {
	if errors.Is(err, errCallerDone) {
		return false
	}
	if errors.Is(err, errBreakerOpen) {
		return true
	}
	var re *ReplyError
	if errors.As(err, &re) {
		return re.Unavailable()
	}
	return !errors.Is(err, ErrBadReply)
}

// fallback decides reqs by their policies, Redis being unreachable. A
// cost that can never fit is refused as it would be by Redis, whatever the
// policy. FailLocal parts are decided by the in-process limiter, at the
// limit divided among Instances; one too large for that share is rejected
// as by FailClosed. When a part rejects the call (FailClosed, a cost that
// never fits) the local parts are decided as part of a rejected call: in
// AllOrNothing mode nothing is spent on them.
func (s *Store) fallback(ctx context.Context, rs []request, reqs []sluice.Request, mode sluice.Mode) ([]sluice.Decision, error) {
	ds := make([]sluice.Decision, len(rs))
	var local []sluice.Request
	var where []int
	var errs []error
	rejected := false
	for i, r := range rs {
		limit := r.c.params.Limit
		closed := sluice.Decision{Limit: limit, RetryAfter: s.closedRA}
		policy := s.policyFor(r.c)
		switch {
		case r.cost > r.c.ints.Cap:
			ds[i], rejected = sluice.Decision{Limit: limit, RetryAfter: sluice.Never}, true
			err := r.c.params.NeverError(r.cost)
			if len(rs) > 1 {
				err = fmt.Errorf("request %d: %w", i, err)
			}
			errs = append(errs, err)
		case policy == FailOpen:
			s.failOpen.Add(1)
			ds[i] = sluice.Decision{Allowed: true, Limit: limit}
		case policy == FailClosed:
			s.failClosed.Add(1)
			ds[i], rejected = closed, true
		case reqs[i].Cost > r.c.local.Capacity():
			s.failLocal.Add(1) // too large for this process's share
			ds[i], rejected = closed, true
		default:
			s.failLocal.Add(1)
			q := reqs[i]
			q.Limit = r.c.local
			local, where = append(local, q), append(where, i)
		}
	}
	if len(local) > 0 {
		if rejected {
			// Decide the local parts within a call that is rejected.
			local = append(local, rejectAll)
		}
		out := make([]sluice.Decision, len(local))
		_, err := s.local.AllowAll(ctx, local, mode, out)
		if err != nil && !rejected {
			errs = append(errs, err)
		}
		for k, i := range where {
			ds[i] = out[k]
			ds[i].Limit = rs[i].c.params.Limit
		}
	}
	return ds, errors.Join(errs...)
}

// rejectAll is a request that never fits, added to the local parts of a
// call another part rejects.
var rejectAll = sluice.Request{
	Key:   "rejected",
	Limit: sluice.Limit{Name: "redisstore.rejected", Quota: 1, Window: time.Second},
	Cost:  2,
}
