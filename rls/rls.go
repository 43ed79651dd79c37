// Package rls is Envoy's rate limit service (envoy.service.ratelimit.v3,
// ShouldRateLimit) over any sluice.Limiter: a drop-in for
// envoyproxy/ratelimit that reads the same configuration (package
// rls/envoyconfig) and answers with the same fields — per-descriptor
// statuses, overall_code, current_limit, limit_remaining,
// duration_until_reset — plus the IETF RateLimit fields as headers for
// Envoy to add to the response.
//
// A Service decides (ShouldRateLimit); NewGRPCServer serves it over gRPC,
// with bounds on connections and calls and the standard health service,
// and JSONHandler serves the same decisions as JSON over HTTP
// (envoyproxy/ratelimit's /json endpoint): a program that serves them
// (package server) needs no gRPC or go-control-plane import of its own.
//
// Semantics, as envoyproxy/ratelimit's:
//   - each descriptor is matched against the domain's descriptors (nested,
//     value-less keys matching any value, wildcards); no match: OK, nothing
//     counted; an unlimited match: OK, limit_remaining 2^32−1;
//   - a matched limit named in another matched limit's replaces is not
//     applied;
//   - each descriptor spends hits_addend (the descriptor's own, else the
//     request's, else 1) on its own counter, keyed by the domain and the
//     descriptor's entries (so a value-less key counts each value apart);
//     descriptors are independent: one over its limit does not stop the
//     others from spending;
//   - a descriptor in shadow_mode is reported OK even when over its limit
//     (and counted as a shadow rejection);
//   - overall_code is OVER_LIMIT when any descriptor is;
//   - a descriptor whose hits exceed its limit's capacity can never fit:
//     OVER_LIMIT, nothing spent, whatever the store's failure policy —
//     also for hits no store represents (beyond about 4.5e9, say
//     hits_addend 2^32−1 on the same descriptor twice), which are decided
//     without asking the store; hits are never invalid input, so a huge
//     one cannot fail the request (with Envoy's failure_mode_deny false a
//     failed request is let through, every limit skipped);
//   - a limit override (Envoy's per-descriptor limit) without a unit of
//     time — no unit, UNKNOWN, a number that is no unit — is the client's
//     mistake: INVALID_ARGUMENT, naming the descriptor, before anything is
//     spent, as envoyproxy/ratelimit cannot enforce one either (its call
//     fails); read as no limit, it would disable the configured one;
//   - a limiter that fails returns an UNAVAILABLE error (Envoy's
//     failure_mode_deny decides), after the store's own failure policy.
//
// Where sluice differs: a descriptor over its limit does not add its hits
// to the counter (a rejection never spends), so a client that stops asking
// gets its quota back at the window's end and not later; and the window is
// the limit's algorithm (a fixed window aligned to the unit for an envoy
// file; sluice's own files may choose another).
package rls

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/internal/units"
	"github.com/sluicehq/sluice/ratelimitheader"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// Rule is the limit a descriptor matched, as a Matcher reports it.
type Rule struct {
	// Name is the rule's rate_limit name (what replaces refers to, and
	// current_limit.name reports); may be empty.
	Name string
	// RequestsPerUnit and Unit are what current_limit reports.
	RequestsPerUnit uint32
	Unit            rlpb.RateLimitResponse_RateLimit_Unit
	// Unlimited: the descriptor is never limited.
	Unlimited bool
	// ShadowMode: over the limit is reported OK (and counted).
	ShadowMode bool
	// Replaces names the rules this one replaces in a request that
	// matches both.
	Replaces []string
	// Limit is what is enforced (unless Unlimited).
	Limit sluice.Limit
	// KeyEntries, when set, are what the counter is keyed by instead of
	// the request's entries (values a share_threshold wildcard groups).
	KeyEntries []Entry
}

// Entry is one key and value of a descriptor.
type Entry = envoyconfig.Entry

// Matcher finds the rule of a descriptor: a loaded configuration.
type Matcher interface {
	// Match returns the rule for a descriptor of domain, and false when
	// none applies (an unknown domain included).
	Match(domain string, entries []Entry) (*Rule, bool)
	// Override returns the rule for a descriptor that carries its own
	// limit (Envoy's per-route limit override), and false when domain is
	// unknown. The service asks only with a unit of time (it refuses an
	// override without one).
	Override(domain string, entries []Entry, requestsPerUnit uint32, unit rlpb.RateLimitResponse_RateLimit_Unit) (*Rule, bool)
}

// Bounds on a request, so that a client cannot make a decision arbitrarily
// expensive; a request beyond them is INVALID_ARGUMENT.
const (
	DefaultMaxDescriptors = 64
	MaxEntries            = 32   // entries per descriptor
	MaxEntryBytes         = 1024 // a key or a value
	maxDomain             = 256
)

// Options configures a Service.
type Options struct {
	// Limiter decides. Required.
	Limiter sluice.Limiter
	// Config is the configuration in force, read at each call (swap it to
	// reload). Required.
	Config *atomic.Pointer[Matcher]
	// Observer hears each descriptor's decision (rule: the limit's full
	// key). Optional.
	Observer enforce.Observer
	// Headers adds RateLimit-Policy and RateLimit (draft-11) to the
	// response headers Envoy sends the client, about the limited
	// descriptors.
	Headers bool
	// MaxDescriptors per request. Default DefaultMaxDescriptors.
	MaxDescriptors int
}

// Service answers ShouldRateLimit. It is safe for concurrent use.
type Service struct {
	rlpb.UnimplementedRateLimitServiceServer
	limiter sluice.Limiter
	config  *atomic.Pointer[Matcher]
	obs     enforce.Observer
	headers bool
	maxDesc int
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Limiter == nil {
		return nil, errors.New("rls: Options.Limiter is required")
	}
	if opts.Config == nil {
		return nil, errors.New("rls: Options.Config is required")
	}
	s := &Service{limiter: opts.Limiter, config: opts.Config, obs: opts.Observer, headers: opts.Headers, maxDesc: opts.MaxDescriptors}
	if s.maxDesc <= 0 {
		s.maxDesc = DefaultMaxDescriptors
	}
	return s, nil
}

// Register registers the service on a gRPC server, built with
// ServerOption so that a malformed request is INVALID_ARGUMENT (without
// it, grpc-go answers INTERNAL).
func (s *Service) Register(srv *grpc.Server) { srv.RegisterService(&serviceDesc, s) }

// check is one descriptor on its way to a decision.
type check struct {
	rule      *Rule // nil: no limit applies
	limit     sluice.Limit
	key       string
	cost      float64
	slot      int  // its request in the limiter call (descriptors with the same limit and key share one)
	peek      bool // hits_addend 0: report the state, spend nothing
	unlimited bool // its rule is unlimited (rule nil)
}

// ShouldRateLimit decides every descriptor of req; see the package
// documentation. It goes in four steps: validate the request, resolve each
// descriptor's rule, decide the limited ones in one limiter call, and
// build the response.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlpb.RateLimitRequest) (*rlpb.RateLimitResponse, error) {
	if err := s.validate(req); err != nil {
		return nil, err
	}
	cfg, err := s.configuration()
	if err != nil {
		return nil, err
	}
	var checksBuf [8]check
	checks := checksBuf[:0]
	if n := len(req.Descriptors); n > len(checksBuf) {
		checks = make([]check, 0, n)
	}
	checks = checks[:len(req.Descriptors)]
	resolve(cfg, req, checks)
	var single sluice.Decision
	start := time.Now()
	decisions, err := s.decide(ctx, checks, &single)
	latency := time.Since(start)
	if err != nil {
		s.observeFailure(checks, latency, err)
		return nil, err
	}
	return s.respond(ctx, checks, decisions, single, latency)
}

// configuration is the Matcher in force; UNAVAILABLE before any is loaded.
func (s *Service) configuration() (Matcher, error) {
	loaded := s.config.Load()
	if loaded == nil || *loaded == nil {
		return nil, status.Error(codes.Unavailable, "rls: no configuration loaded")
	}
	return *loaded, nil
}

// resolve fills checks[i] for req.Descriptors[i]: no rule, an unlimited
// one, or a limit with its counter's key and the hits it spends; then it
// drops the rules that another matched rule replaces.
func resolve(cfg Matcher, req *rlpb.RateLimitRequest, checks []check) {
	var replaced map[string]bool
	var entryBuf [4]Entry
	for i, d := range req.Descriptors {
		es := entries(d, entryBuf[:0])
		rule, ok := match(cfg, req.Domain, d, es)
		if !ok {
			continue
		}
		for _, r := range rule.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		checks[i] = checkOf(req, d, es, rule)
	}
	for i := range checks {
		if r := checks[i].rule; r != nil && r.Name != "" && replaced[r.Name] {
			checks[i].rule = nil
		}
	}
}

// match is the rule of descriptor d (entries es) of domain: the
// configured one, or its own limit override's.
func match(cfg Matcher, domain string, d *commonrl.RateLimitDescriptor, es []Entry) (*Rule, bool) {
	if o := d.GetLimit(); o != nil {
		return cfg.Override(domain, es, o.GetRequestsPerUnit(), rlpb.RateLimitResponse_RateLimit_Unit(o.GetUnit()))
	}
	return cfg.Match(domain, es)
}

// checkOf is the check of descriptor d (entries es), whose rule is rule.
// It spends the descriptor's own hits_addend, else the request's, else 1;
// a descriptor's own hits_addend 0 is a check that spends nothing (as
// envoyproxy/ratelimit reads it).
func checkOf(req *rlpb.RateLimitRequest, d *commonrl.RateLimitDescriptor, es []Entry, rule *Rule) check {
	if rule.Unlimited {
		return check{unlimited: true}
	}
	hits := max(uint64(req.HitsAddend), 1)
	peek := false
	if h := d.GetHitsAddend(); h != nil {
		hits, peek = h.GetValue(), h.GetValue() == 0
	}
	keyed := es
	if rule.KeyEntries != nil {
		keyed = rule.KeyEntries
	}
	return check{rule: rule, limit: rule.Limit, key: storeKey(req.Domain, keyed), cost: float64(hits), peek: peek}
}

// observeFailure tells the observer of each limited check that the
// limiter failed (not of the request's own end).
func (s *Service) observeFailure(checks []check, latency time.Duration, err error) {
	if s.obs == nil || status.Code(err) != codes.Unavailable {
		return
	}
	for i := range checks {
		if c := &checks[i]; c.rule != nil {
			s.obs.Observe(enforce.Event{Rule: c.limit.Name, Outcome: enforce.Failed, Latency: latency, Tenant: tenant(c.key), Cost: c.cost, Err: err})
		}
	}
}

// respond builds the response from the decisions by slot (single when
// decisions is nil): a status per descriptor, OVER_LIMIT overall when any
// descriptor not in shadow mode is, and the RateLimit fields when asked
// for. It decides the checks that spend nothing, and tells the observer
// of every spending decision.
func (s *Service) respond(ctx context.Context, checks []check, decisions []sluice.Decision, single sluice.Decision, latency time.Duration) (*rlpb.RateLimitResponse, error) {
	resp := &rlpb.RateLimitResponse{OverallCode: rlpb.RateLimitResponse_OK, Statuses: make([]*rlpb.RateLimitResponse_DescriptorStatus, len(checks))}
	var policies [4]ratelimitheader.Policy
	var limits [4]ratelimitheader.Limit
	fs := fields{policies: policies[:0], limits: limits[:0]}
	for i := range checks {
		c := &checks[i]
		st := &rlpb.RateLimitResponse_DescriptorStatus{Code: rlpb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		if c.unlimited {
			st.LimitRemaining = math.MaxUint32
			continue
		}
		if c.rule == nil {
			continue
		}
		d := single
		switch {
		case c.peek:
			var err error
			if d, err = s.peek(ctx, c); err != nil {
				return nil, err
			}
		case decisions != nil:
			d = decisions[c.slot]
		}
		fillStatus(st, c.rule, d)
		if st.Code == rlpb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlpb.RateLimitResponse_OVER_LIMIT
		}
		if s.obs != nil && !c.peek {
			s.obs.Observe(enforce.Event{Rule: c.limit.Name, Outcome: outcomeOf(c.rule, d), Latency: latency, Tenant: tenant(c.key), Cost: c.cost})
		}
		if s.headers && !c.rule.ShadowMode { // a shadow limit must not make clients wait
			fs = fs.with(c.limit, int64(st.LimitRemaining), d)
		}
	}
	resp.ResponseHeadersToAdd = fs.headers()
	return resp, nil
}

// fillStatus fills a limited descriptor's status from its decision: its
// limit, what remains, when it resets (for a rejection, when the hits
// would fit), and OVER_LIMIT for a rejection outside shadow mode.
func fillStatus(st *rlpb.RateLimitResponse_DescriptorStatus, rule *Rule, d sluice.Decision) {
	st.CurrentLimit = &rlpb.RateLimitResponse_RateLimit{Name: rule.Name, RequestsPerUnit: rule.RequestsPerUnit, Unit: rule.Unit}
	st.LimitRemaining = uint32(min(math.Floor(max(d.Remaining, 0)), math.MaxUint32))
	reset := d.ResetAfter
	if !d.Allowed && d.RetryAfter != sluice.Never {
		reset = d.RetryAfter
	}
	st.DurationUntilReset = durationpb.New(reset)
	if !d.Allowed && !rule.ShadowMode {
		st.Code = rlpb.RateLimitResponse_OVER_LIMIT
	}
}

// outcomeOf is what the observer hears of a decision under rule.
func outcomeOf(rule *Rule, d sluice.Decision) enforce.Outcome {
	switch {
	case d.Allowed:
		return enforce.Allowed
	case rule.ShadowMode:
		return enforce.ShadowRejected
	}
	return enforce.Rejected
}

// decide asks the limiter about every limited check in one call: Allow for
// one (its decision in *single, and a nil slice), AllowAll in
// rejections-count mode for several (descriptors are independent). Checks
// of the same limit and key share a request, their costs added. It returns
// the decisions by slot.
//
// A request whose cost no store can represent (beyond units.MaxAtoms, so
// beyond every limit's capacity) can never fit: it is decided here, a
// rejection with RetryAfter sluice.Never as a store answers any cost above
// the capacity, and only the others are asked about. Hits are whole counts
// a client may send as large as it likes; they are never invalid input.
func (s *Service) decide(ctx context.Context, checks []check, single *sluice.Decision) ([]sluice.Decision, error) {
	var reqs []sluice.Request
	beyond := false
	for i := range checks {
		c := &checks[i]
		if c.rule == nil || c.peek {
			continue
		}
		c.slot = -1
		for j, r := range reqs {
			if r.Key == c.key && r.Limit == c.limit {
				c.slot = j
				reqs[j].Cost += c.cost
				beyond = beyond || !representable(reqs[j].Cost)
				break
			}
		}
		if c.slot < 0 {
			c.slot = len(reqs)
			reqs = append(reqs, sluice.Request{Key: c.key, Limit: c.limit, Cost: c.cost})
			beyond = beyond || !representable(c.cost)
		}
	}
	if beyond {
		return s.decideBeyond(ctx, reqs)
	}
	var ds []sluice.Decision
	var err error
	switch len(reqs) {
	case 0:
	case 1:
		*single, err = s.limiter.Allow(ctx, reqs[0].Key, reqs[0].Limit, reqs[0].Cost)
	default:
		ds = make([]sluice.Decision, len(reqs))
		_, err = s.limiter.AllowAll(ctx, reqs, sluice.RejectionsCount, ds)
	}
	if err := limiterError(ctx, err); err != nil {
		return nil, err
	}
	return ds, nil
}

// decideBeyond is decide for requests some of whose costs no store can
// represent: those are rejected, Never, and the others asked about as
// decide asks. It returns the decisions by slot (never nil).
func (s *Service) decideBeyond(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	ds := make([]sluice.Decision, len(reqs))
	var ask []sluice.Request
	var where []int // the slot of each of ask
	for j, r := range reqs {
		if !representable(r.Cost) {
			ds[j] = sluice.Decision{Limit: r.Limit, RetryAfter: sluice.Never}
			continue
		}
		ask, where = append(ask, r), append(where, j)
	}
	var err error
	switch len(ask) {
	case 0:
	case 1:
		ds[where[0]], err = s.limiter.Allow(ctx, ask[0].Key, ask[0].Limit, ask[0].Cost)
	default:
		out := make([]sluice.Decision, len(ask))
		_, err = s.limiter.AllowAll(ctx, ask, sluice.RejectionsCount, out)
		for k, j := range where {
			ds[j] = out[k]
		}
	}
	if err := limiterError(ctx, err); err != nil {
		return nil, err
	}
	return ds, nil
}

// representable reports whether a store can take cost (a positive whole
// number of hits): at most units.MaxAtoms millionths, about 4.5e9.
func representable(cost float64) bool {
	_, ok := units.FromCost(cost)
	return ok
}

// limiterError is the answer to a limiter call that returned err: nil when
// it decided (a cost that never fits is a decision, not a failure),
// INVALID_ARGUMENT for a cost it cannot take, the caller's own end, or
// UNAVAILABLE (Envoy's failure_mode_deny decides).
func limiterError(ctx context.Context, err error) error {
	switch {
	case err == nil, errors.Is(err, sluice.ErrCostExceedsLimit):
		return nil
	case errors.Is(err, sluice.ErrInvalidCost):
		return status.Errorf(codes.InvalidArgument, "rls: %v", err)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "rls: the limiter failed: %v", err)
}

func (s *Service) validate(req *rlpb.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "rls: the domain must not be empty")
	case len(req.Domain) > maxDomain:
		return status.Errorf(codes.InvalidArgument, "rls: a domain of %d bytes: at most %d", len(req.Domain), maxDomain)
	case len(req.Descriptors) == 0:
		return status.Error(codes.InvalidArgument, "rls: the descriptor list must not be empty")
	case len(req.Descriptors) > s.maxDesc:
		return status.Errorf(codes.InvalidArgument, "rls: %d descriptors: at most %d per request", len(req.Descriptors), s.maxDesc)
	}
	for i, d := range req.Descriptors {
		es := d.GetEntries()
		if len(es) == 0 || len(es) > MaxEntries {
			return status.Errorf(codes.InvalidArgument, "rls: descriptor %d has %d entries: 1 to %d", i, len(es), MaxEntries)
		}
		for _, e := range es {
			if e.GetKey() == "" || len(e.GetKey()) > MaxEntryBytes || len(e.GetValue()) > MaxEntryBytes {
				return status.Errorf(codes.InvalidArgument, "rls: descriptor %d: an entry key must be 1 to %d bytes, a value at most %d", i, MaxEntryBytes, MaxEntryBytes)
			}
		}
		if d.GetIsNegativeHits() {
			return status.Errorf(codes.InvalidArgument, "rls: descriptor %d: is_negative_hits is not supported (sluice gives capacity back with Release, for concurrency limits)", i)
		}
		if o := d.GetLimit(); o != nil && envoyconfig.Unit(o.GetUnit()).Duration() == 0 {
			// The client's mistake (envoyproxy/ratelimit's call fails on
			// one too); taken as no limit, it would disable the configured
			// one.
			return status.Errorf(codes.InvalidArgument, "rls: descriptor %d: a limit override needs a unit of time (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR), not unit %v", i, o.GetUnit())
		}
	}
	return nil
}

// entries are d's entries, in buf when they fit (the matcher keeps none).
func entries(d *commonrl.RateLimitDescriptor, buf []Entry) []Entry {
	for _, e := range d.GetEntries() {
		buf = append(buf, Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	return buf
}

// storeKey is a descriptor's counter: its domain and every entry, as
// envoyproxy/ratelimit keys its cache (a value-less configured key counts
// each value apart); bounded, so a long descriptor is hashed.
func storeKey(domain string, es []Entry) string {
	var stack [128]byte
	b := append(stack[:0], "rls:"...)
	b = append(b, domain...)
	for _, e := range es { // length-prefixed: no two descriptors share a key
		for _, part := range [2]string{e.Key, e.Value} {
			b = append(b, '|')
			b = strconv.AppendInt(b, int64(len(part)), 10)
			b = append(b, ':')
			b = append(b, part...)
		}
	}
	if len(b)-len("rls:") > enforce.MaxRawKey {
		return enforce.BoundedKey("rls:", string(b[len("rls:"):]))
	}
	return string(b)
}

// seed keys the tenants' pseudonyms, per process.
var seed = maphash.MakeSeed()

// tenant is a pseudonym of a counter for the heaviest-tenants view.
func tenant(key string) string { return enforce.Pseudonym(seed, "rls", key) }

// checker is a limiter that decides a check spending nothing with its
// failure policy, as it decides a spending one (redisstore.Store.Check):
// allowed with the state as it is when the store answers; when it cannot,
// what the policy says.
type checker interface {
	Check(ctx context.Context, key string, limit sluice.Limit) (sluice.Decision, error)
}

// peek is a check that spends nothing: the state as it is, reported as an
// allowed decision (nothing was asked for). A limiter with a failure
// policy (a checker) decides it by that policy when its store cannot
// answer, as it does a spending check. Without a sluice.Inspector the
// limiter cannot be read, and the check says nothing about the state.
func (s *Service) peek(ctx context.Context, c *check) (sluice.Decision, error) {
	if ch, ok := s.limiter.(checker); ok {
		d, err := ch.Check(ctx, c.key, c.limit)
		if err != nil {
			if ctx.Err() != nil {
				return sluice.Decision{}, status.FromContextError(ctx.Err()).Err()
			}
			return sluice.Decision{}, status.Errorf(codes.Unavailable, "rls: the limiter failed: %v", err)
		}
		return d, nil
	}
	in, ok := s.limiter.(sluice.Inspector)
	if !ok {
		return sluice.Decision{Allowed: true, Remaining: c.limit.Capacity()}, nil
	}
	st, err := in.Peek(ctx, c.key, c.limit)
	if err != nil {
		return sluice.Decision{}, status.Errorf(codes.Unavailable, "rls: the limiter failed: %v", err)
	}
	return sluice.Decision{Allowed: true, Remaining: st.Remaining, ResetAfter: st.ResetAfter}, nil
}

// ErrNoLimit: no limit applies to the descriptor (no rule matches it, its
// domain is unknown, or its rule is unlimited).
var ErrNoLimit = errors.New("rls: no limit applies to the descriptor")

// ErrNotInspectable: the Limiter is not a sluice.Inspector.
var ErrNotInspectable = errors.New("rls: the store cannot be inspected")

// Peek reports the state of a descriptor's counter — what remains, when
// it is full again — spending nothing: for an operator.
func (s *Service) Peek(ctx context.Context, domain string, es []Entry) (*Rule, sluice.State, error) {
	in, rule, key, err := s.locate(domain, es)
	if err != nil {
		return nil, sluice.State{}, err
	}
	st, err := in.Peek(ctx, key, rule.Limit)
	return rule, st, err
}

// Reset forgets a descriptor's counter: it starts full.
func (s *Service) Reset(ctx context.Context, domain string, es []Entry) (*Rule, error) {
	in, rule, key, err := s.locate(domain, es)
	if err != nil {
		return nil, err
	}
	return rule, in.Reset(ctx, key, rule.Limit)
}

func (s *Service) locate(domain string, es []Entry) (sluice.Inspector, *Rule, string, error) {
	in, ok := s.limiter.(sluice.Inspector)
	if !ok {
		return nil, nil, "", ErrNotInspectable
	}
	loaded := s.config.Load()
	if loaded == nil || *loaded == nil {
		return nil, nil, "", ErrNoLimit
	}
	rule, ok := (*loaded).Match(domain, es)
	if !ok || rule.Unlimited {
		return nil, nil, "", ErrNoLimit
	}
	keyed := es
	if rule.KeyEntries != nil {
		keyed = rule.KeyEntries
	}
	return in, rule, storeKey(domain, keyed), nil
}

// fields are a response's RateLimit-Policy and RateLimit members in the
// making, one per limit, in the order the descriptors first name them. A
// limit named by several descriptors (with other keys) is written once,
// about its tightest decision — the least remaining, then the longest
// reset — so that a client pacing itself by the fields stays within each.
type fields struct {
	policies []ratelimitheader.Policy
	limits   []ratelimitheader.Limit
}

// with is f with limit l, whose descriptor has remaining units left under
// decision d. (A value in and out, as append is, so that the members stay
// on the caller's stack.)
func (f fields) with(l sluice.Limit, remaining int64, d sluice.Decision) fields {
	m := ratelimitheader.Limit{Name: l.Name, Remaining: remaining, Reset: ratelimitheader.ResetOf(d)}
	for i := range f.limits {
		if o := &f.limits[i]; o.Name == l.Name {
			if m.Remaining < o.Remaining || m.Remaining == o.Remaining && m.Reset > o.Reset {
				*o = m
			}
			return f
		}
	}
	f.policies = append(f.policies, ratelimitheader.PolicyOf(l))
	f.limits = append(f.limits, m)
	return f
}

// headers are the fields as Envoy adds them to the response: none when
// there is nothing to say, or when a name cannot be written (not printable
// ASCII) — a response without them is still a true one.
func (f fields) headers() []*core.HeaderValue {
	if len(f.limits) == 0 {
		return nil
	}
	var policyBuf, limitBuf [128]byte
	policy, err := ratelimitheader.AppendPolicies(policyBuf[:0], f.policies)
	if err != nil {
		return nil
	}
	limit, err := ratelimitheader.AppendLimits(limitBuf[:0], f.limits)
	if err != nil {
		return nil
	}
	return []*core.HeaderValue{{Key: "RateLimit-Policy", Value: string(policy)}, {Key: "RateLimit", Value: string(limit)}}
}
