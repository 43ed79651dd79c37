// Package algo holds the pure rate limiting algorithms: each is a state type
// whose Step takes the state, the limit, the instant and the cost, and
// returns the decision. They never read a clock, never allocate on the fast
// path and never lock; stores own the clock, the map of keys and the
// locking.
//
// All arithmetic is on integers (see internal/units), so decisions are exact
// and replayable: the same calls at the same instants give the same
// decisions, to the microsecond. Every intermediate value stays below 2^53,
// so the Lua versions of these algorithms (redisstore), which compute in
// doubles, decide exactly the same.
package algo

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/units"
)

// ErrClockBackwards is returned by Step when now is earlier than an instant
// the state has already seen, by the token bucket and the window, log and
// leaky bucket algorithms: they refuse to decide in the past rather than
// refill or count from a clock that stepped back. GCRA and Concurrency
// accept an earlier now: it only looks like less capacity to them. Stores
// that read a clock clamp now to State.Floor instead of failing.
var ErrClockBackwards = errors.New("algo: time moved backwards")

// Chargeable reports whether the limit can be charged (Call.Force): its
// algorithm carries a debt (token bucket, GCRA, fixed window, sliding
// window), and its amounts leave room for a debt of one capacity in exact
// arithmetic. The error wraps sluice.ErrInvalidRequest and says why.
func (p *Params) Chargeable() error {
	switch p.Limit.Algorithm {
	case sluice.TokenBucket, sluice.GCRA:
		// Intermediates reach 2 × capU + PerMicro: keep them below 2^53.
		if p.capU > units.MaxScaled/4 || p.rate.PerMicro > units.MaxScaled/4 {
			return fmt.Errorf("%w: limit %q is too large to carry the debt of a charge (its capacity or rate, scaled, exceeds 2^50): round the quota or shorten the window", sluice.ErrInvalidRequest, p.Limit.Name)
		}
		return nil
	case sluice.FixedWindow, sluice.SlidingWindow:
		return nil // counts reach 2 × quota ≤ 2^53
	}
	return fmt.Errorf("%w: limit %q: a %v limit cannot be charged after the work (only token_bucket, gcra, fixed_window and sliding_window carry a debt)", sluice.ErrInvalidRequest, p.Limit.Name, p.Limit.Algorithm)
}

// Params is a validated Limit compiled to integers. It is immutable and safe
// to share.
type Params struct {
	Limit sluice.Limit

	// Fingerprint identifies the parameters that shape a key's state
	// (algorithm, quota, window, burst, delay threshold) but not the name.
	// Stores make it part of a state's identity, so that a changed limit
	// finds fresh state. It is the same in every process.
	Fingerprint uint64

	quota  int64 // atoms per window
	window int64 // microseconds
	cap    int64 // atoms admitted at once: burst, or quota

	// Token bucket, GCRA and leaky bucket work in scaled units.
	rate   units.Rate
	capU   int64 // cap in scaled units
	delayU int64 // leaky bucket delay threshold in scaled units
}

// Compile validates l and compiles it.
func Compile(l sluice.Limit) (*Params, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	p := &Params{Limit: l, window: int64(l.Window / time.Microsecond)}
	p.quota, _ = units.FromCost(l.Quota)
	p.cap = p.quota
	if l.HasBurst() {
		if l.Burst != 0 {
			p.cap, _ = units.FromCost(l.Burst)
		}
		p.rate = units.NewRate(p.quota, p.window)
		p.capU, _ = p.rate.Scale(p.cap)
		if l.DelayThreshold > 0 {
			d, _ := units.FromCost(l.DelayThreshold)
			p.delayU, _ = p.rate.Scale(min(d, p.cap))
		}
	}
	p.Fingerprint = fingerprint(uint64(l.Algorithm), uint64(p.quota), uint64(p.window), uint64(p.cap), uint64(p.delayU))
	return p, nil
}

// Integers are a limit's compiled parameters, for an implementation of the
// algorithms outside Go (redisstore's Lua) to compute exactly the same.
type Integers struct {
	Algorithm sluice.Algorithm
	CapU      int64 // capacity in scaled units (token bucket, GCRA, leaky bucket)
	PerMicro  int64 // scaled units refilled per microsecond
	PerAtom   int64 // scaled units per atom
	Fills     int64 // microseconds that refill any level
	Cap       int64 // capacity in atoms
	Quota     int64 // quota in atoms
	Window    int64 // microseconds
	DelayU    int64 // leaky bucket delay threshold in scaled units
}

// Integers returns the compiled parameters. For the window algorithms and
// Concurrency the rate fields are zero.
func (p *Params) Integers() Integers {
	return Integers{
		Algorithm: p.Limit.Algorithm, CapU: p.capU, PerMicro: p.rate.PerMicro, PerAtom: p.rate.PerAtom,
		Fills: p.rate.Fills(), Cap: p.cap, Quota: p.quota, Window: p.window, DelayU: p.delayU,
	}
}

// CapacityAtoms is the most cost, in atoms, the limit admits at once; a
// cost above it is answered Never, which reads a state without changing it.
func (p *Params) CapacityAtoms() int64 { return p.cap }

// Cost converts a caller's cost to atoms, checking that it is a positive
// finite number of the limit's resolution. A cost above the capacity is not
// an error here: Step answers it with a Never decision.
func (p *Params) Cost(cost float64) (int64, error) {
	if cost == 1 { // the common case
		return units.PerCost, nil
	}
	atoms, ok := units.FromCost(cost)
	if !ok {
		if cost > 0 && !math.IsInf(cost, 1) {
			// Finite, positive, yet out of range: too small or too large.
			if cost < 1 {
				return 0, fmt.Errorf("%w: cost %v for limit %q: below the resolution of 0.000001", sluice.ErrInvalidCost, cost, p.Limit.Name)
			}
			return 0, fmt.Errorf("%w: cost %v for limit %q: larger than the largest amount (about 4.5e9)", sluice.ErrInvalidCost, cost, p.Limit.Name)
		}
		return 0, fmt.Errorf("%w: cost %v for limit %q: must be a positive finite number", sluice.ErrInvalidCost, cost, p.Limit.Name)
	}
	if p.Limit.WholeUnits() && atoms%units.PerCost != 0 {
		return 0, fmt.Errorf("%w: cost %v for limit %q: %v counts whole units", sluice.ErrInvalidCost, cost, p.Limit.Name, p.Limit.Algorithm)
	}
	return atoms, nil
}

// Call is one decision to make: at instant Now (Unix microseconds of a real
// clock: with windows of at most ten years, every instant computed then
// stays below 2^53 until well past the year 2200), spend
// Cost atoms. Ticket is the identity a Concurrency limit gives the slots it
// grants; stores supply a fresh non-zero one per call.
type Call struct {
	Now    int64
	Cost   int64
	Ticket uint64
	// Clamp makes Step decide a Now earlier than the state's Floor at the
	// Floor (no refill) instead of failing with ErrClockBackwards: what a
	// store reading a real clock does. Result.Clamped reports it.
	Clamp bool
	// Force makes Step charge the cost whatever the state holds — a cost
	// known only after the work ran — running the key into debt, at most one
	// capacity below empty (the excess is forgiven); later calls wait the
	// debt out. Always allowed, and never Never. Only the algorithms with a
	// natural debt take it (see Params.Chargeable); Step refuses it on the
	// others.
	Force bool
}

// clampTo applies the Floor rule: a Now before floor is ErrClockBackwards,
// or, with Clamp, moved up to floor.
func (c *Call) clampTo(floor int64) (clamped bool, err error) {
	if c.Now >= floor {
		return false, nil
	}
	if !c.Clamp {
		return false, ErrClockBackwards
	}
	c.Now = floor
	return true, nil
}

// State is what every algorithm's state implements (through a pointer).
type State interface {
	// Init makes the state that of a key never seen before, at now.
	Init(p *Params, now int64)
	// Step decides c. With commit, an allowed cost is spent (the state
	// updated); a rejection never changes the state, with or without commit
	// (when time moves forward that is the same as refreshing it, and it is
	// what the Redis script does). Without commit Step only answers, which
	// is how a multi-limit decision checks all limits before spending on
	// any. When the cost exceeds the capacity the decision is Never and the
	// error wraps sluice.ErrCostExceedsLimit.
	Step(p *Params, c Call, commit bool) (Result, error)
	// ResetAt is the instant from which the state is equivalent to a fresh
	// one: a store may forget the key then.
	ResetAt(p *Params) int64
	// Floor is the earliest instant Step accepts without ErrClockBackwards
	// (math.MinInt64 when any instant is accepted).
	Floor() int64
}

// NewState returns the zero state of algorithm a, to Init before use, or
// nil for an unknown algorithm.
func NewState(a sluice.Algorithm) State {
	switch a {
	case sluice.TokenBucket:
		return new(TokenBucket)
	case sluice.GCRA:
		return new(GCRA)
	case sluice.FixedWindow:
		return new(FixedWindow)
	case sluice.SlidingLog:
		return new(SlidingLog)
	case sluice.SlidingWindow:
		return new(SlidingWindow)
	case sluice.LeakyBucket:
		return new(LeakyBucket)
	case sluice.Concurrency:
		return new(Concurrency)
	}
	return nil
}

// Result is an algorithm's answer, in integers; Decision makes it a
// sluice.Decision. It has four fields so that the compiler keeps it in
// registers (a larger struct goes through memory, and its copies stall
// store forwarding on the decision path).
type Result struct {
	flags     uint8 // allowed, clamped
	remaining int64 // atoms
	wait      int64 // µs: RetryAfter when rejected (neverWait if the cost cannot fit); Delay when allowed
	reset     int64 // µs: ResetAfter
}

// neverWait is the wait of a cost that can never fit.
const neverWait = math.MaxInt64

const (
	allowedFlag uint8 = 1 << iota
	clampedFlag
)

func result(allowed, clamped bool, remaining, wait, reset int64) Result {
	var f uint8
	if allowed {
		f |= allowedFlag
	}
	if clamped {
		f |= clampedFlag
	}
	return Result{flags: f, remaining: remaining, wait: wait, reset: reset}
}

// Allowed reports whether the cost was admitted.
func (r Result) Allowed() bool { return r.flags&allowedFlag != 0 }

// Clamped reports that the call's Now was behind the state and was clamped
// (see Call.Clamp).
func (r Result) Clamped() bool { return r.flags&clampedFlag != 0 }

// Remaining is the cost, in atoms, that could still be spent right after.
func (r Result) Remaining() int64 { return r.remaining }

// RetryAfter is zero when allowed, else when the cost first fits (Never if
// it cannot).
func (r Result) RetryAfter() time.Duration {
	switch {
	case r.Allowed():
		return 0
	case r.wait == neverWait:
		return sluice.Never
	}
	return micros(r.wait)
}

// Delay is how long an allowed LeakyBucket call must wait before it runs.
func (r Result) Delay() time.Duration {
	if r.Allowed() {
		return micros(r.wait)
	}
	return 0
}

// ResetAfter is how long until the key is back to full.
func (r Result) ResetAfter() time.Duration { return micros(r.reset) }

// ResetAfterMicros is ResetAfter in microseconds.
func (r Result) ResetAfterMicros() int64 { return r.reset }

// Never reports a cost above the capacity.
func (r Result) Never() bool { return !r.Allowed() && r.wait == neverWait }

// Decision is r as the decision about limit l; ticket is the call's, kept
// when a Concurrency call is allowed. (Written to be inlined: it builds the
// large Decision in the caller's frame.)
func (r Result) Decision(l sluice.Limit, ticket uint64) sluice.Decision {
	d := sluice.Decision{Limit: l, Remaining: units.ToCost(r.remaining), ResetAfter: micros(r.reset)}
	switch {
	case r.flags&allowedFlag != 0:
		d.Allowed, d.Delay = true, micros(r.wait)
		if l.Algorithm == sluice.Concurrency {
			d.Ticket = ticket
		}
	case r.wait == neverWait:
		d.RetryAfter = sluice.Never
	default:
		d.RetryAfter = micros(r.wait)
	}
	return d
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// NeverError is the error of a cost (in atoms) above the capacity.
func (p *Params) NeverError(cost int64) error { return p.never(cost) }

// never is the error of a cost above the capacity; its Result waits Never.
func (p *Params) never(cost int64) error {
	return fmt.Errorf("%w: cost %v, capacity %v of limit %q", sluice.ErrCostExceedsLimit, units.ToCost(cost), units.ToCost(p.cap), p.Limit.Name)
}

// fingerprint mixes the words with the 64-bit finalizer of MurmurHash3.
func fingerprint(words ...uint64) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, w := range words {
		h ^= w
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		h *= 0xc4ceb9fe1a85ec53
		h ^= h >> 33
	}
	return h
}

// minInstant stands for "no instant": before every instant a clock gives.
const minInstant int64 = math.MinInt64
