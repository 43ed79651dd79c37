package boltqueue

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/queue"
)

// counts are the numbers Stats reports, kept in the meta bucket and
// changed in the same transaction as the indexes they count.
type counts struct {
	ready, scheduled, leased, succeeded, dead, cancelled int64
}

var countsKey = []byte("counts")

func loadCounts(tx *bolt.Tx) counts {
	var c counts
	b := tx.Bucket(bMeta).Get(countsKey)
	if len(b) == 48 {
		for i, p := range []*int64{&c.ready, &c.scheduled, &c.leased, &c.succeeded, &c.dead, &c.cancelled} {
			*p = int64(binary.BigEndian.Uint64(b[8*i:]))
		}
	}
	return c
}

func (c *counts) encode() []byte {
	b := make([]byte, 0, 48)
	for _, v := range []int64{c.ready, c.scheduled, c.leased, c.succeeded, c.dead, c.cancelled} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// finishedCount returns the counter of a finished state.
func (c *counts) finishedCount(s queue.State) *int64 {
	switch s {
	case queue.Succeeded:
		return &c.succeeded
	case queue.Dead:
		return &c.dead
	default:
		return &c.cancelled
	}
}

// writer makes the changes of one commit. Its methods return a refusal
// before writing anything, or write and return nil (or a bbolt error,
// which fails the commit).
type writer struct {
	tx                                                                 *bolt.Tx
	now                                                                int64
	o                                                                  Options
	c                                                                  counts
	tasks, payloads, results, ready, sched, leases, keys, expiry, dead *bolt.Bucket
}

func newWriter(tx *bolt.Tx, now time.Time, o Options) *writer {
	return &writer{
		tx: tx, now: nanos(now), o: o, c: loadCounts(tx),
		tasks: tx.Bucket(bTasks), payloads: tx.Bucket(bPayloads), results: tx.Bucket(bResults),
		ready: tx.Bucket(bReady), sched: tx.Bucket(bSchedule), leases: tx.Bucket(bLeases),
		keys: tx.Bucket(bKeys), expiry: tx.Bucket(bExpiry), dead: tx.Bucket(bDead),
	}
}

// saveMeta writes the counts and marks the dead index as kept by this
// commit (see deadIndexCurrent). Every commit calls it last.
func (w *writer) saveMeta() error {
	meta := w.tx.Bucket(bMeta)
	if err := meta.Put(countsKey, w.c.encode()); err != nil {
		return err
	}
	return markDeadIndex(w.tx)
}

// A key's row: task ID (8), enqueue instant (8), payload digest (32).
const keyRowSize = 8 + 8 + sha256.Size

// Expiry entries: instant (8), task (8), kind (1).
const (
	expireKey  = 'k'
	expireTask = 't'
)

func expiryKey(at int64, id []byte, kind byte) []byte { return append(timeKey(at, id), kind) }

func (w *writer) enqueue(tasks []queue.Task, digests [][sha256.Size]byte) ([]queue.Enqueued, error) {
	out := make([]queue.Enqueued, len(tasks))
	window := int64(w.o.DedupWindow)
	// First, every key: refuse a conflict before writing anything.
	type seen struct {
		index  int
		digest [sha256.Size]byte
	}
	inBatch := map[string]seen{}
	fresh := make([]bool, len(tasks))
	for i, t := range tasks {
		fresh[i] = true
		if t.Key == "" {
			continue
		}
		if s, ok := inBatch[t.Key]; ok {
			if s.digest != digests[i] {
				return nil, keyConflict(i, t.Key)
			}
			fresh[i] = false
			out[i].Duplicate = true
			continue
		}
		if row := w.keys.Get([]byte(t.Key)); len(row) == keyRowSize && keyTime(row[8:])+window > w.now {
			if !bytes.Equal(row[16:], digests[i][:]) {
				return nil, keyConflict(i, t.Key)
			}
			fresh[i] = false
			out[i] = queue.Enqueued{ID: formatID(row[:8]), Duplicate: true}
			continue
		}
		inBatch[t.Key] = seen{index: i, digest: digests[i]}
	}
	for i, t := range tasks {
		if !fresh[i] {
			continue
		}
		seq, err := w.tasks.NextSequence()
		if err != nil {
			return nil, err
		}
		id := taskKey(seq)
		out[i].ID = formatID(id)
		r := record{
			priority: uint8(t.Priority), cost: queue.CostOf(t), key: t.Key,
			maxAttempts: uint32(t.MaxAttempts), enqueued: w.now, readyAt: nanos(t.NotBefore), deadline: nanos(t.Deadline),
		}
		if r.maxAttempts == 0 {
			r.maxAttempts = uint32(w.o.MaxAttempts)
		}
		if r.readyAt == 0 {
			r.readyAt = w.now
		}
		if err := w.place(id, &r); err != nil {
			return nil, err
		}
		if len(t.Payload) > 0 {
			if err := w.payloads.Put(id, t.Payload); err != nil {
				return nil, err
			}
		}
		if t.Key != "" {
			row := make([]byte, 0, keyRowSize)
			row = append(row, id...)
			row = binary.BigEndian.AppendUint64(row, uint64(w.now))
			row = append(row, digests[i][:]...)
			if err := w.keys.Put([]byte(t.Key), row); err != nil {
				return nil, err
			}
			if err := w.expiry.Put(expiryKey(w.now+window, id, expireKey), []byte(t.Key)); err != nil {
				return nil, err
			}
		}
	}
	// Duplicates within the batch take their first's ID.
	for i, t := range tasks {
		if out[i].Duplicate && out[i].ID == "" {
			out[i].ID = out[inBatch[t.Key].index].ID
		}
	}
	return out, nil
}

func keyConflict(i int, key string) error {
	return &queue.TaskError{Index: i, Field: "key", Err: queue.ErrKeyConflict,
		Reason: fmt.Sprintf("%d-byte key held by a task with another payload within the dedup window", len(key))}
}

// place writes r as waiting for its ready time: in the ready index if it
// has come, else in the schedule index.
func (w *writer) place(id []byte, r *record) error {
	if r.readyAt <= w.now {
		r.state = queue.Queued
		w.c.ready++
		if err := w.ready.Put(readyKey(r.priority, r.readyAt, id), nil); err != nil {
			return err
		}
	} else {
		r.state = queue.Scheduled
		w.c.scheduled++
		if err := w.sched.Put(timeKey(r.readyAt, id), nil); err != nil {
			return err
		}
	}
	return w.tasks.Put(id, r.encode())
}

// unplace removes a waiting task from the index it is in.
func (w *writer) unplace(id []byte, r *record) error {
	if r.state == queue.Queued {
		w.c.ready--
		return w.ready.Delete(readyKey(r.priority, r.readyAt, id))
	}
	w.c.scheduled--
	return w.sched.Delete(timeKey(r.readyAt, id))
}

// finish records r as finished in state s with outcome.
func (w *writer) finish(id []byte, r *record, s queue.State, outcome string) error {
	r.state, r.finished, r.until, r.token = s, w.now, 0, 0
	if outcome != "" {
		r.outcome = queue.Reason(outcome)
	}
	(*w.c.finishedCount(s))++
	if s == queue.Dead {
		if err := w.dead.Put(timeKey(w.now, id), nil); err != nil {
			return err
		}
	}
	if err := w.expiry.Put(expiryKey(w.now+int64(w.retention(s)), id, expireTask), nil); err != nil {
		return err
	}
	return w.tasks.Put(id, r.encode())
}

// retention is how long a task finished in state s is kept.
func (w *writer) retention(s queue.State) time.Duration {
	if s == queue.Dead {
		return w.o.DeadRetention
	}
	return w.o.Retention
}

func (w *writer) load(id []byte) (record, error) {
	b := w.tasks.Get(id)
	if b == nil {
		return record{}, queue.ErrNotFound
	}
	return decodeRecord(b)
}

// recoverDue moves what time has made due: expired leases back to the
// ready index (or to the dead, on their last attempt) and scheduled tasks
// whose time has come into the ready index. At most limit of each.
func (w *writer) recoverDue(limit int) error {
	c := w.leases.Cursor()
	for k, _ := c.First(); k != nil && keyTime(k) <= w.now && limit > 0; k, _ = c.First() {
		limit--
		id := append([]byte(nil), k[8:]...)
		until := keyTime(k)
		if err := w.leases.Delete(k); err != nil {
			return err
		}
		w.c.leased--
		r, err := w.load(id)
		if err != nil {
			return fmt.Errorf("lease index names task %x: %w", id, err)
		}
		if r.attempts >= r.maxAttempts {
			if err := w.finish(id, &r, queue.Dead, queue.ReasonAttempts); err != nil {
				return err
			}
			continue
		}
		r.readyAt, r.until, r.token = until, 0, 0
		if err := w.place(id, &r); err != nil {
			return err
		}
	}
	c = w.sched.Cursor()
	for k, _ := c.First(); k != nil && keyTime(k) <= w.now && limit > 0; k, _ = c.First() {
		limit--
		id := append([]byte(nil), k[8:]...)
		if err := w.sched.Delete(k); err != nil {
			return err
		}
		w.c.scheduled--
		r, err := w.load(id)
		if err != nil {
			return fmt.Errorf("schedule index names task %x: %w", id, err)
		}
		if err := w.place(id, &r); err != nil {
			return err
		}
	}
	return nil
}

// recoverLimit bounds the work one Lease does for tasks made due by time.
const recoverLimit = 10000

func (w *writer) lease(n int, visibility time.Duration) ([]queue.Lease, error) {
	if err := w.recoverDue(recoverLimit); err != nil {
		return nil, err
	}
	out := make([]queue.Lease, 0, min(n, 256))
	until := w.now + int64(visibility)
	c := w.ready.Cursor()
	k, _ := c.First()
	for k != nil && len(out) < n {
		if keyTime(k[1:]) > w.now {
			// This priority's next task is not ready (a clock set back):
			// go on to the next priority.
			k, _ = c.Seek([]byte{k[0] + 1})
			continue
		}
		k = bytes.Clone(k)
		id := k[9:]
		if err := c.Delete(); err != nil {
			return nil, err
		}
		w.c.ready--
		r, err := w.load(id)
		if err != nil {
			return nil, fmt.Errorf("ready index names task %x: %w", id, err)
		}
		if r.deadline != 0 && r.deadline <= w.now {
			if err := w.finish(id, &r, queue.Dead, queue.ReasonDeadline); err != nil {
				return nil, err
			}
		} else {
			token, err := w.leases.NextSequence()
			if err != nil {
				return nil, err
			}
			readyAt := r.readyAt
			r.state, r.attempts, r.until, r.token = queue.Leased, r.attempts+1, until, token
			if err := w.tasks.Put(id, r.encode()); err != nil {
				return nil, err
			}
			if err := w.leases.Put(timeKey(until, id), nil); err != nil {
				return nil, err
			}
			w.c.leased++
			payload := w.payloads.Get(id)
			out = append(out, queue.Lease{
				Receipt: queue.Receipt{ID: formatID(id), Token: formatToken(token)},
				Task: queue.Task{Key: r.key, Payload: bytes.Clone(payload), Cost: r.cost, Priority: int(r.priority),
					NotBefore: instant(readyAt), Deadline: instant(r.deadline), MaxAttempts: int(r.maxAttempts)},
				Attempt: int(r.attempts), Until: instant(until), Enqueued: instant(r.enqueued),
			})
		}
		// Deleting under a cursor moves it to the next entry; Seek again
		// from where the deleted key was to stay exact.
		k, _ = c.Seek(k)
	}
	return out, nil
}

// current loads the task a receipt names and checks the lease is its
// current one, unexpired.
func (w *writer) current(rc queue.Receipt) ([]byte, record, error) {
	id, ok := parseID(rc.ID)
	if !ok {
		return nil, record{}, fmt.Errorf("%w: %q is not a task ID of this queue", queue.ErrNotFound, rc.ID)
	}
	r, err := w.load(id)
	if err != nil {
		return nil, r, err
	}
	token, ok := parseToken(rc.Token)
	if !ok || r.state != queue.Leased || r.token != token || r.until <= w.now {
		return nil, r, fmt.Errorf("%w: task %s", queue.ErrLeaseLost, rc.ID)
	}
	return id, r, nil
}

// endLease removes r's lease from the lease index.
func (w *writer) endLease(id []byte, r *record) error {
	w.c.leased--
	return w.leases.Delete(timeKey(r.until, id))
}

func (w *writer) extend(rc queue.Receipt, visibility time.Duration) (time.Time, error) {
	id, r, err := w.current(rc)
	if err != nil {
		return time.Time{}, err
	}
	if err := w.endLease(id, &r); err != nil {
		return time.Time{}, err
	}
	r.until = w.now + int64(visibility)
	w.c.leased++
	if err := w.leases.Put(timeKey(r.until, id), nil); err != nil {
		return time.Time{}, err
	}
	return instant(r.until), w.tasks.Put(id, r.encode())
}

func (w *writer) ack(rc queue.Receipt, result []byte) error {
	id, r, err := w.current(rc)
	if err != nil {
		return err
	}
	if err := w.endLease(id, &r); err != nil {
		return err
	}
	if result != nil {
		if err := w.results.Put(id, result); err != nil {
			return err
		}
	}
	return w.finish(id, &r, queue.Succeeded, "")
}

func (w *writer) retry(rc queue.Receipt, how queue.Retry) error {
	id, r, err := w.current(rc)
	if err != nil {
		return err
	}
	if err := w.endLease(id, &r); err != nil {
		return err
	}
	if !how.Throttled && r.attempts >= r.maxAttempts {
		return w.finish(id, &r, queue.Dead, fmt.Sprintf("%s (attempt %d of %d)", how.Reason, r.attempts, r.maxAttempts))
	}
	if how.Throttled {
		r.attempts--
	}
	r.readyAt, r.until, r.token, r.outcome = max(nanos(how.At), w.now), 0, 0, queue.Reason(how.Reason)
	return w.place(id, &r)
}

func (w *writer) deadLetter(rc queue.Receipt, reason string) error {
	id, r, err := w.current(rc)
	if err != nil {
		return err
	}
	if err := w.endLease(id, &r); err != nil {
		return err
	}
	return w.finish(id, &r, queue.Dead, reason)
}

func (w *writer) cancel(idText string) error {
	id, ok := parseID(idText)
	if !ok {
		return fmt.Errorf("%w: %q is not a task ID of this queue", queue.ErrNotFound, idText)
	}
	r, err := w.load(id)
	if err != nil {
		return err
	}
	switch {
	case r.state.Finished():
		return fmt.Errorf("%w: task %s is %v", queue.ErrFinished, idText, r.state)
	case r.state == queue.Leased:
		err = w.endLease(id, &r)
	default:
		err = w.unplace(id, &r)
	}
	if err != nil {
		return err
	}
	return w.finish(id, &r, queue.Cancelled, "cancelled")
}

// purge deletes, up to limit, keys past the dedup window and finished
// tasks past their retention.
func (w *writer) purge(limit int) error {
	c := w.expiry.Cursor()
	for k, v := c.First(); k != nil && keyTime(k) <= w.now && limit > 0; k, v = c.First() {
		limit--
		id, kind := append([]byte(nil), k[8:16]...), k[16]
		key := append([]byte(nil), v...)
		if err := c.Delete(); err != nil {
			return err
		}
		switch kind {
		case expireKey:
			// The key may have been taken again by a later task.
			if row := w.keys.Get(key); len(row) == keyRowSize && bytes.Equal(row[:8], id) {
				if err := w.keys.Delete(key); err != nil {
					return err
				}
			}
		case expireTask:
			r, err := w.load(id)
			if err != nil || !r.state.Finished() {
				continue // purged already, or revived since
			}
			if due := r.finished + int64(w.retention(r.state)); due > w.now {
				// The entry of an earlier life (the task was revived and
				// finished again), or of a shorter retention than the
				// queue's now: the task is kept until its own.
				if err := w.expiry.Put(expiryKey(due, id, expireTask), nil); err != nil {
					return err
				}
				continue
			}
			(*w.c.finishedCount(r.state))--
			if r.state == queue.Dead {
				if err := w.dead.Delete(timeKey(r.finished, id)); err != nil {
					return err
				}
			}
			for _, b := range []*bolt.Bucket{w.tasks, w.payloads, w.results} {
				if err := b.Delete(id); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
