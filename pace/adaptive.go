package pace

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/units"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// The defaults of AdaptiveOptions: AWS's published constants for the CUBIC
// rate control of its SDKs' adaptive retry mode.
const (
	DefaultBeta    = 0.7
	DefaultC       = 0.4
	DefaultMinRate = 0.5
)

// ceilingName and adaptiveName name the Pacer's own gates.
const (
	ceilingName  = "pace.ceiling"
	adaptiveName = "pace.adaptive"
)

// AdaptiveOptions tune how a Pacer learns the target's limit from its answers
// (Pacer.Feedback).
//
// Two sources teach it. The target's RateLimit-Policy (draft-11) states its
// quotas: each becomes a learned limit, enforced like a configured one (a
// TokenBucket of q per w, the fastest spaced one unit at a time: its burst is
// not known), and each RateLimit member lowers the learned limit of its name
// to what the target says is left (r). A target that sends only RateLimit, or
// only X-RateLimit-*, is obeyed when it says nothing is left: nothing is
// released until its reset.
//
// A Pacer with nothing to start from — no Limits, no Initial — begins with a
// slow start, as TCP does: with the first request, an adaptive rate of one
// cost unit per Slice (5 per second by default), which doubles every 50 ms of
// answers that show the target took it — an unthrottled answer to a request
// sent at the current rate (so at most once per round trip), while work
// waited for the rate (a rate the client does not use is not raised). The
// slow start ends at the first throttled answer, which CUBIC takes from
// below, or at the first RateLimit-Policy, whose limit then paces (with no
// adaptive rate, as a configured one). Against nginx's limit_req, the slow
// start draws half the 429s of an unlimited start and loses less time than
// the collapse that followed the opening blast (docs/BENCHMARKS.md).
//
// A throttled answer (429, or 503 with Retry-After) the Pacer did not foresee
// starts or corrects the adaptive rate: CUBIC on the request rate, as AWS's
// SDKs do. The rate drops to Beta × the rate that was throttled — the
// adaptive rate, when it held work back since it was set (the client sent as
// fast as it allowed; at the end of a slow start, the rate the throttled
// request went at); otherwise the smaller of the rate measured over the last
// second and the adaptive rate — then climbs back along C·(t−K)³ + Wmax,
// K = ∛(Wmax·(1−Beta)/C): quickly at first, flattening as it nears the rate
// that was throttled, where it spends most of its time, then probing beyond
// it. CUBIC rather than AIMD: AIMD's halving and linear climb average about
// 75 % of the limit, while CUBIC's plateau near the last good rate keeps the
// average close to it. A throttle that holds the Pacer (a Retry-After under
// HoldTarget) and comes below the previous Wmax sets Wmax lower still (fast
// convergence, see cubic.decrease). The climb never goes above twice the
// measured rate (it would mean nothing), nor above Ceiling. The adaptive
// rate, like every rate without a burst, is released one unit at a time.
type AdaptiveOptions struct {
	// Ceiling is the most the Pacer ever releases, in cost units per second,
	// whatever it learns: a configured limit of Ceiling per second. Default
	// 0: none beyond Limits.
	Ceiling float64
	// Initial is where the adaptive rate starts, in cost units per second:
	// the Pacer runs at it from the first request, without a slow start,
	// and holds it until the first throttled answer — a rate learned before
	// (the relay keeps the learned rate of each target across restarts and
	// passes it back here). Default 0: a slow start when there are no
	// Limits (see AdaptiveOptions); with Limits, unlimited until the first
	// throttle (the configured and learned limits still apply). +Inf: no
	// slow start, unlimited until the first throttle, even without Limits.
	Initial float64
	// MinRate is the floor of the adaptive rate, in cost units per second.
	// Default DefaultMinRate.
	MinRate float64
	// Beta is CUBIC's multiplicative decrease, in (0, 1). Default
	// DefaultBeta.
	Beta float64
	// C is CUBIC's scaling constant, positive. Default DefaultC.
	C float64
	// Forget drops the learned limits when no answer has restated a
	// policy for that long, so that a target's mistake (a quota of one
	// per ten years) cannot stop the client for good: the next request
	// goes, and its answer teaches again. Default DefaultForget.
	Forget time.Duration
}

// DefaultForget is the default AdaptiveOptions.Forget.
const DefaultForget = 10 * time.Minute

func (a AdaptiveOptions) withDefaults() (AdaptiveOptions, error) {
	bad := func(field string, v float64, why string) error {
		return fmt.Errorf("%w: Adaptive.%s %v %s", ErrInvalidOptions, field, v, why)
	}
	ok := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 && v <= maxRate }
	switch {
	case !ok(a.Ceiling):
		return a, bad("Ceiling", a.Ceiling, fmt.Sprintf("is not a rate between 0 and %g per second", float64(maxRate)))
	case !ok(a.Initial) && !math.IsInf(a.Initial, 1):
		return a, bad("Initial", a.Initial, fmt.Sprintf("is not a rate between 0 and %g per second, nor +Inf", float64(maxRate)))
	case !ok(a.MinRate):
		return a, bad("MinRate", a.MinRate, fmt.Sprintf("is not a rate between 0 and %g per second", float64(maxRate)))
	case math.IsNaN(a.Beta) || a.Beta < 0 || a.Beta >= 1:
		return a, bad("Beta", a.Beta, "is not in (0, 1)")
	case math.IsNaN(a.C) || math.IsInf(a.C, 0) || a.C < 0:
		return a, bad("C", a.C, "is not a positive number")
	case a.Forget < 0:
		return a, fmt.Errorf("%w: Adaptive.Forget %v is negative", ErrInvalidOptions, a.Forget)
	}
	if a.Forget == 0 {
		a.Forget = DefaultForget
	}
	if a.MinRate == 0 {
		a.MinRate = DefaultMinRate
		if a.Ceiling > 0 {
			a.MinRate = min(a.MinRate, a.Ceiling)
		}
	}
	if a.Beta == 0 {
		a.Beta = DefaultBeta
	}
	if a.C == 0 {
		a.C = DefaultC
	}
	if a.Ceiling > 0 && a.MinRate > a.Ceiling {
		return a, bad("MinRate", a.MinRate, fmt.Sprintf("is above Ceiling %v", a.Ceiling))
	}
	if a.Ceiling > 0 && a.Initial > a.Ceiling && !math.IsInf(a.Initial, 1) {
		a.Initial = a.Ceiling
	}
	return a, nil
}

// maxRate bounds every rate: a Limit's Quota must stay below about 4.5e9.
const maxRate = 1e9

// Feedback is what one answer of the target says about its limit.
type Feedback struct {
	// Sent is when the request was released; Received when its answer came.
	// Zero Received means now.
	Sent, Received time.Time
	// Throttled reports an answer that refused the request for its rate:
	// 429, or 503 with Retry-After.
	Throttled bool
	// Policies and Limits are the answer's RateLimit-Policy and RateLimit
	// members, parsed by ratelimitheader.
	Policies []ratelimitheader.Policy
	Limits   []ratelimitheader.Limit
	// Legacy holds the X-RateLimit-* fields when HasLegacy.
	Legacy    ratelimitheader.Legacy
	HasLegacy bool
	// Hold, when not zero, is an instant before which nothing is to be
	// released (a Retry-After), applied in the same step as the rest, so
	// no grant slips in between (see Pacer.HoldUntil).
	Hold time.Time
}

// Feedback teaches the Pacer from one answer of the target: it learns the
// limits the answer states, raises the slow start's rate on an unthrottled
// answer, and adapts its rate to a throttled answer (see AdaptiveOptions).
// Answers to requests released before the last decrease count as throttled
// but do not decrease the rate again: they were sent at the rate already
// corrected. Safe for concurrent use.
func (p *Pacer) Feedback(f Feedback) {
	if f.Received.IsZero() {
		f.Received = time.Now()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The gates step at the time of this call: an answer reported late
	// must not make them refill twice.
	now := p.micros(time.Now())
	changed := p.learnLocked(f, now)
	if f.Hold.After(p.holdUntil) {
		p.holdLocked(f.Hold)
		changed = true
	}
	if f.Throttled {
		p.stats.Throttled++
		for _, g := range p.learned {
			g.exact = true
		}
		if w, ok := p.probe.end(f.Sent, p.adaptiveRate()); ok {
			// The first throttle of the slow start: the rate its
			// request went at is the one that was too fast.
			_ = p.setAdaptive(p.ctrl.decrease(w, f.Received, !f.Hold.IsZero()), now)
			changed = true
		} else if f.Sent.IsZero() || !f.Sent.Before(p.ctrl.decreasedAt) {
			w := p.throttledRateLocked(f.Received)
			_ = p.setAdaptive(p.ctrl.decrease(w, f.Received, !f.Hold.IsZero()), now)
			changed = true
		}
	} else if p.probe.on {
		if r, ok := p.probe.grow(f, p.adaptiveRate(), p.adaptiveHeld); ok {
			_ = p.setAdaptive(r, now)
			changed = true
		}
	} else if p.adaptive != nil && !p.ctrl.lastFail.IsZero() {
		// (Before the first throttle, the rate stays at Initial.) The
		// climb is capped at twice the measured rate (a rate the client
		// does not use means nothing), but never below where it
		// restarted: a hold or an idle spell lowers the measure without
		// saying anything about the target.
		r := p.ctrl.at(f.Received)
		if m := p.meter.rate(f.Received); m > 0 {
			r = min(r, max(2*m, p.ctrl.epoch))
		}
		if cur := p.adaptiveRate(); math.Abs(r-cur) > cur/100 {
			_ = p.setAdaptive(r, now)
			changed = true
		}
	}
	if changed {
		p.pumpLocked()
	}
}

// throttledRateLocked is the rate a throttle answered at t was sent at: the
// adaptive rate, when it has held work back since it was set (the client
// sent as fast as it allowed); otherwise the rate measured over the last
// second, or the adaptive rate if lower. (The measure alone lags a rate
// that just changed: at the end of a slow start it is about a third of the
// rate reached.) With nothing measured yet, the floor, MinRate.
func (p *Pacer) throttledRateLocked(t time.Time) float64 {
	if p.adaptive != nil && p.adaptiveHeld {
		return p.adaptiveRate()
	}
	w := p.meter.rate(t)
	if p.adaptive != nil {
		w = min(w, p.adaptiveRate())
	}
	if w <= 0 {
		// Nothing measured yet (the very first requests): start from the
		// floor and climb.
		w = p.aopts.MinRate
	}
	return w
}

// learnLocked applies what f states of the target's limits and reports
// whether anything changed.
func (p *Pacer) learnLocked(f Feedback, now int64) bool {
	changed := false
	var fresh []string // the policies learned by this answer
	for _, pol := range f.Policies {
		if (pol.Unit != "" && pol.Unit != "requests") || pol.Quota <= 0 || pol.Window <= 0 {
			continue // a unit the Pacer does not count, or nothing to learn
		}
		l := sluice.Limit{Name: learnedName(pol.Name), Quota: float64(pol.Quota), Window: pol.Window}
		if l.Quota > maxRate*l.Window.Seconds() || l.Window > sluice.MaxWindow {
			continue
		}
		g := p.learned[pol.Name]
		if g != nil && g.params.Limit == l {
			g.seen = f.Received
			continue
		}
		if g == nil {
			ng, err := newGate(l, now)
			if err != nil {
				continue
			}
			p.learned[pol.Name] = ng
			p.order = append(p.order, pol.Name)
		} else if err := g.retarget(l, now); err != nil {
			continue
		}
		p.learned[pol.Name].seen = f.Received
		p.stats.Learned++
		fresh = append(fresh, pol.Name)
		changed = true
	}
	if changed {
		if p.probe.on {
			// The target states its limit: no need to probe for it.
			p.probe.on = false
			p.adaptive = nil
		}
		p.respaceLocked(now)
		p.rebuildLocked()
	}
	for _, lim := range f.Limits {
		if lim.Remaining < 0 {
			continue
		}
		if g := p.learned[lim.Name]; g != nil {
			// r is written rounded down: the target has at least r and
			// less than r+1. A limit just learned starts from r. After
			// that, lowering to r would lose the fraction at every answer
			// of a client that keeps up with the limit (each says r=0);
			// lowering to just under r+1 loses nothing and still catches
			// another client spending the same quota — as long as the
			// target's count moves like the learned token bucket. Once
			// the target has throttled despite it (a window, whose count
			// drops in steps), r is taken as it is.
			left := int64(units.MaxAtoms)
			if lim.Remaining < units.MaxAtoms/units.PerCost-1 {
				left = (lim.Remaining+1)*units.PerCost - 1
				if g.exact || slices.Contains(fresh, lim.Name) {
					left = lim.Remaining * units.PerCost
				}
			}
			g.lower(left, now)
			changed = true
			continue
		}
		if lim.Remaining == 0 && lim.Reset > 0 {
			p.holdLocked(f.Received.Add(lim.Reset))
			changed = true
		}
	}
	if f.HasLegacy && f.Legacy.Remaining == 0 && f.Legacy.Reset > 0 {
		p.holdLocked(f.Received.Add(f.Legacy.Reset))
		changed = true
	}
	return changed
}

// learnedName is the Limit name of a learned policy (a policy name may hold
// any printable character; a Limit name may not).
func learnedName(policy string) string {
	const allowed = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/"
	b := []byte("learned:")
	for i := 0; i < len(policy) && len(b) < sluice.MaxNameLen; i++ {
		c := policy[i]
		if strings.IndexByte(allowed, c) < 0 {
			c = '_'
		}
		b = append(b, c)
	}
	return string(b)
}

// respaceLocked gives the fastest learned limit its spacing gate, one unit at
// a time (the target's burst is not known), and takes it from the others.
func (p *Pacer) respaceLocked(now int64) {
	var fastest *gate
	for _, name := range p.order {
		g := p.learned[name]
		if fastest == nil || g.params.Limit.Window < fastest.params.Limit.Window {
			fastest = g
		}
	}
	for _, name := range p.order {
		if g := p.learned[name]; g != fastest {
			g.spacedBy = nil
		}
	}
	if fastest == nil {
		return
	}
	s := spacingOf(fastest.params.Limit, 0, p.slice)
	switch {
	case s == nil:
		fastest.spacedBy = nil
	case fastest.spacedBy == nil:
		if g, err := newSpacingGate(*s, now); err == nil {
			fastest.spacedBy = g
		}
	case fastest.spacedBy.params.Limit != *s:
		if err := fastest.spacedBy.retarget(*s, now); err != nil {
			fastest.spacedBy = nil
		}
	}
}

func (p *Pacer) holdLocked(t time.Time) {
	if t.After(p.holdUntil) {
		p.holdUntil = t
		p.stats.Holds++
	}
}

// adaptiveRate is the adaptive gate's rate per second (+Inf when unlimited).
func (p *Pacer) adaptiveRate() float64 {
	if p.adaptive == nil {
		return math.Inf(1)
	}
	l := p.adaptive.params.Limit
	return l.Quota / l.Window.Seconds()
}

// setAdaptive sets the adaptive rate, within MinRate and Ceiling: a token
// bucket of the rate per second holding one unit, so that it releases one
// unit every 1/rate, never a batch, and a larger cost is charged whole (see
// gate.charged). The rate keeps four significant digits, fewer if the
// algorithms' exact arithmetic needs it. The rate is new: it has held no
// work back yet.
func (p *Pacer) setAdaptive(rate float64, now int64) error {
	p.adaptiveHeld = false
	rate = max(rate, p.aopts.MinRate)
	if p.aopts.Ceiling > 0 {
		rate = min(rate, p.aopts.Ceiling)
	}
	rate = min(rate, maxRate)
	var err error
	for digits := 4; digits > 0; digits-- {
		r := significant(rate, digits)
		l := sluice.Limit{Name: adaptiveName, Quota: r, Window: time.Second, Burst: 1}
		if p.adaptive == nil {
			var g *gate
			if g, err = newGate(l, now); err == nil {
				g.charged = true
				p.adaptive = g
				p.rebuildLocked()
				return nil
			}
		} else if err = p.adaptive.retarget(l, now); err == nil {
			return nil
		}
	}
	return err
}

// significant rounds x to n significant digits (and to the resolution of one
// millionth).
func significant(x float64, n int) float64 {
	if x <= 0 {
		return x
	}
	scale := math.Pow(10, float64(n-1)-math.Floor(math.Log10(x)))
	r := math.Round(x*scale) / scale
	return max(math.Round(r*units.PerCost)/units.PerCost, 1.0/units.PerCost)
}

// forgetLocked drops the learned limits no answer has stated for Forget, and
// returns when the next one will be forgotten (zero: none left). What was
// forgotten is not let loose at once: the adaptive rate restarts from the
// slowest of them and climbs as CUBIC does, so the backlog goes out paced
// while the next answers teach again.
func (p *Pacer) forgetLocked(t time.Time) time.Time {
	var next time.Time
	slowest := math.Inf(1)
	kept := p.order[:0]
	for _, name := range p.order {
		g := p.learned[name]
		until := g.seen.Add(p.aopts.Forget)
		if t.Before(until) {
			kept = append(kept, name)
			if next.IsZero() || until.Before(next) {
				next = until
			}
			continue
		}
		l := g.params.Limit
		slowest = min(slowest, l.Quota/l.Window.Seconds())
		delete(p.learned, name)
	}
	if len(kept) < len(p.order) {
		p.order = kept
		p.stats.Forgotten++
		if p.adaptive == nil || p.adaptiveRate() > slowest {
			p.ctrl.restart(max(slowest, p.aopts.MinRate), t)
			_ = p.setAdaptive(slowest, p.micros(t))
		}
		p.respaceLocked(p.micros(t))
		p.rebuildLocked()
	}
	return next
}

// cubic is CUBIC's window function applied to a rate (RFC 9438 §4.2, as AWS's
// SDKs use it for request rates).
type cubic struct {
	beta, c     float64
	wmax, k     float64
	epoch       float64   // the rate the climb started from
	lastFail    time.Time // when the climb started (a decrease or a restart)
	decreasedAt time.Time // the last decrease
}

// decrease records a throttle at rate w, at t, and returns the new rate.
// A throttle that holds the Pacer (held: a Retry-After under HoldTarget)
// gets fast convergence (RFC 9438 §4.7): throttled below the previous Wmax,
// the limit has moved down (another client spends it too, or the last Wmax
// overshot), so Wmax is set lower still, at w × (1+β)/2, and the climb
// flattens below the rate that was throttled instead of at it — each
// throttle costs a hold of the whole Pacer, so throttles are worth avoiding
// at some cost in rate. A throttle that holds nothing costs one retry (a
// target that does not count refused requests, as nginx's limit_req, loses
// nothing by it), and the climb flattens at the rate that was throttled:
// there, fast convergence would keep the rate under the limit for most of
// each cycle.
func (c *cubic) decrease(w float64, t time.Time, held bool) float64 {
	epoch := w * c.beta
	if held && w < c.wmax {
		c.wmax = w * (1 + c.beta) / 2
	} else {
		c.wmax = w
	}
	c.k = math.Cbrt((c.wmax - epoch) / c.c)
	c.epoch, c.lastFail, c.decreasedAt = epoch, t, t
	return epoch
}

// restart starts a climb from rate at t, as if rate had just been set by a
// throttle at rate (no decrease): CUBIC's convex probing from there.
func (c *cubic) restart(rate float64, t time.Time) {
	c.wmax, c.epoch, c.k, c.lastFail = rate, rate, 0, t
}

// at is the rate t after the last throttle.
func (c *cubic) at(t time.Time) float64 {
	d := t.Sub(c.lastFail).Seconds() - c.k
	return c.c*d*d*d + c.wmax
}

// rateMeter measures a rate over the last second, in ten buckets.
type rateMeter struct {
	start   time.Time // first record
	buckets [10]float64
	last    int64 // bucket index (100 ms since the epoch) of the latest record
}

const meterBucket = 100 * time.Millisecond

func (m *rateMeter) advance(t time.Time) int64 {
	i := t.UnixNano() / int64(meterBucket)
	if i > m.last {
		for j := m.last + 1; j <= i && j <= m.last+int64(len(m.buckets)); j++ {
			m.buckets[j%int64(len(m.buckets))] = 0
		}
		m.last = i
	}
	return i
}

func (m *rateMeter) add(t time.Time, cost float64) {
	if m.start.IsZero() {
		m.start = t
		m.last = t.UnixNano() / int64(meterBucket)
	}
	i := m.advance(t)
	if i < m.last-int64(len(m.buckets))+1 {
		return // older than the window (a clock step back)
	}
	m.buckets[i%int64(len(m.buckets))] += cost
}

// rate is the cost recorded in the buckets of the last second, divided by
// the time they cover up to t (from the first record, when that is more
// recent; at least one bucket), per second.
func (m *rateMeter) rate(t time.Time) float64 {
	if m.start.IsZero() {
		return 0
	}
	i := m.advance(t)
	var sum float64
	for _, b := range m.buckets {
		sum += b
	}
	from := time.Unix(0, (i-int64(len(m.buckets))+1)*int64(meterBucket))
	if m.start.After(from) {
		from = m.start
	}
	return sum / max(t.Sub(from), meterBucket).Seconds()
}

// probe is the slow start of the adaptive rate (see AdaptiveOptions): while
// the target's limit is unknown, the rate starts modest with the first
// request and doubles every round until the target throttles or states its
// limit.
type probe struct {
	on       bool      // probing: the Pacer has no limit to start from
	begun    bool      // the first request has set the rate
	raisedAt time.Time // when the rate was last set
	before   float64   // the rate before raisedAt
}

// begin sets the first rate of the slow start at t: one cost unit per slice.
// It reports false when there is nothing to begin (not probing, or begun).
func (pr *probe) begin(t time.Time, slice time.Duration) (float64, bool) {
	if !pr.on || pr.begun {
		return 0, false
	}
	pr.begun, pr.raisedAt = true, t
	return 1 / slice.Seconds(), true
}

// probeDoubling is how fast the slow start raises its rate: it doubles every
// probeDoubling of answers that show the target took it, and at most once
// per round trip. From 5 per second (one unit per default slice), against
// a target that answers at once, it passes 50 per second after 0.37 s (the
// first answers come one per interval of the rate: 200, 100, 50 ms) and
// 1,000 after about 0.6 s. Doubling every slice (200 ms) lost 0.2 s more
// against nginx's 50 per second; doubling every round trip is a blast on a
// fast network (docs/BENCHMARKS.md).
const probeDoubling = 50 * time.Millisecond

// grow raises rate when the unthrottled answer f shows that the target took
// it and that the client wanted more: f's request was sent at the current
// rate (after it was set: so at most once per round trip), and work waited
// for the rate since (waited). The rate grows by 2^(d/probeDoubling), d the
// time since it was set, at most a doubling.
func (pr *probe) grow(f Feedback, rate float64, waited bool) (float64, bool) {
	d := min(f.Received.Sub(pr.raisedAt), probeDoubling)
	if !pr.begun || f.Sent.Before(pr.raisedAt) || !waited || d <= 0 {
		return 0, false
	}
	pr.before, pr.raisedAt = rate, f.Received
	return rate * math.Exp2(float64(d)/float64(probeDoubling)), true
}

// end stops the slow start on the first throttle and returns the rate the
// throttled request, sent at sent, went at — rate, or the one before it;
// false when it was not probing (or had not begun: nothing was sent at a
// rate of its own).
func (pr *probe) end(sent time.Time, rate float64) (float64, bool) {
	if !pr.on {
		return 0, false
	}
	pr.on = false
	if !pr.begun {
		return 0, false
	}
	if !sent.IsZero() && sent.Before(pr.raisedAt) && pr.before > 0 {
		return pr.before, true
	}
	return rate, true
}
