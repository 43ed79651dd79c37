package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/queue"
)

// A Relay accepts work for rate-limited targets into durable queues and
// delivers it at each target's pace. Create one with New, run its
// processors with Run, and stop them by ending Run's context; Close
// releases the queues. A Relay is safe for concurrent use.
type Relay struct {
	log      *slog.Logger
	logEvery time.Duration
	state    *stateFile

	targets []*target
	byName  map[string]*target
	lanes   []*lane
	byQueue map[string]*lane

	running atomic.Bool
	closed  atomic.Bool
	closeMu sync.Mutex
}

// Accepted is what Enqueue says of one request.
type Accepted struct {
	// ID names the task: "<queue>.<backend id>".
	ID string
	// Duplicate: a request with the same Key was already accepted within
	// the dedup window; ID is that task's and nothing new was stored.
	Duplicate bool
}

// New validates o, opens every queue's backend and returns the relay,
// which delivers nothing until Run.
func New(ctx context.Context, o Options) (*Relay, error) {
	if o.Open == nil {
		return nil, optionsError("Open is required: it opens each queue's backend")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	r := &Relay{
		log:      o.Logger,
		logEvery: o.LogEvery,
		byName:   map[string]*target{},
		byQueue:  map[string]*lane{},
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.logEvery <= 0 {
		r.logEvery = DefaultLogEvery
	}
	state, err := openState(o.StateFile)
	if err != nil {
		return nil, err
	}
	r.state = state
	for _, tc := range o.Targets {
		t, err := newTarget(tc, o.Transport, state, r.log)
		if err != nil {
			return nil, err
		}
		if r.byName[t.name] != nil {
			return nil, optionsError("two targets named %q", t.name)
		}
		r.byName[t.name] = t
		r.targets = append(r.targets, t)
	}
	reserved := map[string]float64{}
	for _, qc := range o.Queues {
		qc, err := checkQueue(qc)
		if err != nil {
			return nil, err
		}
		if r.byQueue[qc.Name] != nil {
			return nil, optionsError("two queues named %q", qc.Name)
		}
		t := r.byName[qc.Target]
		if t == nil {
			return nil, optionsError("queue %s: no target is named %q", qc.Name, qc.Target)
		}
		reserved[t.name] += qc.Reserved
		if reserved[t.name] > 1+1e-9 {
			return nil, optionsError("target %s: the reserved shares of its queues sum to %.3g, more than 1", t.name, reserved[t.name])
		}
		r.byQueue[qc.Name] = &lane{name: qc.Name, target: t, fed: make(chan struct{}, 1), weight: qc.Weight, reserved: qc.Reserved, maxBody: qc.MaxBody, meter: newMeter()}
		r.lanes = append(r.lanes, r.byQueue[qc.Name])
	}
	for _, l := range r.lanes {
		q, err := o.Open(ctx, l.name)
		if err != nil {
			r.closeQueues()
			return nil, fmt.Errorf("relay: open queue %s: %w", l.name, err)
		}
		l.q = q
		l.maxAttempts = maxTaskAttempts
		l.backendOK.Store(true)
		if lim, ok := q.(interface{ Limits() (int, int) }); ok {
			maxPayload, maxResult := lim.Limits()
			l.capBody(maxPayload)
			l.target.capKeep(maxResult)
		} else {
			l.capBody(queue.DefaultMaxPayload)
			l.target.capKeep(queue.DefaultMaxResult)
		}
		l.paused.Store(state.paused(l.name))
		l.target.lanes = append(l.target.lanes, l)
	}
	for _, t := range r.targets {
		if len(t.lanes) == 0 {
			r.log.Warn("relay: a target no queue feeds", "target", t.name)
		}
	}
	return r, nil
}

// lane returns the queue named name.
func (r *Relay) lane(name string) (*lane, error) {
	l := r.byQueue[name]
	if l == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoQueue, name)
	}
	return l, nil
}

// Queues returns the relay's queue names, in configuration order.
func (r *Relay) Queues() []string {
	names := make([]string, len(r.lanes))
	for i, l := range r.lanes {
		names[i] = l.name
	}
	return names
}

// Targets returns the relay's target names, in configuration order.
func (r *Relay) Targets() []string {
	names := make([]string, len(r.targets))
	for i, t := range r.targets {
		names[i] = t.name
	}
	return names
}

// Enqueue accepts requests for the queue named queueName: it returns when
// they are durable, with each one's task ID in order. A batch is all or
// nothing: a request that is refused (a *RequestError naming it and its
// field) refuses the whole call and nothing is stored. A backend that
// cannot keep the work answers ErrUnavailable, and nothing was accepted.
func (r *Relay) Enqueue(ctx context.Context, queueName string, reqs ...Request) ([]Accepted, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	l, err := r.lane(queueName)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	now := time.Now()
	tasks := make([]queue.Task, len(reqs))
	for i, req := range reqs {
		if tasks[i], err = l.prepare(i, req, now); err != nil {
			return nil, err
		}
	}
	got, err := l.q.Enqueue(ctx, tasks...)
	if err != nil {
		return nil, l.queueError(err)
	}
	out := make([]Accepted, len(got))
	for i, e := range got {
		out[i] = Accepted{ID: l.name + "." + e.ID, Duplicate: e.Duplicate}
	}
	l.poke()
	return out, nil
}

// queueError maps a backend's error to the relay's.
func (l *lane) queueError(err error) error {
	var te *queue.TaskError
	switch {
	case errors.As(err, &te):
		kind := ErrInvalid
		switch {
		case errors.Is(err, queue.ErrKeyConflict):
			kind = ErrConflict
		case te.Field == "payload":
			kind = ErrTooLarge
		}
		return &RequestError{Index: te.Index, Field: te.Field, Reason: te.Reason, Kind: kind}
	case errors.Is(err, queue.ErrKeyConflict):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, queue.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, queue.ErrFinished), errors.Is(err, queue.ErrNotDead), errors.Is(err, queue.ErrDeadlinePassed):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, queue.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, queue.ErrClosed):
		return ErrClosed
	}
	return fmt.Errorf("%w: queue %s: %w", ErrUnavailable, l.name, err)
}

// split reads a task ID.
func (r *Relay) split(id string) (*lane, string, error) {
	name, backendID, ok := strings.Cut(id, ".")
	if !ok || backendID == "" || len(id) > 256 {
		return nil, "", fmt.Errorf("%w: task ID %q: the form is <queue>.<id>", ErrInvalid, id)
	}
	l := r.byQueue[name]
	if l == nil {
		return nil, "", fmt.Errorf("%w: task %q: no queue is named %q", ErrNotFound, id, name)
	}
	return l, backendID, nil
}

// Task returns what the relay knows of one task.
func (r *Relay) Task(ctx context.Context, id string) (TaskInfo, error) {
	if r.closed.Load() {
		return TaskInfo{}, ErrClosed
	}
	l, backendID, err := r.split(id)
	if err != nil {
		return TaskInfo{}, err
	}
	info, err := l.q.Get(ctx, backendID)
	if err != nil {
		return TaskInfo{}, l.queueError(err)
	}
	return l.taskInfo(info), nil
}

// Cancel cancels a task that is not finished: it is not delivered again
// (a delivery already in flight runs to its end, and its answer is not
// kept). ErrNotFound for an unknown ID, ErrConflict for a finished task.
func (r *Relay) Cancel(ctx context.Context, id string) error {
	if r.closed.Load() {
		return ErrClosed
	}
	l, backendID, err := r.split(id)
	if err != nil {
		return err
	}
	if err := l.q.Cancel(ctx, backendID); err != nil {
		return l.queueError(err)
	}
	return nil
}

// DeadLetters returns up to n dead tasks of a queue, oldest death first,
// after the task ID after ("" for the first page).
func (r *Relay) DeadLetters(ctx context.Context, queueName, after string, n int) ([]TaskInfo, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	l, err := r.lane(queueName)
	if err != nil {
		return nil, err
	}
	if n < 1 || n > queue.MaxList {
		return nil, fmt.Errorf("%w: a page of %d: from 1 to %d", ErrInvalid, n, queue.MaxList)
	}
	cursor := ""
	if after != "" {
		al, backendID, err := r.split(after)
		if err != nil {
			return nil, err
		}
		if al != l {
			return nil, fmt.Errorf("%w: cursor %q is a task of another queue", ErrInvalid, after)
		}
		cursor = backendID
	}
	infos, err := l.q.ListDead(ctx, cursor, n)
	if err != nil {
		return nil, l.queueError(err)
	}
	out := make([]TaskInfo, len(infos))
	for i, info := range infos {
		out[i] = l.taskInfo(info)
	}
	return out, nil
}

// Replay gives a dead task a new life: it is delivered again, its
// attempts counted from zero. ErrConflict when the task is not dead.
func (r *Relay) Replay(ctx context.Context, id string) error {
	if r.closed.Load() {
		return ErrClosed
	}
	l, backendID, err := r.split(id)
	if err != nil {
		return err
	}
	if err := l.q.Revive(ctx, backendID, time.Time{}); err != nil {
		return l.queueError(err)
	}
	l.poke()
	return nil
}

// ReplayAll replays every task of a queue that was dead when it was
// called and can be (one whose deadline has passed stays dead), and
// returns how many it replayed. A task that dies again while it runs is
// not replayed twice: the dead are listed in the order they died, and the
// walk stops at the first death after the call.
func (r *Relay) ReplayAll(ctx context.Context, queueName string) (int, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	l, err := r.lane(queueName)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	replayed, after := 0, ""
	for {
		page, err := l.q.ListDead(ctx, after, 500)
		if err != nil {
			return replayed, l.queueError(err)
		}
		if len(page) == 0 {
			return replayed, nil
		}
		for _, info := range page {
			if info.Finished.After(began) {
				return replayed, nil
			}
			after = info.ID
			switch err := l.q.Revive(ctx, info.ID, time.Time{}); {
			case err == nil:
				replayed++
			case errors.Is(err, queue.ErrNotDead), errors.Is(err, queue.ErrNotFound), errors.Is(err, queue.ErrDeadlinePassed):
				// replayed meanwhile, forgotten, or past its deadline
			default:
				return replayed, l.queueError(err)
			}
		}
		l.poke()
	}
}

// Pause stops a queue's deliveries (work already in flight ends; tasks
// taken out but not yet sent go back) until Resume. A queue's pause
// survives restarts when Options.StateFile is set. Enqueue still accepts.
func (r *Relay) Pause(queueName string) error { return r.setPaused(queueName, true) }

// Resume undoes Pause.
func (r *Relay) Resume(queueName string) error { return r.setPaused(queueName, false) }

func (r *Relay) setPaused(queueName string, paused bool) error {
	l, err := r.lane(queueName)
	if err != nil {
		return err
	}
	if l.paused.Swap(paused) != paused {
		r.log.Info("relay: queue "+map[bool]string{true: "paused", false: "resumed"}[paused], "queue", l.name)
	}
	if err := r.state.setPaused(l.name, paused); err != nil {
		return fmt.Errorf("%w: keep the pause: %w", ErrUnavailable, err)
	}
	l.poke()
	l.target.nudge()
	return nil
}

// SetLimits replaces a target's configured limits (none: learn them) from
// now on; work in flight is untouched. Kept across restarts when
// Options.StateFile is set, until the configuration's limits for that
// target change.
func (r *Relay) SetLimits(targetName string, limits []sluice.Limit) error {
	t := r.byName[targetName]
	if t == nil {
		return fmt.Errorf("%w: no target is named %q", ErrNoQueue, targetName)
	}
	cfg := t.config()
	cfg.Limits = limits
	if _, _, err := checkTarget(cfg); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(err.Error(), ErrOptions.Error()+": "))
	}
	if err := t.setLimits(limits, "api"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := r.state.setLimits(t.name, limits, t.fileLimits()); err != nil {
		return fmt.Errorf("%w: keep the limits: %w", ErrUnavailable, err)
	}
	return nil
}

// Reload applies a new configuration to the running relay: the targets'
// limits, retry policies, timeouts, breakers and allowances, the queues'
// weights and reserved shares. Work in flight is untouched. The same
// targets and queues must be named (adding or removing one needs a
// restart): otherwise nothing changes and the error says why.
func (r *Relay) Reload(o Options) error {
	if len(o.Targets) != len(r.targets) || len(o.Queues) != len(r.lanes) {
		return optionsError("the configuration adds or removes targets or queues: restart the relay for that")
	}
	targets := map[string]Target{}
	for _, tc := range o.Targets {
		checked, _, err := checkTarget(tc)
		if err != nil {
			return err
		}
		if r.byName[checked.Name] == nil {
			return optionsError("target %s is new: restart the relay to add it", checked.Name)
		}
		if old := r.byName[checked.Name].config(); old.Origin != checked.Origin {
			return optionsError("target %s: its origin changed: restart the relay for that", checked.Name)
		}
		targets[checked.Name] = checked
	}
	queues := map[string]Queue{}
	reserved := map[string]float64{}
	for _, qc := range o.Queues {
		checked, err := checkQueue(qc)
		if err != nil {
			return err
		}
		l := r.byQueue[checked.Name]
		if l == nil {
			return optionsError("queue %s is new: restart the relay to add it", checked.Name)
		}
		if checked.Target != l.target.name {
			return optionsError("queue %s: its target changed: restart the relay for that", checked.Name)
		}
		reserved[checked.Target] += checked.Reserved
		if reserved[checked.Target] > 1+1e-9 {
			return optionsError("target %s: the reserved shares of its queues sum to %.3g, more than 1", checked.Target, reserved[checked.Target])
		}
		queues[checked.Name] = checked
	}
	for name, tc := range targets {
		if err := r.byName[name].reconfigure(tc, r.state); err != nil {
			return err
		}
	}
	for name, qc := range queues {
		r.byQueue[name].reconfigure(qc)
	}
	return nil
}

// Run delivers work until ctx ends, then gives back the tasks taken out
// but not sent, waits for the deliveries in flight (each bounded by its
// target's Timeout), keeps what was learned, and returns nil. Only one
// Run at a time.
func (r *Relay) Run(ctx context.Context) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run is already running")
	}
	defer r.running.Store(false)
	var wg sync.WaitGroup
	for _, t := range r.targets {
		wg.Go(func() { t.run(ctx) })
		wg.Go(func() { t.summarise(ctx, r.logEvery) })
	}
	wg.Go(func() { r.sample(ctx) })
	wg.Wait()
	r.keepLearned()
	return nil
}

// sample records, every sampleEvery, each queue's rate and its target's
// limit for Stats' history, and keeps the learned rates every minute.
func (r *Relay) sample(ctx context.Context) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, l := range r.lanes {
				l.record(now)
			}
			if n++; n%12 == 0 {
				r.keepLearned()
			}
		}
	}
}

// keepLearned writes each target's learned rate to the state file.
func (r *Relay) keepLearned() {
	for _, t := range r.targets {
		if rate, ok := t.learnedRate(); ok {
			if err := r.state.setLearned(t.name, rate); err != nil {
				r.log.Warn("relay: cannot keep the learned rate", "target", t.name, "err", err)
				return
			}
		}
	}
}

// Close releases every queue's backend. Call it after Run has returned.
// Close is idempotent.
func (r *Relay) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed.Swap(true) {
		return nil
	}
	for _, t := range r.targets {
		t.close()
	}
	return r.closeQueues()
}

func (r *Relay) closeQueues() error {
	var errs []error
	for _, l := range r.lanes {
		if l.q != nil {
			errs = append(errs, l.q.Close())
		}
	}
	return errors.Join(errs...)
}

// keptHeaders are kept with every succeeded answer.
var keptHeaders = []string{"Content-Type", "Location"}

// httpClient builds a target's client: no redirect off the origin, the
// target's timeout on the whole exchange.
func httpClient(t *target, transport http.RoundTripper) *http.Client {
	// A redirect refused (off the origin, too many) ends the exchange
	// with the redirect itself as the answer: the task is dead-lettered
	// with its status, nothing is sent off the origin.
	origin := t.origin
	return &http.Client{Transport: transport, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if err := origin.CheckRedirect(req, via); err != nil {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// Limits returns a target's limits in force and where they come from:
// "configuration", "api", or "learned" when none is configured (the
// relay learns them from the target's answers).
func (r *Relay) Limits(targetName string) ([]sluice.Limit, string, error) {
	t := r.byName[targetName]
	if t == nil {
		return nil, "", fmt.Errorf("%w: no target is named %q", ErrNoQueue, targetName)
	}
	cfg := t.config()
	source := t.limitSource()
	if source == "" {
		source = "learned"
	}
	return slices.Clone(cfg.Limits), source, nil
}
