package jsqueue

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/queue"
)

// tries is how often an operation reads a record again after a
// concurrent change made its revision-checked update fail.
const tries = 8

var errBusy = errors.New("the task's record changed eight times while it was updated")

// current reads the record of rc's task and checks that rc is its current
// lease: leased under rc.Token, not ended.
func (q *Queue) current(ctx context.Context, op string, rc queue.Receipt) (uint64, record, error) {
	if err := queue.CheckReceipt(rc); err != nil {
		return 0, record{}, fmt.Errorf("jsqueue: %s: %w", op, err)
	}
	lost := func(why string) error {
		return fmt.Errorf("jsqueue: %s: task %s %s: %w", op, rc.ID, why, queue.ErrLeaseLost)
	}
	if !validID(rc.ID) {
		return 0, record{}, lost("is not a task of this queue")
	}
	e, err := q.status.Get(ctx, rc.ID)
	if notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 0, record{}, lost("is finished or unknown")
	}
	if err != nil {
		return 0, record{}, wrap(op, err)
	}
	r, err := decode(e.Value())
	if err != nil {
		return 0, record{}, wrap(op, err)
	}
	switch {
	case r.State != stLeased || subtle.ConstantTimeCompare([]byte(r.Token), []byte(rc.Token)) != 1:
		return 0, record{}, lost("is not leased under this token")
	case !r.held(time.Now()):
		return 0, record{}, lost("had its lease end")
	}
	return e.Revision(), r, nil
}

// update runs step on the current lease of rc until its revision-checked
// write is not overtaken by another.
func (q *Queue) update(ctx context.Context, op string, rc queue.Receipt, step func(rev uint64, r record) error) error {
	for range tries {
		rev, r, err := q.current(ctx, op, rc)
		if err != nil {
			return err
		}
		err = step(rev, r)
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return wrap(op, err)
		}
	}
	return wrap(op, errBusy)
}

// Ack records the task as succeeded with result; see [queue.Queue.Ack].
func (q *Queue) Ack(ctx context.Context, rc queue.Receipt, result []byte) error {
	ctx, cancel, err := q.begin(ctx, "ack", 1)
	if err != nil {
		return err
	}
	defer cancel()
	if len(result) > q.o.MaxResult {
		return fmt.Errorf("jsqueue: ack: %w: result of %d bytes, more than the %d allowed", queue.ErrInvalid, len(result), q.o.MaxResult)
	}
	result = bytes.Clone(result)
	return q.update(ctx, "ack", rc, func(rev uint64, r record) error {
		return q.finish(ctx, rc.ID, rev, r, stSucceeded, r.Outcome, result, nil, false)
	})
}

// Extend makes the lease last visibility from now; see
// [queue.Queue.Extend].
func (q *Queue) Extend(ctx context.Context, rc queue.Receipt, visibility time.Duration) (time.Time, error) {
	ctx, cancel, err := q.begin(ctx, "extend", 1)
	if err != nil {
		return time.Time{}, err
	}
	defer cancel()
	if err := queue.CheckVisibility(visibility); err != nil {
		return time.Time{}, fmt.Errorf("jsqueue: extend: %w", err)
	}
	var until time.Time
	err = q.update(ctx, "extend", rc, func(rev uint64, r record) error {
		now := time.Now()
		was := r.Until
		r.Until = now.Add(visibility)
		data, err := r.encode()
		if err != nil {
			return err
		}
		if _, err := q.status.Update(ctx, rc.ID, data, rev); err != nil {
			return err
		}
		until = r.Until
		if until.Before(was) {
			// The message would come back at the old end: bring it forward.
			q.redeliver(ctx, rc.ID, r.Ack, visibility)
		}
		return nil
	})
	return until, err
}

// Retry puts the task back, ready at how.At; see [queue.Queue.Retry].
func (q *Queue) Retry(ctx context.Context, rc queue.Receipt, how queue.Retry) error {
	ctx, cancel, err := q.begin(ctx, "retry", 1)
	if err != nil {
		return err
	}
	defer cancel()
	reason := queue.Reason(how.Reason)
	return q.update(ctx, "retry", rc, func(rev uint64, r record) error {
		if !how.Throttled && r.Attempts >= r.MaxAttempts {
			return q.finish(ctx, rc.ID, rev, r, stDead, reason, nil, nil, false)
		}
		now := time.Now()
		at := now
		if how.At.After(now) {
			at = how.At
		}
		ack := r.Ack
		r.State, r.ReadyAt, r.Outcome, r.Token, r.Until = stWaiting, at, reason, "", time.Time{}
		if how.Throttled {
			r.Attempts--
		}
		data, err := r.encode()
		if err != nil {
			return err
		}
		if _, err := q.status.Update(ctx, rc.ID, data, rev); err != nil {
			return err
		}
		q.redeliver(ctx, rc.ID, ack, at.Sub(now))
		return nil
	})
}

// DeadLetter records the task as dead with reason; see
// [queue.Queue.DeadLetter].
func (q *Queue) DeadLetter(ctx context.Context, rc queue.Receipt, reason string) error {
	ctx, cancel, err := q.begin(ctx, "dead letter", 1)
	if err != nil {
		return err
	}
	defer cancel()
	reason = queue.Reason(reason)
	return q.update(ctx, "dead letter", rc, func(rev uint64, r record) error {
		return q.finish(ctx, rc.ID, rev, r, stDead, reason, nil, nil, false)
	})
}

// Cancel records the task as cancelled; see [queue.Queue.Cancel]. A
// cancelled task that was never leased keeps its message until a Lease
// meets it and drops it.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	ctx, cancel, err := q.begin(ctx, "cancel", 1)
	if err != nil {
		return err
	}
	defer cancel()
	if !validID(id) {
		return fmt.Errorf("jsqueue: cancel: task %q: %w", id, queue.ErrNotFound)
	}
	for range tries {
		e, err := q.status.Get(ctx, id)
		if notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
			if _, _, err := q.lookupFinished(ctx, id); err != nil {
				return wrap("cancel", err)
			}
			return fmt.Errorf("jsqueue: cancel: task %s: %w", id, queue.ErrFinished)
		}
		if err != nil {
			return wrap("cancel", err)
		}
		r, err := decode(e.Value())
		if err != nil {
			return wrap("cancel", err)
		}
		if r.finished() {
			return fmt.Errorf("jsqueue: cancel: task %s: %w", id, queue.ErrFinished)
		}
		err = q.finish(ctx, id, e.Revision(), r, stCancelled, "cancelled", nil, nil, false)
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return wrap("cancel", err)
		}
	}
	return wrap("cancel", errBusy)
}

// redeliver asks the server to hand the task's message to a Lease again
// after delay, through the reply subject of its latest delivery. The
// record is written already: if this fails, the message comes back when
// the server's earlier delay ends, and Lease puts it back again until
// the record says it is ready.
func (q *Queue) redeliver(ctx context.Context, id, ack string, delay time.Duration) {
	if ack == "" {
		return
	}
	body := []byte("-NAK")
	if delay > 0 {
		body = []byte(`-NAK {"delay":` + strconv.FormatInt(int64(delay), 10) + `}`)
	}
	if _, err := q.nc.RequestWithContext(ctx, ack, body); err != nil {
		q.log.Warn("jsqueue: the task's message could not be rescheduled; it comes back at its earlier instant",
			"task", id, "error", err)
	}
}

// finish writes the task's final state with a revision-checked update of
// its record (the commit: a concurrent change makes it fail with
// ErrKeyRevisionMismatch), then moves the record and cleans up (settle).
// payload is the task's, when known (it is, when Lease dead-letters).
func (q *Queue) finish(ctx context.Context, id string, rev uint64, r record, state, outcome string, result, payload []byte, known bool) error {
	r.State, r.Finished, r.Outcome, r.Result = state, time.Now(), outcome, result
	r.Token, r.Until = "", time.Time{}
	data, err := r.encode()
	if err != nil {
		return err
	}
	if _, err := q.status.Update(ctx, id, data, rev); err != nil {
		return err
	}
	q.settle(ctx, id, r, data, payload, known)
	return nil
}

// settle moves a finished task's record to the bucket of its state,
// publishes its dead letter, and deletes its message. Each step can be
// done again (Stats does, for a record left behind by a process that
// died); a failure is logged, not returned: the task's state is written.
// The record leaves the status bucket last, once its copy and its dead
// letter are stored.
func (q *Queue) settle(ctx context.Context, id string, r record, data, payload []byte, known bool) {
	var mu sync.Mutex
	failed := false
	warn := func(step string, err error) {
		if err != nil && !notFound(err) {
			q.log.Warn("jsqueue: a finished task was not cleaned up; Stats finishes it later",
				"task", id, "step", step, "error", err)
			mu.Lock()
			failed = true
			mu.Unlock()
		}
	}
	steps := []func(){
		func() {
			_, err := q.finished[r.State].Put(ctx, id, data)
			warn("keep the record", err)
		},
		func() {
			if r.State == stDead {
				if err := q.publishDead(ctx, id, r, payload, known); err != nil {
					warn("publish the dead letter", err)
					return // keep the message: it holds the payload
				}
			}
			if r.Seq != 0 {
				warn("delete the message", q.tasks[r.Priority].DeleteMsg(ctx, r.Seq))
			}
		},
	}
	each(len(steps), len(steps), func(i int) { steps[i]() })
	if !failed {
		warn("remove the live record", q.statusLog.Purge(ctx, jetstream.WithPurgeSubject(q.statusSubject(id))))
	}
}

// publishDead publishes a dead task's payload (read from its message when
// not known) to the dead-letter stream.
func (q *Queue) publishDead(ctx context.Context, id string, r record, payload []byte, known bool) error {
	if !known {
		if r.Seq == 0 {
			return nil // never leased, and its message is not at hand
		}
		m, err := q.tasks[r.Priority].GetMsg(ctx, r.Seq)
		if notFound(err) {
			return nil // settled before
		}
		if err != nil {
			return err
		}
		payload = m.Data
	}
	died := strconv.FormatInt(r.Finished.UnixNano(), 10)
	m := &nats.Msg{Subject: q.deadSubject(id), Data: payload, Header: nats.Header{}}
	m.Header.Set(hdrReason, r.Outcome)
	m.Header.Set(hdrDied, died)
	// One message ID per death: settle done again stores it once, and a
	// revived task that dies again within the duplicates window has its
	// new letter.
	_, err := q.js.PublishMsg(ctx, m, jetstream.WithMsgID(id+"-"+died))
	return err
}
