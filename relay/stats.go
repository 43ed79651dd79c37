package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/queue"
)

// TaskInfo is what the relay knows of one task.
type TaskInfo struct {
	ID       string
	Queue    string
	State    queue.State
	Key      string
	Priority int
	Cost     float64
	// Attempts counts the deliveries that could fail so far; MaxAttempts
	// their bound.
	Attempts, MaxAttempts int
	Enqueued, ReadyAt     time.Time
	Deadline, Finished    time.Time
	// Outcome is the last reason: a retry's ("503 Service Unavailable"),
	// the dead letter's, or "cancelled".
	Outcome string
	// Method and URL are the request's (the URL resolved on the origin).
	Method, URL string
	// Answer is the kept answer of a succeeded task, nil otherwise.
	Answer *Answer
}

func (l *lane) taskInfo(info queue.Info) TaskInfo {
	ti := TaskInfo{
		ID: l.name + "." + info.ID, Queue: l.name, State: info.State, Key: info.Key,
		Priority: info.Priority, Cost: info.Cost, Attempts: info.Attempts, MaxAttempts: info.MaxAttempts,
		Enqueued: info.Enqueued, ReadyAt: info.ReadyAt, Deadline: info.Deadline, Finished: info.Finished,
		Outcome: info.Outcome,
	}
	var s stored
	if len(info.Payload) > 0 && json.Unmarshal(info.Payload, &s) == nil {
		ti.Method, ti.URL = s.Method, l.target.origin.String()+s.Path
	}
	if info.State == queue.Succeeded && len(info.Result) > 0 {
		var a Answer
		if json.Unmarshal(info.Result, &a) == nil {
			ti.Answer = &a
		}
	}
	return ti
}

// QueueStats are one queue's figures at one instant: its backlog, what its
// target allows, and when the backlog will be done.
type QueueStats struct {
	Queue, Target string
	Paused        bool
	// Depth is every task not finished: Ready + Scheduled + InFlight.
	Depth, Ready, Scheduled, InFlight int64
	Succeeded, Dead, Cancelled        int64
	// OldestAge is how long the longest-waiting ready task has waited.
	OldestAge time.Duration
	// EffectiveRate is the cost released per second over the last five
	// seconds.
	EffectiveRate float64
	// Limit is the rate the target's work is released at now, in cost per
	// second: the fastest configured limit's, or a lower rate learned or
	// adapted from the target's answers (+Inf when nothing is known yet);
	// a slower limit with a long window (per day) counts in the ETA once
	// its capacity would be spent. LimitSource says where it comes from:
	// "configuration", "api", "learned", "kept" (learned by an earlier
	// run and not restated yet), "adaptive" or "unknown".
	Limit       float64
	LimitSource string
	// Share is the part of Limit the queue may expect while the other
	// queues of its target keep their backlogs.
	Share float64
	// Delivered counts the deliveries sent since the relay started;
	// Throttled the 429s (and 503s with Retry-After) among them, Failed
	// the failed ones, DeadLettered the tasks dead-lettered.
	Delivered, Throttled, Failed, DeadLettered uint64
	// MeanWait is the mean time from ready to the send of a first
	// attempt (a task given back unsent — throttled, paused, stopped —
	// counts again when it is sent).
	MeanWait time.Duration
	// ETA is how long the backlog will take at Share; ETAKnown is false
	// when no rate is known yet.
	ETA      time.Duration
	ETAKnown bool
	// Durability says what an accepted task survives.
	Durability string
	// At is when the backend's counts were read.
	At time.Time
	// History holds a sample every 5 s over the last 10 minutes, oldest
	// first.
	History []Sample
}

// Sample is one point of a queue's history.
type Sample struct {
	At            time.Time
	EffectiveRate float64
	Limit         float64
	Depth         int64
}

const (
	sampleEvery = 5 * time.Second
	historyLen  = 120
	statsMaxAge = time.Second
)

// Stats returns a queue's figures. The backend's counts are read at most
// once a second whatever the callers (some backends count by walking their
// records), so figures may be up to a second old; At says when.
func (r *Relay) Stats(ctx context.Context, queueName string) (QueueStats, error) {
	if r.closed.Load() {
		return QueueStats{}, ErrClosed
	}
	l, err := r.lane(queueName)
	if err != nil {
		return QueueStats{}, err
	}
	qs, at, err := l.backendStats(ctx)
	if err != nil {
		return QueueStats{}, err
	}
	t := l.target
	p, _, _, cfg := t.current()
	ps := p.Stats()
	now := time.Now()
	s := QueueStats{
		Queue: l.name, Target: t.name, Paused: l.paused.Load(),
		Depth: qs.Depth, Ready: qs.Ready, Scheduled: qs.Scheduled, InFlight: qs.Leased,
		Succeeded: qs.Succeeded, Dead: qs.Dead, Cancelled: qs.Cancelled,
		OldestAge: qs.OldestReady, EffectiveRate: l.meter.over(now, meterBuckets),
		Limit: releaseRate(ps, cfg, 0), LimitSource: t.sourceOf(ps, cfg),
		Delivered: l.delivered.Load(), Throttled: l.throttled.Load(), Failed: l.failed.Load(), DeadLettered: l.dead.Load(),
		Durability: qs.Durability, At: at,
	}
	if n := l.waitN.Load(); n > 0 {
		s.MeanWait = time.Duration(l.waitSum.Load() / int64(n))
	}
	s.Limit = releaseRate(ps, cfg, s.EffectiveRate)
	s.Share = l.expectedShare(s.Limit, s.EffectiveRate)
	if s.Share > 0 {
		s.ETAKnown = true // (a paused queue's share is 0: no ETA)
		s.ETA = drainTime(float64(qs.Depth), s.Share, s.Limit, cfg.Limits)
	} else if qs.Depth == 0 && !s.Paused {
		s.ETAKnown = true
	}
	l.statsMu.Lock()
	s.History = append([]Sample(nil), l.history...)
	l.statsMu.Unlock()
	return s, nil
}

// backendStats reads the backend's counts, at most once per statsMaxAge.
func (l *lane) backendStats(ctx context.Context) (queue.Stats, time.Time, error) {
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	if !l.statsAt.IsZero() && time.Since(l.statsAt) < statsMaxAge {
		return l.stats, l.statsAt, l.statsErr
	}
	// Not the caller's context: one caller that goes away must not make
	// the next second's callers fail.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s, err := l.q.Stats(bctx)
	l.statsAt = time.Now()
	if err != nil {
		l.statsErr = l.queueError(err)
		return queue.Stats{}, l.statsAt, l.statsErr
	}
	l.stats, l.statsErr = s, nil
	return s, l.statsAt, nil
}

// expectedShare is the rate the queue may expect: the whole of the
// target's while it alone has a backlog, its weighted share (at least its
// reserved one) while others have one too; the measured rate when the
// target's is not known.
func (l *lane) expectedShare(rate, measured float64) float64 {
	if math.IsInf(rate, 0) || rate <= 0 {
		return measured
	}
	if l.paused.Load() {
		return 0
	}
	weight, reserved := l.share()
	sum, othersReserved := weight, 0.0
	for _, o := range l.target.lanes {
		if o == l || o.paused.Load() {
			continue
		}
		o.statsMu.Lock()
		busy := o.stats.Depth > 0
		o.statsMu.Unlock()
		if busy {
			w, r := o.share()
			sum += w
			othersReserved += r
		}
	}
	// The others' reservations come first; the rest is shared by weight.
	return rate * max(reserved, (1-othersReserved)*weight/sum)
}

// sourceOf says where the rate in use comes from.
func (t *target) sourceOf(ps pace.Stats, cfg Target) string {
	configured := configuredRate(cfg.Limits)
	switch {
	case math.IsInf(ps.Rate, 0):
		return "unknown"
	case len(cfg.Limits) == 0 && t.kept > 0 && ps.Learned == 0 && ps.Throttled == 0:
		return "kept"
	case configured > 0 && ps.Rate >= configured*(1-1e-9):
		if src := t.limitSource(); src != "" {
			return src
		}
		return "configuration"
	case ps.Throttled > 0 && ps.Learned == 0:
		return "adaptive"
	case ps.Learned > 0:
		return "learned"
	}
	return "adaptive"
}

// record appends a history sample.
func (l *lane) record(now time.Time) {
	p, _, _, cfg := l.target.current()
	rate := l.meter.over(now, meterBuckets)
	limit := releaseRate(p.Stats(), cfg, rate)
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	l.history = append(l.history, Sample{At: now, EffectiveRate: rate, Limit: limit, Depth: l.stats.Depth})
	if len(l.history) > historyLen {
		l.history = l.history[len(l.history)-historyLen:]
	}
}

// releaseRate is the rate the target's work is released at now, in cost
// per second: the fastest configured limit's (the Pacer spaces releases at
// it; a slower limit with a longer window — a quota per day — binds only
// once its capacity is spent, which drainTime counts), unless a rate
// learned or adapted from the target's answers is lower; +Inf when nothing
// is known. measured (the queue's effective rate) stands for an adaptive
// rate the Pacer does not report on its own, after throttled answers.
func releaseRate(ps pace.Stats, cfg Target, measured float64) float64 {
	r := paceRate(ps, cfg, measured)
	if cfg.Budget != nil {
		// A fleet's share: what this process holds now.
		r = min(r, cfg.Budget.Rate())
	}
	return r
}

// paceRate is releaseRate without a fleet Budget.
func paceRate(ps pace.Stats, cfg Target, measured float64) float64 {
	fastest := 0.0
	for _, lim := range cfg.Limits {
		fastest = max(fastest, lim.Quota/lim.Window.Seconds())
	}
	switch {
	case fastest == 0:
		return ps.Rate
	case ps.Rate < configuredRate(cfg.Limits)*(1-1e-9):
		return ps.Rate // a learned or adaptive rate under every configured one
	case ps.Throttled > 0 && measured > 0 && measured < fastest:
		return measured
	}
	return fastest
}

// drainTime is how long a backlog of depth (in tasks, each of cost about
// one) takes at share, and no less than what each configured limit allows
// past its capacity (assuming its quota unspent: the Pacer does not say
// what is left of a quota per day).
func drainTime(depth, share, release float64, limits []sluice.Limit) time.Duration {
	seconds := depth / share
	for _, lim := range limits {
		if over := depth - lim.Capacity(); over > 0 {
			// The queue's part of the limit, as of the release rate.
			rate := lim.Quota / lim.Window.Seconds() * share / release
			seconds = max(seconds, over/rate)
		}
	}
	return time.Duration(seconds * float64(time.Second))
}

// configuredRate is the slowest configured limit's rate, in cost per
// second; 0 when none.
func configuredRate(limits []sluice.Limit) float64 {
	rate := 0.0
	for _, lim := range limits {
		r := lim.Quota / lim.Window.Seconds()
		if rate == 0 || r < rate {
			rate = r
		}
	}
	return rate
}

func describeLimits(limits []sluice.Limit) string {
	if len(limits) == 0 {
		return "none (learned from the target)"
	}
	parts := make([]string, len(limits))
	for i, lim := range limits {
		parts[i] = fmt.Sprintf("%s %g per %s", lim.Name, lim.Quota, lim.Window)
	}
	return strings.Join(parts, ", ")
}
