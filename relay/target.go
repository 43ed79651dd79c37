package relay

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/egress"
	fleet "github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/queue"
)

// pollEvery is how often a queue with nothing ready is asked again for
// work that did not come through this relay's Enqueue (another process's,
// a retry's instant, a not-before). Work enqueued here is seen at once.
const pollEvery = 50 * time.Millisecond

// maxLeaseBatch bounds one Lease call of the dispatcher.
const maxLeaseBatch = 1000

// A target is one rate-limited service and its dispatcher: the goroutine
// that takes work out of its queues a slice at a time, waits for the
// Pacer's grant for each task, and starts its delivery.
type target struct {
	name   string
	origin egress.Origin
	log    *slog.Logger
	wake   chan struct{}

	mu        sync.Mutex
	cfg       Target
	fileLims  []sluice.Limit // the configuration's limits, to tell an API change from a file change
	limSource string         // "configuration", "api", or "" when none is configured
	pacer     *pace.Pacer
	breaker   *pace.Breaker
	client    *http.Client
	transport http.RoundTripper // Options.Transport, or nil
	ownTrans  *http.Transport   // the egress transport built here (closed on close)
	keepMax   int               // the backend's result bound less room for the envelope
	maxResult int               // the backend's result bound
	kept      float64           // the rate the Pacer started at, kept from an earlier run (0: none)

	lanes []*lane // fixed after New

	inflight sync.WaitGroup
	closed   atomic.Bool // the relay was closed: the dispatcher stops
	// What the periodic summary counts since the last one (Stats counts
	// per queue, on the lanes).
	summary summaryCounts
}

func newTarget(tc Target, transport http.RoundTripper, state *stateFile, log *slog.Logger) (*target, error) {
	tc, origin, err := checkTarget(tc)
	if err != nil {
		return nil, err
	}
	t := &target{name: tc.Name, origin: origin, log: log, wake: make(chan struct{}, 1), transport: transport, keepMax: math.MaxInt}
	t.cfg = tc
	t.fileLims = slices.Clone(tc.Limits)
	limits, source := tc.Limits, "configuration"
	if kept, ok := state.limits(tc.Name, tc.Limits); ok {
		limits, source = kept, "api"
	}
	if len(limits) == 0 {
		source = ""
	}
	t.cfg.Limits, t.limSource = limits, source
	initial, _ := state.learned(tc.Name)
	if len(limits) > 0 {
		initial = 0
	}
	t.kept = initial
	if t.pacer, err = newPacer(t.cfg, initial); err != nil {
		return nil, optionsError("target %s: %v", tc.Name, err)
	}
	t.breaker, _ = pace.NewBreaker(tc.Breaker)
	t.buildClient()
	return t, nil
}

// newPacer builds a target's Pacer; initial, when positive, is the rate
// learned by an earlier run.
func newPacer(tc Target, initial float64) (*pace.Pacer, error) {
	o := pace.Options{Limits: tc.Limits, Slice: tc.Slice, MaxInFlight: tc.MaxInFlight}
	if initial > 0 && !math.IsInf(initial, 0) {
		o.Adaptive.Initial = initial
	}
	return pace.New(o)
}

// buildClient makes the target's HTTP client; t.mu held or t not shared.
func (t *target) buildClient() {
	rt := t.transport
	if rt == nil {
		if t.ownTrans != nil {
			t.ownTrans.CloseIdleConnections()
		}
		t.ownTrans = egress.Policy{Allow: t.cfg.Allow}.Transport(&net.Dialer{Timeout: min(t.cfg.Timeout, 10*time.Second)})
		t.ownTrans.MaxIdleConnsPerHost = t.cfg.MaxInFlight
		t.ownTrans.ResponseHeaderTimeout = t.cfg.Timeout
		rt = t.ownTrans
	}
	t.client = httpClient(t, rt)
}

func (t *target) config() Target {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg
}

func (t *target) fileLimits() []sluice.Limit {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fileLims
}

// current returns what a delivery or the dispatcher needs, at once.
func (t *target) current() (*pace.Pacer, *pace.Breaker, *http.Client, Target) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pacer, t.breaker, t.client, t.cfg
}

// capKeep lowers the kept body to fit the backend's result bound.
func (t *target) capKeep(maxResult int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.keepMax = min(t.keepMax, max(0, (maxResult-4<<10)*3/4)) // base64 in the result
	if t.maxResult == 0 || maxResult < t.maxResult {
		t.maxResult = maxResult
	}
	if t.cfg.KeepBody > t.keepMax {
		t.cfg.KeepBody = t.keepMax
	}
}

// setLimits swaps the Pacer for one with limits; the old one's waiters are
// refused (the dispatcher asks the new one) and its grants stand.
func (t *target) setLimits(limits []sluice.Limit, source string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cfg := t.cfg
	cfg.Limits = limits
	p, err := newPacer(cfg, 0)
	if err != nil {
		return err
	}
	old := t.pacer
	p.HoldUntil(old.Stats().HoldUntil) // a Retry-After outlives the limits' change
	t.cfg, t.pacer = cfg, p
	t.limSource = source
	if len(limits) == 0 {
		t.limSource = ""
	}
	old.Close()
	t.log.Info("relay: target limits changed", "target", t.name, "limits", describeLimits(limits), "by", source)
	return nil
}

// reconfigure applies a reloaded configuration.
func (t *target) reconfigure(tc Target, state *stateFile) error {
	t.mu.Lock()
	old := t.cfg
	fileChanged := !slices.Equal(t.fileLims, tc.Limits)
	tc.KeepBody = min(tc.KeepBody, t.keepMax)
	limits := old.Limits
	if fileChanged {
		limits = tc.Limits
		t.fileLims = slices.Clone(tc.Limits)
	}
	rebuild := fileChanged || old.Slice != tc.Slice || old.MaxInFlight != tc.MaxInFlight
	tc.Limits = limits
	t.cfg = tc
	if !equalBreaker(old.Breaker, tc.Breaker) {
		t.breaker, _ = pace.NewBreaker(tc.Breaker)
	}
	if !slices.Equal(old.Allow, tc.Allow) || old.Timeout != tc.Timeout || old.MaxInFlight != tc.MaxInFlight {
		t.buildClient()
	}
	t.mu.Unlock()
	if rebuild {
		source := "configuration"
		if !fileChanged {
			source = t.limitSource()
		}
		if err := t.setLimits(limits, source); err != nil {
			return err
		}
		if fileChanged {
			return state.setLimits(t.name, nil, tc.Limits) // the file wins over an earlier API change
		}
	}
	return nil
}

func equalBreaker(a, b pace.BreakerOptions) bool { return a == b }

func (t *target) limitSource() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.limSource
}

// learnedRate is the rate to keep for the next run, when no limit is
// configured: the limit the target stated (RateLimit-Policy, RateLimit,
// X-RateLimit-*). A rate CUBIC reached after 429s is not kept: a Pacer
// started at a rate holds it until the next throttle, and a rate taken
// just after a decrease would keep the relay below the target's limit for
// good; slow start finds it again in a second or two.
func (t *target) learnedRate() (float64, bool) {
	p, _, _, cfg := t.current()
	if len(cfg.Limits) > 0 {
		return 0, false
	}
	s := p.Stats()
	if s.Learned == 0 || s.Throttled > 0 {
		// Nothing stated by the target, or 429s since: the rate in use may
		// then be CUBIC's, under the stated limit.
		return 0, false
	}
	if math.IsInf(s.Rate, 0) || s.Rate <= 0 {
		return 0, false
	}
	return s.Rate, true
}

func (t *target) resultBound() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.maxResult == 0 {
		return queue.DefaultMaxResult
	}
	return t.maxResult
}

func (t *target) breakerNow() *pace.Breaker {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.breaker
}

// nudge wakes the dispatcher: work arrived, a queue resumed.
func (t *target) nudge() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *target) close() {
	t.closed.Store(true)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pacer.Close()
	if t.ownTrans != nil {
		t.ownTrans.CloseIdleConnections()
	}
}

// visibility is how long a lease of the dispatcher lasts: long enough to
// wait in the buffer for a few slices or a few releases of a slow limit
// (one per 36 s under 100 per hour), and then be delivered. A wait longer
// than that (a hold, an open breaker) gives the buffer back, and the
// dispatcher extends the lease of the task it waits for.
func visibility(p *pace.Pacer, cfg Target) time.Duration {
	v := cfg.Timeout + 4*cfg.Slice + 5*time.Second
	if rate := releaseRate(p.Stats(), cfg, 0); rate > 0 && !math.IsInf(rate, 0) {
		v += time.Duration(min(3/rate, 3600) * float64(time.Second))
	}
	return min(v, queue.MaxVisibility)
}

// run is the target's processors: one feeder per queue that takes work
// out of it ahead of time (never more than about two slices of the
// target's rate: memory follows the rate, never the backlog), and the
// dispatcher, which picks the queue whose task goes next, waits for the
// Pacer's grant, and starts the delivery. The dispatcher never waits for a
// backend: a slice's grant is not lost to a Lease call.
func (t *target) run(ctx context.Context) {
	var feeders sync.WaitGroup
	for _, l := range t.lanes {
		feeders.Go(func() { t.feed(ctx, l) })
	}
	t.dispatch(ctx)
	feeders.Wait()
	t.giveBackAll() // at once: a supervisor may not wait for the deliveries
	t.inflight.Wait()
}

func (t *target) dispatch(ctx context.Context) {
	idle := time.NewTimer(0)
	defer idle.Stop()
	for ctx.Err() == nil {
		pacer, breaker, _, cfg := t.current()
		if t.closed.Load() {
			return // the relay was closed under Run
		}
		if until, why := t.blocked(pacer, breaker); !until.IsZero() {
			// Nothing goes out before until: what waits in the buffers
			// goes back to the queues for then, spending no attempt,
			// rather than letting its leases run out.
			for _, l := range t.lanes {
				t.giveBackAt(l, why, until)
			}
			t.waitFor(ctx, idle, min(time.Until(until), time.Second))
			continue
		}
		l, lease, ok := t.pick(pacer)
		if !ok {
			t.waitFor(ctx, idle, pollEvery)
			continue
		}
		cost := queue.CostOf(lease.Task)
		res, err := t.wait(ctx, pacer, l, &lease, cost, cfg)
		switch {
		case ctx.Err() != nil:
			if res != nil {
				res.Cancel()
			}
			l.unshift(lease)
			return
		case errors.Is(err, queue.ErrLeaseLost):
			continue // cancelled or expired while it waited: not sent
		case errors.Is(err, sluice.ErrCostExceedsLimit), errors.Is(err, sluice.ErrInvalidCost):
			// A cost no limit can ever admit.
			t.finish(l, func(c context.Context) error {
				return l.q.DeadLetter(c, lease.Receipt, "cost "+formatCost(cost)+" exceeds the target's limit: "+err.Error())
			})
			l.dead.Add(1)
			continue
		case err != nil:
			// The limits changed (the Pacer was replaced), or the lease
			// could not be extended now: the task goes back to the head.
			l.unshift(lease)
			t.waitFor(ctx, idle, 10*time.Millisecond)
			continue
		}
		fence, err := t.spend(ctx, l, &lease, cost, pacer, cfg)
		if err != nil {
			res.Cancel()
			switch {
			case ctx.Err() != nil:
				l.unshift(lease)
				return
			case errors.Is(err, queue.ErrLeaseLost):
			case errors.Is(err, fleet.ErrCostTooLarge):
				t.finish(l, func(c context.Context) error {
					return l.q.DeadLetter(c, lease.Receipt, "cost "+formatCost(cost)+" exceeds the fleet budget: "+err.Error())
				})
				l.dead.Add(1)
			default:
				l.unshift(lease)
				t.waitFor(ctx, idle, 10*time.Millisecond)
			}
			continue
		}
		if l.paused.Load() {
			res.Cancel()
			l.unshift(lease)
			continue
		}
		if !lease.Deadline.IsZero() && !time.Now().Before(lease.Deadline) {
			// Its deadline passed while it waited: never sent, and not
			// the target's failure.
			res.Cancel()
			t.finish(l, func(c context.Context) error { return l.q.DeadLetter(c, lease.Receipt, queue.ReasonDeadline) })
			l.dead.Add(1)
			continue
		}
		if !t.leaseOutlasts(ctx, l, &lease, pacer, cfg) {
			res.Cancel()
			continue
		}
		l.charge(cost)
		t.inflight.Add(1)
		go func() {
			defer t.inflight.Done()
			t.deliver(l, lease, res, fence)
		}()
	}
}

// blocked says until when nothing may go to the target, and why: a hold
// (a Retry-After, a quota said to be spent) or an open breaker, when it is
// longer than a second away; zero otherwise.
func (t *target) blocked(p *pace.Pacer, b *pace.Breaker) (time.Time, string) {
	now := time.Now()
	if hold := p.Stats().HoldUntil; hold.After(now.Add(time.Second)) {
		return hold, "the target asked to wait (Retry-After)"
	}
	if b.State() == pace.BreakerOpen {
		return now.Add(time.Second), "the target is failing: circuit open"
	}
	return time.Time{}, ""
}

// wait waits for the Pacer to grant cost, extending the task's lease
// whenever it would not outlast the wait and the delivery. It returns
// queue.ErrLeaseLost when the lease is lost meanwhile (the task is not
// sent), or the Pacer's error.
func (t *target) wait(ctx context.Context, p *pace.Pacer, l *lane, lease *queue.Lease, cost float64, cfg Target) (*pace.Reservation, error) {
	res, err := p.Reserve(cost)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		margin := cfg.Timeout + 5*time.Second
		timer.Reset(max(time.Until(lease.Until)-margin, 0))
		select {
		case <-res.Ready():
			if err := res.Err(); err != nil {
				return nil, err
			}
			return res, nil
		case <-ctx.Done():
			res.Cancel()
			return nil, ctx.Err()
		case <-timer.C:
			until, err := l.q.Extend(ctx, lease.Receipt, visibility(p, cfg))
			if err != nil {
				res.Cancel()
				if errors.Is(err, queue.ErrLeaseLost) || errors.Is(err, queue.ErrFinished) {
					return nil, queue.ErrLeaseLost
				}
				return nil, err
			}
			lease.Until = until
		}
	}
}

// spend waits for the fleet's Budget, when the target has one, extending
// the task's lease whenever it would not outlast the wait and the
// delivery; it returns the fence to send, or queue.ErrLeaseLost when the
// lease is lost meanwhile, or the Budget's error.
func (t *target) spend(ctx context.Context, l *lane, lease *queue.Lease, cost float64, p *pace.Pacer, cfg Target) (string, error) {
	if cfg.Budget == nil {
		return "", nil
	}
	for {
		wctx, cancel := context.WithDeadline(ctx, lease.Until.Add(-(cfg.Timeout + 5*time.Second)))
		fence, err := cfg.Budget.Wait(wctx, cost)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return fence, err
		}
		until, err := l.q.Extend(ctx, lease.Receipt, visibility(p, cfg))
		if err != nil {
			if errors.Is(err, queue.ErrLeaseLost) || errors.Is(err, queue.ErrFinished) {
				return "", queue.ErrLeaseLost
			}
			return "", err
		}
		lease.Until = until
	}
}

// feed keeps a queue's buffer filled: when it holds half of what it
// should or less, it leases the rest; a queue with nothing ready is asked
// again after pollEvery, or at once when work is enqueued here.
func (t *target) feed(ctx context.Context, l *lane) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		pacer, _, _, cfg := t.current()
		if l.paused.Load() {
			t.giveBack(l, "queue paused")
			l.sleep(ctx, timer, pollEvery)
			continue
		}
		w := want(pacer, cfg)
		have := l.buffered()
		if have > w/2 {
			l.sleep(ctx, timer, pollEvery)
			continue
		}
		if until, _ := t.blocked(pacer, t.breakerNow()); !until.IsZero() {
			l.sleep(ctx, timer, min(time.Until(until), time.Second))
			continue
		}
		got, err := l.q.Lease(ctx, w-have, visibility(pacer, cfg))
		if err != nil {
			if ctx.Err() == nil {
				l.leaseFailed(t.log, err)
			}
			l.sleep(ctx, timer, time.Second)
			continue
		}
		l.leaseOK(t.log)
		if len(got) == 0 {
			l.sleep(ctx, timer, pollEvery)
			continue
		}
		l.push(got)
		t.nudge()
	}
}

// leaseOutlasts makes sure the lease outlasts the delivery about to start,
// extending it when it would not; false when the lease is lost (expired
// while it waited, cancelled): the task is not sent.
func (t *target) leaseOutlasts(ctx context.Context, l *lane, lease *queue.Lease, p *pace.Pacer, cfg Target) bool {
	if time.Until(lease.Until) > cfg.Timeout+2*time.Second {
		return true
	}
	until, err := l.q.Extend(ctx, lease.Receipt, visibility(p, cfg))
	if err != nil {
		if !errors.Is(err, queue.ErrLeaseLost) && !errors.Is(err, queue.ErrFinished) {
			// The backend did not answer: the task stays at the head.
			l.unshift(*lease)
			return false
		}
		return false
	}
	lease.Until = until
	return true
}

// waitFor waits for a nudge, d, or ctx's end.
func (t *target) waitFor(ctx context.Context, timer *time.Timer, d time.Duration) {
	timer.Reset(d)
	select {
	case <-ctx.Done():
	case <-t.wake:
	case <-timer.C:
	}
	timer.Stop()
}

// want is how many tasks a queue keeps taken out: two slices of the
// target's release rate (MaxInFlight when the rate is not known yet).
func want(p *pace.Pacer, cfg Target) int {
	rate := releaseRate(p.Stats(), cfg, 0)
	n := float64(cfg.MaxInFlight)
	if !math.IsInf(rate, 0) && rate > 0 {
		n = math.Ceil(2 * rate * cfg.Slice.Seconds())
	}
	return int(max(1, min(n, maxLeaseBatch)))
}

// pick chooses the queue whose head task goes next and takes that task
// out of its buffer: a queue under its reserved share first (the one
// furthest under it), then by weighted fair queueing (the smallest virtual
// time, advanced by cost ÷ weight; a queue that was idle starts at the
// smallest busy one's, so idleness earns no credit).
func (t *target) pick(p *pace.Pacer) (*lane, queue.Lease, bool) {
	cfg := t.config()
	rate := releaseRate(p.Stats(), cfg, 0)
	now := time.Now()
	var under, fair *lane
	underBy := 0.0
	var busy []*lane
	for _, l := range t.lanes {
		if l.paused.Load() || l.buffered() == 0 {
			l.idle = true
			continue
		}
		busy = append(busy, l)
	}
	for _, l := range busy {
		if l.idle {
			l.activate(busy)
			l.idle = false
		}
		_, reserved := l.share()
		if reserved > 0 && !math.IsInf(rate, 0) {
			if gap := reserved*rate - l.meter.rate(now); gap > 0 && gap/reserved > underBy {
				under, underBy = l, gap/reserved
			}
		}
		if fair == nil || l.vtime < fair.vtime {
			fair = l
		}
	}
	chosen := under
	if chosen == nil {
		chosen = fair
	}
	if chosen == nil {
		return nil, queue.Lease{}, false
	}
	lease, ok := chosen.shift()
	if !ok {
		return nil, queue.Lease{}, false
	}
	if chosen.buffered() <= want(p, cfg)/2 {
		chosen.poke()
	}
	return chosen, lease, true
}

// giveBackAll returns every task taken out and not sent: the relay stops.
func (t *target) giveBackAll() {
	for _, l := range t.lanes {
		t.giveBack(l, "the relay stopped before sending it")
	}
}

func (t *target) giveBack(l *lane, why string) { t.giveBackAt(l, why, time.Time{}) }

// giveBackAt returns a queue's buffered tasks, ready at at (zero: now),
// without spending their attempts: they were not sent.
func (t *target) giveBackAt(l *lane, why string, at time.Time) {
	leases := l.takeAll()
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, lease := range leases {
		// Throttled: not sent, so no attempt is spent.
		if err := l.q.Retry(ctx, lease.Receipt, queue.Retry{At: at, Reason: why, Throttled: true}); err != nil && !errors.Is(err, queue.ErrLeaseLost) && !errors.Is(err, queue.ErrFinished) {
			t.log.Warn("relay: cannot give a task back; it returns when its lease expires", "queue", l.name, "err", err)
			return
		}
	}
}

// finish records a task's outcome on the queue, outside Run's context (the
// relay may be stopping: an outcome known is worth keeping).
func (t *target) finish(l *lane, record func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := record(ctx); err != nil {
		if errors.Is(err, queue.ErrLeaseLost) || errors.Is(err, queue.ErrFinished) {
			return
		}
		t.log.Warn("relay: cannot record a delivery's outcome; the task is delivered again when its lease expires", "queue", l.name, "err", err)
	}
}
