package pace

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/units"
)

// DefaultSlice is the default Options.Slice: a limit with an explicit Burst
// releases at most 200 ms worth of it at once (20 of 100 per second, when its
// Burst is 20 or more).
const DefaultSlice = 200 * time.Millisecond

// Errors of a Pacer.
var (
	// ErrInvalidOptions: Options fail validation; the error names the field.
	ErrInvalidOptions = errors.New("pace: invalid options")
	// ErrClosed: the Pacer was closed; waiting work is refused.
	ErrClosed = errors.New("pace: pacer closed")
)

// Options configures a Pacer. The zero Options is a Pacer with no limit of its
// own, that probes for the target's with a slow start and learns it from the
// answers (see AdaptiveOptions), releasing work one unit at a time.
type Options struct {
	// Limits are the target's known limits, all of which every release
	// respects: a per-second and a per-day quota, say. Each is enforced
	// exactly by the foundation's algorithm it names (TokenBucket, GCRA,
	// FixedWindow, SlidingLog or SlidingWindow), on this process's clock.
	// A LeakyBucket is refused (a Pacer is already a queue: use a TokenBucket
	// or GCRA with its Burst) and so is Concurrency (use MaxInFlight). The
	// limits' Names must differ. Default: none.
	Limits []sluice.Limit

	// Slice bounds how much of the fastest limit goes out at once. Work is
	// released spaced evenly at the fastest limit's rate, Quota per Window
	// (the fastest: the one of the shortest Window; the slower ones are
	// budgets it spends): a limit whose Burst is not set — and every
	// FixedWindow, SlidingLog and SlidingWindow, which have none — releases
	// one cost unit every Window/Quota, so 50 per second goes out one every
	// 20 ms, never in batches, whatever the target's burst. A limit whose
	// Burst is set explicitly may release up to that many at once, when the
	// pace has left them unused, but never more than Slice's share of it,
	// Quota×Slice/Window (at least one unit): 50 per second with a Burst of
	// 5 releases 5 at once, then one every 20 ms. The release is a token
	// bucket of the limit's rate holding what may go at once; a cost larger
	// than that waits for a full bucket, goes, and the next release waits
	// until the rest is paid at the limit's rate (the limits themselves
	// count the whole cost). The Ceiling, the fastest learned limit and the
	// adaptive rate are released the same way, one unit at a time (none of
	// them has a burst). Default DefaultSlice. Negative is an error; a Slice
	// at least as long as the fastest limit's Window lets its explicit Burst
	// go out whole.
	Slice time.Duration

	// MaxInFlight caps the permits held at once (released by Permit.Done):
	// a concurrency cap on the target. Default 0: no cap.
	MaxInFlight int

	// Adaptive tunes the rate learned from the target's answers (Feedback).
	Adaptive AdaptiveOptions
}

// A Pacer releases work at a controlled pace: each Wait returns when the work's
// cost fits every limit — the configured ones, the ones learned from the
// target, the adaptive rate and the concurrency cap — in first-come,
// first-served order. It is the client side of a rate limit: it keeps the
// caller under the target's limit in advance instead of retrying what the
// target refuses.
//
// Time is the runtime's (time.Now and its timers), so tests drive a Pacer
// with testing/synctest. A Pacer starts no goroutine of its own: it wakes its
// waiters from a single timer. When that timer fires late (a busy machine),
// the grant it was armed for is charged at the instant it was due, so that
// the next one keeps its full interval and the pace does not slow with the
// latency; one late grant is made up this way, not a backlog. It is safe for
// concurrent use.
type Pacer struct {
	mu sync.Mutex // guards everything below

	fixed        []*gate          // the configured limits, in order (and their spacing)
	all          []*gate          // every gate: see rebuildLocked
	learned      map[string]*gate // by the target's policy name
	order        []string         // learned names, in the order first seen
	adaptive     *gate            // the adaptive rate; nil while unlimited
	slice        time.Duration
	ctrl         cubic
	probe        probe // the slow start
	adaptiveHeld bool  // the adaptive gate held work back since it was set
	aopts        AdaptiveOptions

	maxInFlight int
	inFlight    int

	holdUntil time.Time // no release before
	credit    int64     // atoms granted to an abandoned reservation, for the next grants
	creditAt  time.Time // when they were granted
	queue     []*Reservation
	timer     *time.Timer
	timerAt   time.Time // when timer fires; zero once it has
	closed    bool

	meter rateMeter
	stats Stats

	// The algorithms' clock: Unix microseconds at base, advanced by the
	// monotonic clock (see micros).
	base      time.Time
	baseMicro int64
}

// micros is t on the algorithms' clock: the wall clock when the Pacer was
// made, advanced by the monotonic clock, so that a step of the wall clock
// neither stalls nor rushes the gates (the timers are monotonic too).
func (p *Pacer) micros(t time.Time) int64 {
	return p.baseMicro + t.Sub(p.base).Microseconds()
}

// gate is one limit the Pacer enforces, with its state.
type gate struct {
	params *algo.Params
	state  algo.State
	// charged gates (the spacing of a limit, the adaptive rate) count a
	// cost above their capacity whole: it waits for a full bucket and takes
	// it, and the gate then admits nothing until the rest has been paid at
	// its rate (blockedUntil, in micros), from an empty bucket. They are the
	// Pacer's own: a cost above their capacity is not refused.
	charged      bool
	blockedUntil int64
	// spacedBy is, for the fastest learned limit, the gate that spaces its
	// releases (a configured limit's is in Pacer.fixed).
	spacedBy *gate
	// seen is, for a learned limit, when an answer last stated its policy.
	seen time.Time
	// exact is, for a learned limit, that the target's r is taken as the
	// whole truth (see learnLocked): set once the target throttled
	// despite the limit, which means its count does not move as a token
	// bucket's would.
	exact bool
}

// New validates o and returns a Pacer.
func New(o Options) (*Pacer, error) {
	if o.Slice < 0 {
		return nil, fmt.Errorf("%w: Slice %v is negative", ErrInvalidOptions, o.Slice)
	}
	if o.Slice == 0 {
		o.Slice = DefaultSlice
	}
	if o.MaxInFlight < 0 {
		return nil, fmt.Errorf("%w: MaxInFlight %d is negative", ErrInvalidOptions, o.MaxInFlight)
	}
	a, err := o.Adaptive.withDefaults()
	if err != nil {
		return nil, err
	}
	base := time.Now()
	p := &Pacer{
		learned:     make(map[string]*gate),
		slice:       o.Slice,
		aopts:       a,
		maxInFlight: o.MaxInFlight,
		base:        base,
		baseMicro:   base.UnixMicro(),
	}
	now := p.micros(base)
	limits := o.Limits
	if a.Ceiling > 0 {
		// A ceiling under one unit per second still lets a request of
		// one unit through, every 1/Ceiling seconds.
		limits = append(limits[:len(limits):len(limits)], sluice.Limit{Name: ceilingName, Quota: a.Ceiling, Window: time.Second, Burst: max(a.Ceiling, 1)})
	}
	names := make(map[string]bool, len(limits))
	fastest := -1
	for i, l := range limits {
		switch l.Algorithm {
		case sluice.LeakyBucket:
			return nil, fmt.Errorf("%w: Limits[%d] %q: a LeakyBucket cannot pace (a Pacer is already a queue); use a TokenBucket or GCRA with a Burst", ErrInvalidOptions, i, l.Name)
		case sluice.Concurrency:
			return nil, fmt.Errorf("%w: Limits[%d] %q: use MaxInFlight for a concurrency cap", ErrInvalidOptions, i, l.Name)
		}
		if names[l.Name] {
			return nil, fmt.Errorf("%w: Limits[%d]: the name %q is used twice", ErrInvalidOptions, i, l.Name)
		}
		names[l.Name] = true
		g, err := newGate(l, now)
		if err != nil {
			return nil, fmt.Errorf("%w: Limits[%d]: %w", ErrInvalidOptions, i, err)
		}
		p.fixed = append(p.fixed, g)
		// The ceiling gets its own spacing, one unit at a time (it has no
		// burst of its own): it must not take the spacing from a
		// configured limit.
		if l.Name == ceilingName {
			if s := spacingOf(l, 0, p.slice); s != nil {
				sg, err := newSpacingGate(*s, now)
				if err != nil {
					return nil, fmt.Errorf("%w: the spacing of Adaptive.Ceiling: %w", ErrInvalidOptions, err)
				}
				p.fixed = append(p.fixed, sg)
			}
			continue
		}
		if fastest < 0 || l.Window < limits[fastest].Window {
			fastest = i
		}
	}
	if fastest >= 0 {
		l := limits[fastest]
		if s := spacingOf(l, explicitBurst(l), p.slice); s != nil {
			g, err := newSpacingGate(*s, now)
			if err != nil {
				return nil, fmt.Errorf("%w: the spacing of Limits[%d] (Slice %v): %w", ErrInvalidOptions, fastest, p.slice, err)
			}
			p.fixed = append(p.fixed, g)
		}
	}
	p.ctrl = cubic{beta: a.Beta, c: a.C}
	p.rebuildLocked()
	if a.Initial > 0 && !math.IsInf(a.Initial, 1) {
		if err := p.setAdaptive(a.Initial, now); err != nil {
			return nil, fmt.Errorf("%w: Adaptive.Initial: %w", ErrInvalidOptions, err)
		}
	}
	// Nothing to start from (no limit, no Initial): probe for the target's
	// limit, from the first request on.
	p.probe.on = len(o.Limits) == 0 && a.Initial == 0
	return p, nil
}

// spacingName names the gates that space a limit's releases.
const spacingName = "pace.spacing"

// explicitBurst is l's Burst when it has one and it is set, else 0.
func explicitBurst(l sluice.Limit) float64 {
	if l.HasBurst() {
		return l.Burst
	}
	return 0
}

// spacingOf is the token bucket that spaces the releases of l (see
// Options.Slice): l's rate, holding what may go at once — burst, at most
// slice's share of l (at least one unit), when burst is set; one unit when
// it is 0. It is nil when l needs none: l is a token bucket or GCRA that
// holds no more than that itself.
func spacingOf(l sluice.Limit, burst float64, slice time.Duration) *sluice.Limit {
	atOnce := 1.0
	if burst > 0 {
		atOnce = burst
		if slice < l.Window {
			share := l.Quota * float64(slice) / float64(l.Window)
			atOnce = min(burst, max(math.Floor(share*units.PerCost)/units.PerCost, 1))
		}
	}
	if l.HasBurst() && atOnce >= l.Capacity() {
		return nil
	}
	return &sluice.Limit{Name: spacingName, Algorithm: sluice.TokenBucket, Quota: l.Quota, Window: l.Window, Burst: atOnce}
}

func newGate(l sluice.Limit, now int64) (*gate, error) {
	p, err := algo.Compile(l)
	if err != nil {
		return nil, err
	}
	st := algo.NewState(l.Algorithm)
	st.Init(p, now)
	return &gate{params: p, state: st}, nil
}

// newSpacingGate is the charged gate of a spacing (see spacingOf).
func newSpacingGate(l sluice.Limit, now int64) (*gate, error) {
	g, err := newGate(l, now)
	if err != nil {
		return nil, err
	}
	g.charged = true
	return g, nil
}

// atoms is what cost must find in g to be admitted: all of it, or for a
// charged gate at most its capacity.
func (g *gate) atoms(cost int64) int64 {
	if g.charged {
		return min(cost, g.params.CapacityAtoms())
	}
	return cost
}

// spend spends cost on g at now, once admitted. A charged gate given more
// than its capacity takes it all and blocks until the rest is paid.
func (g *gate) spend(cost, now int64) {
	_, _ = g.state.Step(g.params, algo.Call{Now: now, Cost: g.atoms(cost), Clamp: true}, true)
	if rest := cost - g.params.CapacityAtoms(); g.charged && rest > 0 {
		l := g.params.Limit
		perMicro := l.Quota * units.PerCost / float64(l.Window/time.Microsecond) // atoms per µs
		g.blockedUntil = now + int64(math.Ceil(float64(rest)/perMicro))
	}
}

// blocked says how long g still admits nothing at now, and once a block is
// over, starts g from an empty bucket at its end (what was paid for).
func (g *gate) blocked(now int64) time.Duration {
	if g.blockedUntil == 0 {
		return 0
	}
	if now < g.blockedUntil {
		return time.Duration(g.blockedUntil-now) * time.Microsecond
	}
	g.state.Init(g.params, g.blockedUntil)
	_, _ = g.state.Step(g.params, algo.Call{Now: g.blockedUntil, Cost: g.params.CapacityAtoms(), Clamp: true}, true)
	g.blockedUntil = 0
	return 0
}

// remaining is what g could admit at now, in atoms.
func (g *gate) remaining(now int64) int64 {
	if g.blocked(now) > 0 {
		return 0
	}
	r, _ := g.state.Step(g.params, algo.Call{Now: now, Cost: g.params.CapacityAtoms() + 1, Clamp: true}, false)
	return r.Remaining()
}

// retarget replaces g's limit by l, carrying over how much is spent: the new
// state, fresh (full), is spent down to what the old one had left. The spend
// is an ordinary one — at most the capacity, from a full state — so it is
// always admitted, whatever the size of the limit.
func (g *gate) retarget(l sluice.Limit, now int64) error {
	p, err := algo.Compile(l)
	if err != nil {
		return err
	}
	left := g.remaining(now)
	st := algo.NewState(l.Algorithm)
	st.Init(p, now)
	if spent := p.CapacityAtoms() - left; spent > 0 {
		if _, err := st.Step(p, algo.Call{Now: now, Cost: spent, Clamp: true}, true); err != nil {
			return err
		}
	}
	g.params, g.state = p, st
	return nil
}

// lower spends what g holds beyond left atoms, so that it admits no more than
// the target says it has left (an ordinary spend of what is there).
func (g *gate) lower(left, now int64) {
	if have := g.remaining(now); have > left {
		_, _ = g.state.Step(g.params, algo.Call{Now: now, Cost: have - left, Clamp: true}, true)
	}
}

// A Reservation is a place in a Pacer's queue for one cost. It is granted
// (Ready is closed) when the cost fits; until then Cancel gives the place up,
// and the capacity it would have spent goes to the work behind it.
type Reservation struct {
	p         *Pacer
	cost      float64
	atoms     int64
	queued    time.Time
	ready     chan struct{}
	err       error // set before ready is closed when the reservation failed
	first     bool  // queued ahead of the others (a retry)
	granted   bool
	grantedAt time.Time
	due       time.Time // when, at the head of the queue, it was found to fit
	done      bool      // the permit was given back
	canceled  bool
}

// Ready is closed when the reservation is granted or has failed (Err).
func (r *Reservation) Ready() <-chan struct{} { return r.ready }

// Err is, once Ready is closed, nil when the reservation was granted, or why
// it failed: ErrClosed, or a cost the target's learned limit can never admit
// (wrapping sluice.ErrCostExceedsLimit).
func (r *Reservation) Err() error {
	select {
	case <-r.ready:
		return r.err
	default:
		return nil
	}
}

// Cancel gives up the reservation. Before it is granted, its place and the
// capacity it would have spent go to the work queued behind it. After, Cancel
// says the grant was not used: within a millisecond of the grant (a context
// that ended as it came) its capacity goes to the work behind, as credit for
// the grants of that instant; later, the capacity is spent and Cancel only
// frees the concurrency slot, as Done does. Cancel is idempotent.
func (r *Reservation) Cancel() {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.granted {
		if !r.done && time.Since(r.grantedAt) < creditFor {
			if p.credit == 0 || !p.creditAt.Equal(r.grantedAt) {
				p.credit, p.creditAt = 0, r.grantedAt
			}
			p.credit += r.atoms
			// Not a grant after all: the one the credit goes to is.
			p.stats.Credited++
			p.stats.Granted--
			p.stats.GrantedCost -= r.cost
			p.stats.Waited -= r.grantedAt.Sub(r.queued)
			p.meter.add(r.grantedAt, -r.cost)
		}
		p.doneLocked(r)
		p.pumpLocked()
		return
	}
	if r.canceled || r.err != nil {
		return
	}
	r.canceled = true
	for i, q := range p.queue {
		if q == r {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			break
		}
	}
	p.stats.Canceled++
	p.pumpLocked()
}

// Done gives back the concurrency slot a granted reservation holds; the work
// it paced is over. It is idempotent, and does nothing before the grant.
func (r *Reservation) Done() {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.granted {
		p.doneLocked(r)
	}
}

func (p *Pacer) doneLocked(r *Reservation) {
	if r.done {
		return
	}
	r.done = true
	if p.maxInFlight > 0 {
		p.inFlight--
		p.pumpLocked()
	}
}

// Reserve takes a place in the queue for cost (in the limits' cost units)
// without waiting; the reservation's Ready is closed when it is granted.
// Cost must be a positive finite number that fits every configured limit's
// capacity; otherwise Reserve returns an error wrapping sluice.ErrInvalidCost
// or sluice.ErrCostExceedsLimit.
func (p *Pacer) Reserve(cost float64) (*Reservation, error) {
	r, _, err := p.reserve(cost, false)
	return r, err
}

// reserve is Reserve, and the wait until the grant when it is known: for a
// reservation granted at once (0) or at the head of the queue; -1 otherwise.
// A first reservation (a retry, whose request has waited already) goes ahead of
// the others.
func (p *Pacer) reserve(cost float64, first bool) (*Reservation, time.Duration, error) {
	atoms, ok := units.FromCost(cost)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %v is not a positive finite number of at least one millionth", sluice.ErrInvalidCost, cost)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, 0, ErrClosed
	}
	for _, g := range p.fixed {
		if g.charged {
			continue // the Pacer's own spacing: any cost fits, charged whole
		}
		if _, err := g.params.Cost(cost); err != nil {
			return nil, 0, fmt.Errorf("pace: limit %q: %w", g.params.Limit.Name, err) // a fraction of a SlidingLog's unit
		}
		if atoms > g.params.CapacityAtoms() {
			return nil, 0, fmt.Errorf("pace: cost %v: %w %q (capacity %v)", cost, sluice.ErrCostExceedsLimit, g.params.Limit.Name, g.params.Limit.Capacity())
		}
	}
	t := time.Now()
	if rate, ok := p.probe.begin(t, p.slice); ok {
		_ = p.setAdaptive(rate, p.micros(t))
	}
	r := &Reservation{p: p, cost: cost, atoms: atoms, queued: t, first: first}
	if len(p.queue) == 0 && (p.maxInFlight == 0 || p.inFlight < p.maxInFlight) {
		// Nobody ahead: granted now, or queued with the timer armed.
		wait, err := p.tryLocked(r, t)
		if err != nil {
			return nil, 0, err
		}
		if wait == 0 {
			p.grantLocked(r, t)
			return r, 0, nil
		}
		r.ready = make(chan struct{})
		r.due = t.Add(wait)
		p.queue = append(p.queue, r)
		p.arm(wait)
		return r, wait, nil
	}
	r.ready = make(chan struct{})
	if first {
		// Ahead of everything but the retries queued before it.
		i := 0
		for i < len(p.queue) && p.queue[i].first {
			i++
		}
		p.queue = slices.Insert(p.queue, i, r)
	} else {
		p.queue = append(p.queue, r)
	}
	p.pumpLocked()
	return r, -1, nil
}

// Wait blocks until cost may be spent, then returns the granted reservation:
// call its Done when the work is over (it frees the concurrency slot; without
// MaxInFlight it does nothing). Wait returns ctx's error if ctx ends first —
// at once, without queueing, if it already has — and then its place and
// capacity go to the work behind it. When the wait is known to outlast ctx's
// deadline (nobody is ahead, and the limits or a hold say how long), Wait
// returns at once an error wrapping context.DeadlineExceeded. See Reserve for
// the errors of a bad cost.
func (p *Pacer) Wait(ctx context.Context, cost float64) (*Reservation, error) {
	return p.wait(ctx, cost, false)
}

// wait is Wait; first puts the reservation ahead of the others (see reserve).
func (p *Pacer) wait(ctx context.Context, cost float64, first bool) (*Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, wait, err := p.reserve(cost, first)
	if err != nil {
		return nil, err
	}
	if r.ready == closed {
		return r, nil // granted as it was made
	}
	if deadline, ok := ctx.Deadline(); ok && wait > time.Until(deadline) {
		// It cannot be granted in time (a hold, a slow learned limit):
		// say so now rather than at the deadline.
		r.Cancel()
		return nil, fmt.Errorf("pace: the wait for capacity (%v) outlasts the context's deadline: %w", wait, context.DeadlineExceeded)
	}
	select {
	case <-r.ready:
		if r.err != nil {
			return nil, r.err
		}
		return r, nil
	case <-ctx.Done():
		r.Cancel() // a grant that came as ctx ended goes to the work behind
		return nil, ctx.Err()
	}
}

// creditFor is how long the grant of a reservation canceled unused stays
// available to the work behind it.
const creditFor = time.Millisecond

// HoldUntil releases nothing before t: what a target's Retry-After asks of
// every request. Holds only lengthen; an earlier t than the current hold does
// nothing.
func (p *Pacer) HoldUntil(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.After(p.holdUntil) {
		p.holdUntil = t
		p.stats.Holds++
		p.pumpLocked()
	}
}

// Close fails every queued reservation with ErrClosed and refuses new ones.
// Granted reservations are unaffected. Close is idempotent.
func (p *Pacer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, r := range p.queue {
		r.err = ErrClosed
		close(r.ready)
	}
	p.queue = nil
	if p.timer != nil {
		p.timer.Stop()
	}
}

// rebuildLocked lists every gate in p.all: the configured ones (with their
// spacing), the learned ones (the fastest followed by its spacing), the
// adaptive one.
func (p *Pacer) rebuildLocked() {
	p.all = append(p.all[:0], p.fixed...)
	for _, name := range p.order {
		g := p.learned[name]
		p.all = append(p.all, g)
		if g.spacedBy != nil {
			p.all = append(p.all, g.spacedBy)
		}
	}
	if p.adaptive != nil {
		p.all = append(p.all, p.adaptive)
	}
}

// pumpLocked grants what can be granted, in order, and arms the timer for the
// head of the queue.
func (p *Pacer) pumpLocked() {
	for len(p.queue) > 0 {
		r := p.queue[0]
		if p.maxInFlight > 0 && p.inFlight >= p.maxInFlight {
			return // Done pumps
		}
		t := time.Now()
		at := p.chargeAt(r, t)
		wait, err := p.tryLocked(r, at)
		if err == nil && wait > 0 && at.Before(t) {
			wait, err = p.tryLocked(r, t) // it did not fit then: how long from now
		}
		if err == nil && wait > 0 {
			r.due = t.Add(wait)
			p.arm(wait)
			return
		}
		p.queue[0] = nil
		p.queue = p.queue[1:]
		if err != nil {
			r.err = err
			close(r.ready)
			continue
		}
		p.grantLocked(r, t)
	}
}

// chargeAt is the instant the gates judge r at, now t: the instant r was
// found to fit, when r waited for it and the timer woke up late — so that
// the runtime's timer latency does not slow the pace (a late grant charged
// when it was due leaves the next one its full interval) — or else t. It
// makes up one late grant: a second is judged at t. A hold or a credit that
// came after the due instant has it judged at t too.
func (p *Pacer) chargeAt(r *Reservation, t time.Time) time.Time {
	due := r.due
	r.due = time.Time{}
	if due.IsZero() || due.After(t) || due.Before(p.holdUntil) || (p.credit > 0 && due.Before(p.creditAt)) {
		return t
	}
	return due
}

// tryLocked spends r's cost at t if every gate admits it, and otherwise says
// how long until it may (or why it never will).
func (p *Pacer) tryLocked(r *Reservation, t time.Time) (wait time.Duration, err error) {
	if t.Before(p.holdUntil) {
		return p.holdUntil.Sub(t), nil
	}
	if len(p.order) > 0 {
		if next := p.forgetLocked(t); !next.IsZero() {
			// Wake up when the next learned limit is forgotten, at the
			// latest.
			defer func() {
				if wait > 0 {
					wait = min(wait, next.Sub(t))
				}
			}()
		}
	}
	if p.credit > 0 {
		if t.Sub(p.creditAt) >= creditFor || t.Before(p.creditAt) {
			p.credit = 0
		} else if r.atoms <= p.credit {
			p.credit -= r.atoms
			return 0, nil
		}
	}
	now := p.micros(t)
	for _, g := range p.all {
		if g.charged {
			if d := g.blocked(now); d > 0 {
				wait = max(wait, d)
				if g == p.adaptive {
					p.adaptiveHeld = true // the adaptive rate holds work back
				}
			}
		}
	}
	if wait > 0 {
		return wait, nil
	}
	if len(p.all) == 1 && !p.all[0].charged {
		// One gate: no need to check before spending.
		g := p.all[0]
		res, err := g.state.Step(g.params, algo.Call{Now: now, Cost: g.atoms(r.atoms), Clamp: true}, true)
		if err != nil {
			return 0, fmt.Errorf("pace: cost %v: %w", r.cost, err)
		}
		return res.RetryAfter(), nil
	}
	for _, g := range p.all {
		res, err := g.state.Step(g.params, algo.Call{Now: now, Cost: g.atoms(r.atoms), Clamp: true}, false)
		if err != nil {
			return 0, fmt.Errorf("pace: cost %v: %w", r.cost, err)
		}
		if res.RetryAfter() > 0 && g == p.adaptive {
			p.adaptiveHeld = true // the adaptive rate holds work back
		}
		wait = max(wait, res.RetryAfter())
	}
	if wait > 0 {
		return wait, nil
	}
	for _, g := range p.all {
		g.spend(r.atoms, now)
	}
	return 0, nil
}

// grantLocked grants r at t; its cost is spent.
func (p *Pacer) grantLocked(r *Reservation, t time.Time) {
	r.granted, r.grantedAt = true, t
	if p.maxInFlight > 0 {
		p.inFlight++
	}
	p.stats.Granted++
	p.stats.GrantedCost += r.cost
	p.stats.Waited += t.Sub(r.queued)
	p.meter.add(t, r.cost)
	if r.ready == nil {
		r.ready = closed
	} else {
		close(r.ready)
	}
}

// closed is the Ready of a reservation granted as it was made.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// arm makes the timer fire in d. A timer armed for that instant already is
// left alone: resetting a pending timer costs the runtime a scan of every
// timer of the process when it comes due.
func (p *Pacer) arm(d time.Duration) {
	at := time.Now().Add(d)
	if p.timer != nil && at.Equal(p.timerAt) {
		return
	}
	p.timerAt = at
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.fire)
		return
	}
	p.timer.Reset(d)
}

func (p *Pacer) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timerAt = time.Time{}
	if !p.closed {
		p.pumpLocked()
	}
}

// Stats are a Pacer's counters and its view of the target.
type Stats struct {
	// Granted counts granted reservations, GrantedCost their cost.
	Granted     uint64
	GrantedCost float64
	// Canceled counts reservations given up before their grant; Credited
	// those whose Wait ended as they were granted, their grant handed to
	// the work behind.
	Canceled, Credited uint64
	// Waited is the total time granted reservations spent queued.
	Waited time.Duration
	// Queued and InFlight are the reservations waiting and the granted ones
	// not yet Done (counted only under MaxInFlight), now.
	Queued, InFlight int
	// EffectiveRate is the measured rate of granted cost per second, over
	// the last second (ten buckets of 100 ms).
	EffectiveRate float64
	// Rate is the rate in use, in cost per second: the slowest of the
	// configured, learned and adaptive limits (the slow start's included);
	// +Inf when there is none (a Pacer told nothing, before its first
	// request).
	Rate float64
	// Holds counts the times the hold was lengthened (a Retry-After, or a
	// RateLimit or X-RateLimit-* field saying nothing is left until a
	// reset); HoldUntil is the current one (zero or past: none).
	Holds     uint64
	HoldUntil time.Time
	// Throttled counts throttled answers in Feedback (429, 503 with
	// Retry-After); Learned counts the policies learned or changed by an
	// answer; Forgotten the times the learned limits were dropped for want
	// of an answer restating them (AdaptiveOptions.Forget).
	Throttled, Learned, Forgotten uint64
}

// Stats returns the Pacer's counters now.
func (p *Pacer) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Queued = len(p.queue)
	s.InFlight = p.inFlight
	s.EffectiveRate = p.meter.rate(time.Now())
	s.Rate = p.rateLocked()
	s.HoldUntil = p.holdUntil
	return s
}

// rateLocked is the slowest rate of every gate, per second.
func (p *Pacer) rateLocked() float64 {
	r := math.Inf(1)
	for _, g := range p.all {
		l := g.params.Limit
		r = min(r, l.Quota/l.Window.Seconds())
	}
	return r
}
