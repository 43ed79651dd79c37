package jsqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/queue"
)

// stale is how old a finished record left in the status bucket must be
// before Stats takes it for the leftover of a process that died.
const stale = 10 * time.Second

// Get returns what the queue knows of one task; see [queue.Queue.Get].
// The payload of a succeeded or cancelled task is not kept (its message
// left the work queue); a dead task's is read from the dead-letter
// stream.
func (q *Queue) Get(ctx context.Context, id string) (queue.Info, error) {
	ctx, cancel, err := q.begin(ctx, "get", 1)
	if err != nil {
		return queue.Info{}, err
	}
	defer cancel()
	if !validID(id) {
		return queue.Info{}, fmt.Errorf("jsqueue: get: task %q: %w", id, queue.ErrNotFound)
	}
	e, err := q.status.Get(ctx, id)
	switch {
	case err == nil:
		r, err := decode(e.Value())
		if err != nil {
			return queue.Info{}, wrap("get", err)
		}
		info := r.info(id, time.Now())
		if !r.finished() {
			m, err := q.tasks[r.Priority].GetLastMsgForSubject(ctx, q.taskSubject(r.Priority, id))
			if err != nil && !notFound(err) {
				return queue.Info{}, wrap("get: read the payload", err)
			}
			if err == nil {
				info.Payload = m.Data
			}
			return info, nil
		}
		return q.withDeadPayload(ctx, info)
	case notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted):
		r, _, err := q.lookupFinished(ctx, id)
		if err != nil {
			return queue.Info{}, wrap("get", err)
		}
		return q.withDeadPayload(ctx, r.info(id, time.Now()))
	default:
		return queue.Info{}, wrap("get", err)
	}
}

func (q *Queue) withDeadPayload(ctx context.Context, info queue.Info) (queue.Info, error) {
	if info.State != queue.Dead {
		return info, nil
	}
	m, err := q.deadLetter.GetLastMsgForSubject(ctx, q.deadSubject(info.ID))
	if err != nil && !notFound(err) {
		return queue.Info{}, wrap("get: read the dead letter", err)
	}
	if err == nil {
		info.Payload = m.Data
	}
	return info, nil
}

// lookupFinished finds a task's record in the buckets of the final
// states, or says queue.ErrNotFound.
func (q *Queue) lookupFinished(ctx context.Context, id string) (record, uint64, error) {
	for _, state := range []string{stSucceeded, stDead, stCancelled} {
		e, err := q.finished[state].Get(ctx, id)
		if notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return record{}, 0, err
		}
		r, err := decode(e.Value())
		return r, e.Revision(), err
	}
	return record{}, 0, fmt.Errorf("task %s: %w", id, queue.ErrNotFound)
}

// leftover is a record in the status bucket that a process that died
// left for Stats to finish: a finished task's (its move to the bucket of
// its state), or a revived task's (its setup, see completeRevival).
type leftover struct {
	id   string
	r    record
	rev  uint64
	data []byte
}

// scan reads every record of the status bucket into s's live counts, and
// returns the leftovers older than stale found there.
func (q *Queue) scan(ctx context.Context, s *queue.Stats) ([]leftover, error) {
	now := time.Now()
	oldest := now
	w, err := q.status.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, wrap("stats: read the records", err)
	}
	defer func() {
		// Stop, then drain: the watcher's callback may be blocked on a
		// full channel, holding the lock its close needs.
		_ = w.Stop()
		for range w.Updates() {
		}
	}()
	var left []leftover
	for e := range w.Updates() {
		if e == nil {
			break // every record read
		}
		r, err := decode(e.Value())
		if err != nil {
			return nil, wrap("stats", err)
		}
		switch r.state(now) {
		case queue.Queued:
			s.Ready++
			if at := r.readyAt(); at.Before(oldest) {
				oldest = at
			}
		case queue.Scheduled:
			s.Scheduled++
		case queue.Leased:
			s.Leased++
		default:
			if now.Sub(r.Finished) > stale {
				left = append(left, leftover{e.Key(), r, e.Revision(), e.Value()})
			}
		}
		if !r.finished() && !r.Reviving.IsZero() && now.Sub(r.Reviving) > stale {
			left = append(left, leftover{e.Key(), r, e.Revision(), e.Value()})
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, wrap("stats: read the records", err)
	}
	s.Depth = s.Ready + s.Scheduled + s.Leased
	s.OldestReady = now.Sub(oldest)
	return left, nil
}

// countFinished sets s's Succeeded, Dead and Cancelled to the number of
// records in each finished bucket.
func (q *Queue) countFinished(ctx context.Context, s *queue.Stats) error {
	for _, c := range []struct {
		n     *int64
		state string
	}{{&s.Succeeded, stSucceeded}, {&s.Dead, stDead}, {&s.Cancelled, stCancelled}} {
		st, err := q.finished[c.state].Status(ctx)
		if err != nil {
			return fmt.Errorf("jsqueue: stats: count the %s tasks: %w", c.state, err)
		}
		*c.n = int64(st.Values())
	}
	return nil
}

// Stats returns the queue's counts; see the package doc (Stats) for what
// each costs and how exact it is.
func (q *Queue) Stats(ctx context.Context) (queue.Stats, error) {
	ctx, cancel, err := q.begin(ctx, "stats", 4)
	if err != nil {
		return queue.Stats{}, err
	}
	defer cancel()
	s := queue.Stats{Durability: q.durability}
	var fin queue.Stats // the finished counts, read while the records are
	counted := make(chan error, 1)
	go func() { counted <- q.countFinished(ctx, &fin) }()
	left, err := q.scan(ctx, &s)
	if cerr := <-counted; err == nil {
		err = cerr
	}
	if err != nil {
		return queue.Stats{}, err
	}
	if len(left) > 0 {
		// Records a process that died left behind: finish their moves
		// and revivals, then count the finished tasks again.
		for _, l := range left {
			if l.r.finished() {
				q.settle(ctx, l.id, l.r, l.data, nil, false)
			} else {
				q.finishRevival(ctx, l.id, l.rev, l.r)
			}
		}
		if err := q.countFinished(ctx, &fin); err != nil {
			return queue.Stats{}, err
		}
	}
	s.Succeeded, s.Dead, s.Cancelled = fin.Succeeded, fin.Dead, fin.Cancelled
	return s, nil
}
