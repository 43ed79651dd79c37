package jsqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/queue"
)

// hdrDied carries, on a dead letter, the instant (Unix nanoseconds) of
// the death it records: ListDead lists a letter only while the task's
// record in the dead bucket is that death. Letters stored before Revive
// have none and are listed while the task is dead.
const hdrDied = "Sluice-Died"

// listBytes bounds what one fetch of ListDead buffers: payloads of up to
// this much in all (at least one message).
const listBytes = 32 << 20

// ListDead returns up to n dead tasks in the order their dead letters were
// stored; see [queue.Queue.ListDead] and the package doc (Dead letters).
// It reads the dead-letter stream from the cursor's place with an
// ephemeral consumer, and each letter's record in the dead bucket.
func (q *Queue) ListDead(ctx context.Context, after string, n int) ([]queue.Info, error) {
	if err := queue.CheckList(n); err != nil {
		if q.closed.Load() {
			return nil, fmt.Errorf("jsqueue: list dead: %w", queue.ErrClosed)
		}
		return nil, fmt.Errorf("jsqueue: list dead: %w", err)
	}
	ctx, cancel, err := q.begin(ctx, "list dead", 2+n/1000)
	if err != nil {
		return nil, err
	}
	defer cancel()
	start := uint64(1)
	if after != "" {
		seq, err := q.deadPlace(ctx, after)
		if err != nil {
			return nil, fmt.Errorf("jsqueue: list dead after %q: %w", after, err)
		}
		start = seq + 1
	}
	c, err := q.deadLetter.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       "sluice queue " + q.o.Name + ": one ListDead",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: 2 * q.o.Timeout, // the server removes it if the delete below is lost
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return nil, wrap("list dead: read the dead letters", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), q.o.Timeout)
		defer dcancel()
		_ = q.deadLetter.DeleteConsumer(dctx, c.CachedInfo().Name)
	}()
	batch := max(1, min(256, listBytes/(q.o.MaxPayload+headroom)))
	out := make([]queue.Info, 0, min(n, 256))
	for len(out) < n {
		letters, err := fetchNoWait(c, min(batch, n-len(out)))
		if err != nil {
			return nil, wrap("list dead: read the dead letters", err)
		}
		if len(letters) == 0 {
			break // the end of the stream
		}
		infos := make([]*queue.Info, len(letters))
		errs := make([]error, len(letters))
		each(len(letters), width, func(i int) { infos[i], errs[i] = q.deadInfo(ctx, letters[i]) })
		for i := range letters {
			if errs[i] != nil {
				return nil, wrap("list dead", errs[i])
			}
			if infos[i] != nil && len(out) < n {
				out = append(out, *infos[i])
			}
		}
	}
	return out, nil
}

// fetchNoWait takes up to n messages the consumer c has at once.
func fetchNoWait(c jetstream.Consumer, n int) ([]jetstream.Msg, error) {
	batch, err := c.FetchNoWait(n)
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	return msgs, batch.Error()
}

// deadInfo is what ListDead says of the task of a dead letter, or nil if
// the letter is not its task's current death (the task was revived, died
// again, or its record expired).
func (q *Queue) deadInfo(ctx context.Context, letter jetstream.Msg) (*queue.Info, error) {
	subject := letter.Subject()
	id := subject[strings.LastIndexByte(subject, '.')+1:]
	e, err := q.finished[stDead].Get(ctx, id)
	if notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of dead task %s: %w", id, err)
	}
	r, err := decode(e.Value())
	if err != nil {
		return nil, err
	}
	died, err := strconv.ParseInt(letter.Headers().Get(hdrDied), 10, 64)
	if r.State != stDead || err == nil && r.Finished.UnixNano() != died {
		return nil, nil
	}
	info := r.info(id, time.Now())
	info.Payload = letter.Data()
	return &info, nil
}

// deadPlace returns the sequence of the dead letter that is the place of
// task id in the order of deaths: its dead letter's if it is dead, else
// the one of the death it was last revived from.
func (q *Queue) deadPlace(ctx context.Context, id string) (uint64, error) {
	if !validID(id) {
		return 0, fmt.Errorf("%w: not a task ID of this queue", queue.ErrNotFound)
	}
	m, err := q.deadLetter.GetLastMsgForSubject(ctx, q.deadSubject(id))
	if err == nil {
		return m.Sequence, nil
	}
	if !notFound(err) {
		return 0, fmt.Errorf("read the dead letter: %w", err)
	}
	var r record
	e, err := q.status.Get(ctx, id)
	switch {
	case err == nil:
		if r, err = decode(e.Value()); err != nil {
			return 0, err
		}
	case notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted):
		if r, _, err = q.lookupFinished(ctx, id); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("read the record: %w", err)
	}
	switch {
	case r.DeadSeq != 0:
		return r.DeadSeq, nil
	case r.State == stDead:
		return 0, fmt.Errorf("%w: task %s is dead, but its dead letter has expired", queue.ErrNotFound, id)
	}
	return 0, fmt.Errorf("%w: task %s is %v and was never dead, so it has no place among the dead", queue.ErrInvalid, id, r.state(time.Now()))
}

// errAgain says that a record changed while Revive read it: read again.
var errAgain = errors.New("the task's records changed while they were read")

// Revive gives a dead task a new life; see [queue.Queue.Revive] and the
// package doc (Dead letters) for its steps.
func (q *Queue) Revive(ctx context.Context, id string, at time.Time) error {
	ctx, cancel, err := q.begin(ctx, "revive", 2)
	if err != nil {
		return err
	}
	defer cancel()
	if !validID(id) {
		return fmt.Errorf("jsqueue: revive: task %q: %w", id, queue.ErrNotFound)
	}
	for range tries {
		err := q.revive(ctx, id, at)
		if !errors.Is(err, errAgain) {
			return err
		}
	}
	return wrap("revive", errBusy)
}

// revive makes one attempt at Revive; errAgain asks for another.
func (q *Queue) revive(ctx context.Context, id string, at time.Time) error {
	notDead := func(r record) error {
		return fmt.Errorf("jsqueue: revive: task %s is %v: %w", id, r.state(time.Now()), queue.ErrNotDead)
	}
	// A record in the status bucket is a task not dead, or one whose
	// death was written by a process that died before it moved the record
	// (finish that move first).
	l, err := q.liveRecord(ctx, id)
	switch {
	case err != nil:
		return err
	case l != nil && l.r.State != stDead:
		return notDead(l.r)
	case l != nil:
		q.settle(ctx, id, l.r, l.data, nil, false)
		if l, err := q.liveRecord(ctx, id); err != nil || l != nil {
			return fmt.Errorf("jsqueue: revive: task %s: its death is not fully recorded yet (see the log); try again", id)
		}
	}
	de, err := q.finished[stDead].Get(ctx, id)
	if notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
		// Revived meanwhile (its live record is written before its dead
		// one goes), finished otherwise, or unknown.
		if l, err := q.liveRecord(ctx, id); err != nil || l != nil {
			if err != nil {
				return err
			}
			return errAgain
		}
		r, _, err := q.lookupFinished(ctx, id)
		if err != nil {
			return wrap("revive", err)
		}
		return notDead(r)
	}
	if err != nil {
		return wrap("revive: read the dead record", err)
	}
	r, err := decode(de.Value())
	if err != nil {
		return wrap("revive", err)
	}
	if r.State != stDead {
		return notDead(r)
	}
	now := time.Now()
	ready, err := queue.CheckRevive(id, r.Deadline, now, at)
	if err != nil {
		return fmt.Errorf("jsqueue: revive: %w", err)
	}
	letter, err := q.deadLetter.GetLastMsgForSubject(ctx, q.deadSubject(id))
	if notFound(err) && now.Sub(r.Finished) >= q.o.DeadRetention-stale {
		return fmt.Errorf("jsqueue: revive: task %s: %w: its dead letter, which holds its payload, expired with the dead retention", id, queue.ErrNotFound)
	}
	if notFound(err) && q.revivedMeanwhile(ctx, id, de.Revision()) {
		// A concurrent Revive completed between our reads, and removed
		// the letter: read again, to answer ErrNotDead.
		return errAgain
	}
	if notFound(err) {
		return fmt.Errorf("jsqueue: revive: task %s: its dead letter, which holds its payload, is not stored yet (Stats finishes the death's record): the task stays dead; try again", id)
	}
	if err != nil {
		return wrap("revive: read the dead letter", err)
	}
	r.State, r.Attempts, r.ReadyAt = stWaiting, 0, ready
	r.Token, r.Until, r.Seq, r.Ack = "", time.Time{}, 0, ""
	r.Finished, r.Result = time.Time{}, nil
	r.DeadSeq, r.DeadRev, r.Reviving = letter.Sequence, de.Revision(), now
	data, err := r.encode()
	if err != nil {
		return wrap("revive", err)
	}
	// The commit: the live record, created once. A concurrent Revive
	// finds it (ErrNotDead).
	rev, err := q.status.Create(ctx, id, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return errAgain
	}
	if err != nil {
		return wrap("revive: write the live record", err)
	}
	q.completeRevival(ctx, id, rev, r, letter.Data, true)
	return nil
}

// revivedMeanwhile reports whether task id has a live record again, or
// its dead record is no longer the one read at revision deadRev: what a
// Revive that completed meanwhile leaves.
func (q *Queue) revivedMeanwhile(ctx context.Context, id string, deadRev uint64) bool {
	if l, err := q.liveRecord(ctx, id); err == nil && l != nil {
		return true
	}
	de, err := q.finished[stDead].Get(ctx, id)
	return notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) || (err == nil && de.Revision() != deadRev)
}

// live is a record of the status bucket with its revision and bytes.
type live struct {
	r    record
	rev  uint64
	data []byte
}

// liveRecord reads task id's record in the status bucket, or nil.
func (q *Queue) liveRecord(ctx context.Context, id string) (*live, error) {
	e, err := q.status.Get(ctx, id)
	if notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("revive: read the record", err)
	}
	r, err := decode(e.Value())
	if err != nil {
		return nil, wrap("revive", err)
	}
	return &live{r: r, rev: e.Revision(), data: e.Value()}, nil
}

// completeRevival does what follows the live record r of a revived task,
// written at revision rev of the status bucket: it removes the dead
// record (up to revision r.DeadRev, so never a later death's), publishes
// the task's message with payload (when publish is set), deletes the dead
// letter, then clears r.Reviving. Each step can be done again: Stats does
// them for a revival left half done (see finishRevival). A failure is
// logged, not returned: the task is revived.
func (q *Queue) completeRevival(ctx context.Context, id string, rev uint64, r record, payload []byte, publish bool) {
	failed := func(step string, err error) bool {
		if err != nil && !notFound(err) {
			q.log.Warn("jsqueue: a revived task was not fully set up; Stats finishes it later",
				"task", id, "step", step, "error", err)
			return true
		}
		return false
	}
	if failed("remove the dead record", q.deadLog.Purge(ctx,
		jetstream.WithPurgeSubject(q.deadRecordSubject(id)), jetstream.WithPurgeSequence(r.DeadRev+1))) {
		return
	}
	if publish {
		m := &nats.Msg{Subject: q.taskSubject(r.Priority, id), Data: payload, Header: nats.Header{}}
		if r.ReadyAt.After(time.Now()) {
			m.Header.Set(hdrReadyAt, strconv.FormatInt(r.ReadyAt.UnixNano(), 10))
		}
		// One message ID per life: a publish done again (by Stats) within
		// the stream's duplicates window is stored once.
		msgID := id + "-" + strconv.FormatUint(r.DeadSeq, 10)
		if _, err := q.js.PublishMsg(ctx, m, jetstream.WithMsgID(msgID)); failed("publish the task", err) {
			return
		}
	}
	if failed("delete the dead letter", q.deadLetter.DeleteMsg(ctx, r.DeadSeq)) {
		return
	}
	for range tries {
		r.Reviving = time.Time{}
		data, err := r.encode()
		if err != nil {
			failed("clear the revival mark", err)
			return
		}
		_, err = q.status.Update(ctx, id, data, rev)
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			failed("clear the revival mark", err)
			return
		}
		// Leased (or otherwise changed) meanwhile: clear the mark on the
		// record as it is now.
		l, err := q.liveRecord(ctx, id)
		if err != nil || l == nil || l.r.finished() || l.r.Reviving.IsZero() {
			failed("clear the revival mark", err)
			return
		}
		r, rev = l.r, l.rev
	}
}

// finishRevival finishes the revival of task id, whose live record (r, at
// revision rev) still has its mark after stale: the process that revived
// it died before it set it up, or a step failed. Stats calls it.
func (q *Queue) finishRevival(ctx context.Context, id string, rev uint64, r record) {
	// A task not finished always has its message, once published.
	_, err := q.tasks[r.Priority].GetLastMsgForSubject(ctx, q.taskSubject(r.Priority, id))
	switch {
	case err == nil:
		q.completeRevival(ctx, id, rev, r, nil, false)
	case notFound(err):
		letter, err := q.deadLetter.GetMsg(ctx, r.DeadSeq)
		if err != nil {
			q.log.Error("jsqueue: a revived task has no message, and its dead letter, which holds its payload, cannot be read: "+
				"it will not be delivered; cancel it and enqueue its payload again",
				"task", id, "dead_letter", r.DeadSeq, "error", err)
			return
		}
		q.completeRevival(ctx, id, rev, r, letter.Data, true)
	default:
		q.log.Warn("jsqueue: a revived task was not checked; the next Stats tries again", "task", id, "error", err)
	}
}
