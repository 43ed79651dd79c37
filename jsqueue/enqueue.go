package jsqueue

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sluicehq/sluice/queue"
)

const (
	// publishWindow is the most writes of one call in flight at once.
	publishWindow = 1024
	// maxPending is the most writes in flight at once over all calls
	// (the connection's bound on pending asynchronous publishes, past
	// which nats.go refuses a publish as "stalled"): a call holds one unit
	// per write of the window it has in flight, and concurrent Enqueues
	// beyond the bound wait, first come first served.
	maxPending = 8 * publishWindow
	// width is the most requests of one call in flight at once where each
	// needs an answer before the next step (key claims, Lease's records).
	width = 32
	// hdrReadyAt carries a task's not-before (Unix nanoseconds) when it
	// was in the future at Enqueue: Lease naks it without a record read.
	hdrReadyAt = "Sluice-Ready-At"
	// hdrReason carries a dead letter's reason.
	hdrReason = "Sluice-Reason"
)

// keyEntry is a key's entry in the keys bucket.
type keyEntry struct {
	ID     string `json:"id"`
	Digest string `json:"payload_sha256"`
}

// claim is the outcome of claiming one key.
type claim struct {
	name string // the key's name in the bucket
	rev  uint64 // the revision this call wrote (0: it wrote nothing)
	dup  string // the ID of the task that holds the key, same payload
	// conflict: the key is held by a task with another payload.
	conflict bool
	err      error
}

// Enqueue stores the tasks; see [queue.Queue.Enqueue] and the package
// doc (Enqueue) for what all-or-nothing means on JetStream. It returns
// when the server acknowledged every write.
func (q *Queue) Enqueue(ctx context.Context, tasks ...queue.Task) ([]queue.Enqueued, error) {
	ctx, cancel, err := q.begin(ctx, "enqueue", 1+len(tasks)/publishWindow)
	if err != nil {
		return nil, err
	}
	defer cancel()
	limits := queue.Limits{MaxPayload: q.o.MaxPayload, MaxAttempts: maxAttempts}
	for i, t := range tasks {
		if err := queue.Check(i, t, limits); err != nil {
			return nil, err
		}
	}
	if len(tasks) == 0 {
		return []queue.Enqueued{}, nil
	}
	now := time.Now()
	out := make([]queue.Enqueued, len(tasks))
	digests := make([][sha256.Size]byte, len(tasks))
	// Keys within the batch: a second task with a key is the first one.
	firstOf := map[string]int{}
	dupOf := make([]int, len(tasks))
	var claiming []int
	for i, t := range tasks {
		dupOf[i] = -1
		if t.Key == "" {
			continue
		}
		digests[i] = sha256.Sum256(t.Payload)
		if j, ok := firstOf[t.Key]; ok {
			if digests[j] != digests[i] {
				return nil, conflictError(i, t.Key, "an earlier task of the same call")
			}
			dupOf[i] = j
			continue
		}
		firstOf[t.Key] = i
		claiming = append(claiming, i)
	}
	for i := range tasks {
		if dupOf[i] < 0 {
			out[i].ID = nuid.Next()
		}
	}

	claims := make([]claim, len(claiming))
	each(len(claiming), width, func(k int) {
		i := claiming[k]
		claims[k] = q.claimKey(ctx, tasks[i].Key, out[i].ID, digests[i], now)
	})
	var firstErr error
	for k, c := range claims {
		switch {
		case c.conflict:
			firstErr = conflictError(claiming[k], tasks[claiming[k]].Key, "a task enqueued within the dedup window")
		case c.err != nil:
			firstErr = fmt.Errorf("jsqueue: enqueue: claim the key of task %d: %w", claiming[k], c.err)
		}
		if firstErr != nil {
			break
		}
	}
	if firstErr != nil {
		return nil, q.undo(firstErr, claims, nil, nil, nil, nil)
	}
	for k, c := range claims {
		if c.dup != "" {
			out[claiming[k]] = queue.Enqueued{ID: c.dup, Duplicate: true}
		}
	}
	var fresh []int // the tasks this call stores
	for i := range tasks {
		if j := dupOf[i]; j >= 0 {
			out[i] = queue.Enqueued{ID: out[j].ID, Duplicate: true}
		} else if !out[i].Duplicate {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) == 0 {
		return out, nil
	}

	// Records first, then messages: a message without a record is a
	// leftover that Lease drops, never a task in the middle of its
	// Enqueue.
	ids := make([]string, len(fresh))
	recs := make([]*nats.Msg, len(fresh))
	msgs := make([]*nats.Msg, len(fresh))
	for k, i := range fresh {
		t := tasks[i]
		r := record{
			State: stWaiting, Key: t.Key, Priority: t.Priority, Cost: queue.CostOf(t),
			MaxAttempts: cmp.Or(t.MaxAttempts, q.o.MaxAttempts), Enqueued: now,
			NotBefore: t.NotBefore, ReadyAt: cmp.Or(t.NotBefore, now), Deadline: t.Deadline,
		}
		data, err := r.encode()
		if err != nil {
			return nil, q.undo(fmt.Errorf("jsqueue: enqueue: task %d: %w", i, err), claims, nil, nil, nil, nil)
		}
		ids[k] = out[i].ID
		recs[k] = &nats.Msg{Subject: q.statusSubject(out[i].ID), Data: data}
		m := &nats.Msg{Subject: q.taskSubject(t.Priority, out[i].ID), Data: t.Payload, Header: nats.Header{}}
		if t.NotBefore.After(now) {
			m.Header.Set(hdrReadyAt, strconv.FormatInt(t.NotBefore.UnixNano(), 10))
		}
		msgs[k] = m
	}
	recAcks, err := q.publish(ctx, recs, func(int) []jetstream.PublishOpt {
		return []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(0)}
	})
	if err != nil {
		return nil, q.undo(fmt.Errorf("jsqueue: enqueue: write the tasks' records: %w", err), claims, ids, recAcks, nil, nil)
	}
	// Published in ready-time order (stable), so that a consumer meets a
	// batch's tasks as Lease should hand them out.
	order := make([]int, len(fresh))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(tasks[fresh[a]].NotBefore, now).Compare(cmp.Or(tasks[fresh[b]].NotBefore, now))
	})
	sorted := make([]*nats.Msg, len(order))
	priority := make([]int, len(order)) // of sorted[k], whose stream it is in
	for k, o := range order {
		sorted[k], priority[k] = msgs[o], tasks[fresh[o]].Priority
	}
	msgAcks, err := q.publish(ctx, sorted, func(k int) []jetstream.PublishOpt {
		return []jetstream.PublishOpt{jetstream.WithMsgID(out[fresh[order[k]]].ID)}
	})
	if err != nil {
		return nil, q.undo(fmt.Errorf("jsqueue: enqueue: publish the tasks: %w", err), claims, ids, recAcks, msgAcks, priority)
	}
	return out, nil
}

func conflictError(i int, key, holder string) error {
	return &queue.TaskError{Index: i, Field: "key", Err: queue.ErrKeyConflict,
		Reason: fmt.Sprintf("%d-byte key held by %s with another payload", len(key), holder)}
}

// claimKey claims key for the task id whose payload has the digest given,
// or finds the task that holds it.
func (q *Queue) claimKey(ctx context.Context, key, id string, digest [sha256.Size]byte, now time.Time) claim {
	sum := sha256.Sum256([]byte(key))
	c := claim{name: hex.EncodeToString(sum[:])}
	want := hex.EncodeToString(digest[:])
	value, err := json.Marshal(keyEntry{ID: id, Digest: want})
	if err != nil {
		c.err = err
		return c
	}
	for range 4 {
		c.rev, err = q.keys.Create(ctx, c.name, value)
		if err == nil {
			return c
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			c.err = err
			return c
		}
		e, err := q.keys.Get(ctx, c.name)
		if notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // it expired or was released meanwhile
		}
		if err != nil {
			c.err = err
			return c
		}
		if e.Created().Add(q.o.DedupWindow).After(now) {
			var held keyEntry
			if err := json.Unmarshal(e.Value(), &held); err != nil {
				c.err = fmt.Errorf("the key's entry is not valid: %w", err)
				return c
			}
			if held.Digest != want {
				c.conflict = true
			} else {
				c.dup = held.ID
			}
			return c
		}
		// Past the window, not yet removed by the server: take it over.
		c.rev, err = q.keys.Update(ctx, c.name, value, e.Revision())
		if err == nil {
			return c
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			c.err = err
			return c
		}
	}
	c.err = errors.New("the key changed four times while it was claimed")
	return c
}

// undo removes what a failed Enqueue wrote (key claims, the records of
// ids, the messages acknowledged in msgs, msgs[i] in the tasks stream of
// priority[i]) and returns cause, saying so
// when some of the batch may stay stored: a write that could not be
// undone, or one that was not confirmed (it may still land).
func (q *Queue) undo(cause error, claims []claim, ids []string, recs, msgs []*jetstream.PubAck, priority []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), q.o.Timeout)
	defer cancel()
	var mu sync.Mutex
	left := 0
	fail := func(err error) {
		if err != nil && !notFound(err) {
			mu.Lock()
			left++
			mu.Unlock()
		}
	}
	// Messages first: a message without a record is dropped by Lease.
	each(len(msgs), width, func(i int) {
		if msgs[i] != nil {
			fail(q.tasks[priority[i]].DeleteMsg(ctx, msgs[i].Sequence))
		}
	})
	// Records by subject, confirmed or not (one that timed out may have
	// landed).
	each(len(ids), width, func(i int) {
		fail(q.statusLog.Purge(ctx, jetstream.WithPurgeSubject(q.statusSubject(ids[i]))))
	})
	each(len(claims), width, func(i int) {
		if claims[i].rev != 0 {
			fail(q.keys.Delete(ctx, claims[i].name, jetstream.LastRevision(claims[i].rev)))
		}
	})
	unconfirmed := 0
	for i := range ids {
		if recs != nil && recs[i] == nil || msgs != nil && msgs[i] == nil {
			unconfirmed++
		}
	}
	if left == 0 && unconfirmed == 0 {
		return cause
	}
	q.log.Warn("jsqueue: enqueue failed and its writes may not all be undone",
		"error", cause, "not_undone", left, "unconfirmed", unconfirmed)
	return fmt.Errorf("%w (tasks of this call may be stored: %d writes could not be undone, %d were not confirmed)", cause, left, unconfirmed)
}

// publish writes msgs with asynchronous publishes, at most publishWindow
// in flight, and waits for every PubAck. acks[i] is nil for a write that
// failed or was not confirmed; one that timed out may still be applied.
func (q *Queue) publish(ctx context.Context, msgs []*nats.Msg, opts func(i int) []jetstream.PublishOpt) ([]*jetstream.PubAck, error) {
	acks := make([]*jetstream.PubAck, len(msgs))
	var first error
	for start := 0; start < len(msgs) && first == nil; start += publishWindow {
		end := min(start+publishWindow, len(msgs))
		weight := int64(end - start)
		if err := q.publishing.Acquire(ctx, weight); err != nil {
			return acks, err
		}
		futures := make([]jetstream.PubAckFuture, 0, end-start)
		for i := start; i < end; i++ {
			f, err := q.js.PublishMsgAsync(msgs[i], opts(i)...)
			if err != nil {
				first = err
				break
			}
			futures = append(futures, f)
		}
		for k, f := range futures {
			select {
			case a := <-f.Ok():
				acks[start+k] = a
			case err := <-f.Err():
				if first == nil {
					first = err
				}
			case <-ctx.Done():
				// Take the answers already in (a write confirmed can be
				// undone); the writes still pending hold their share of
				// the bound until nats.go settles them (its publish
				// timeout), so that later calls do not overrun it.
				var pending []jetstream.PubAckFuture
				for j := k; j < len(futures); j++ {
					select {
					case a := <-futures[j].Ok():
						acks[start+j] = a
					case <-futures[j].Err():
					default:
						pending = append(pending, futures[j])
					}
				}
				q.settleInBackground(pending, weight)
				return acks, ctx.Err()
			}
		}
		q.publishing.Release(weight)
	}
	return acks, first
}

// settleInBackground runs settleLater on a goroutine Close waits for.
func (q *Queue) settleInBackground(futures []jetstream.PubAckFuture, weight int64) {
	q.settleMu.Lock()
	defer q.settleMu.Unlock()
	select {
	case <-q.stop:
		q.publishing.Release(weight)
	default:
		q.settling.Go(func() { q.settleLater(futures, weight) })
	}
}

// settleLater waits for the futures of writes a caller stopped waiting
// for (each settles within the publish timeout), then releases weight of
// the pending-publish bound.
func (q *Queue) settleLater(futures []jetstream.PubAckFuture, weight int64) {
	defer q.publishing.Release(weight)
	backstop := time.NewTimer(2*q.o.Timeout + time.Second)
	defer backstop.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case <-f.Err():
		case <-backstop.C:
			return
		case <-q.stop:
			return
		}
	}
}

// each runs f(0) … f(n-1) on at most limit goroutines and waits for all.
func each(n, limit int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, limit)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}
