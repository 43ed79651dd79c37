package boltqueue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/queue"
)

// The dead index (bucket "dead") holds one entry per dead task, keyed by
// the instant it died and the task (timeKey), so that ListDead reads the
// deaths in order from any place without looking at the other tasks.
// finish adds a task's entry, Revive and purge remove it, in the same
// transaction as the record they change.
//
// A file written by a boltqueue without the index (or by one that does
// not keep it, after this one) has no index or a stale one: Open builds
// it again. To tell, every commit of this version writes its transaction
// ID under deadIndexKey in the meta bucket; the index is current when the
// last commit of the file was one of them (the ID written is the file's
// last transaction ID).
var deadIndexKey = []byte("dead-index-txid")

// markDeadIndex records that tx keeps the dead index.
func markDeadIndex(tx *bolt.Tx) error {
	return tx.Bucket(bMeta).Put(deadIndexKey, binary.BigEndian.AppendUint64(nil, uint64(tx.ID())))
}

// deadIndexCurrent reports whether the dead index was kept by the last
// commit before tx: lastCommit is that commit's transaction ID (tx.ID()
// in a read transaction, tx.ID()-1 in a write transaction).
func deadIndexCurrent(tx *bolt.Tx, lastCommit int) bool {
	v := tx.Bucket(bMeta).Get(deadIndexKey)
	return tx.Bucket(bDead) != nil && len(v) == 8 && binary.BigEndian.Uint64(v) == uint64(lastCommit)
}

// ensureDeadIndex builds the dead index in tx (Open's transaction) unless
// it is current, and marks it. It returns how many dead tasks it indexed,
// or -1 when the index was current. It reads every task once.
func ensureDeadIndex(tx *bolt.Tx) (int, error) {
	if deadIndexCurrent(tx, tx.ID()-1) {
		return -1, markDeadIndex(tx)
	}
	if tx.Bucket(bDead) != nil {
		if err := tx.DeleteBucket(bDead); err != nil {
			return 0, err
		}
	}
	dead, err := tx.CreateBucket(bDead)
	if err != nil {
		return 0, err
	}
	n := 0
	err = tx.Bucket(bTasks).ForEach(func(id, v []byte) error {
		r, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("task %x: %w", id, err)
		}
		if r.state != queue.Dead {
			return nil
		}
		n++
		return dead.Put(timeKey(r.finished, id), nil)
	})
	if err != nil {
		return 0, fmt.Errorf("build the index of dead tasks: %w", err)
	}
	return n, markDeadIndex(tx)
}

// revive gives the dead task idText a new life ready at at (now if zero
// or past); see queue.Queue.Revive. Its death's entries in the dead index
// and the expiry index go; its place in the order of deaths stays in the
// record (died) for ListDead's cursor.
func (w *writer) revive(idText string, at time.Time) error {
	id, ok := parseID(idText)
	if !ok {
		return fmt.Errorf("%w: %q is not a task ID of this queue", queue.ErrNotFound, idText)
	}
	r, err := w.load(id)
	if err != nil {
		return fmt.Errorf("task %s: %w", idText, err)
	}
	if r.state != queue.Dead {
		return fmt.Errorf("%w: task %s is %v", queue.ErrNotDead, idText, r.state)
	}
	ready, err := queue.CheckRevive(idText, instant(r.deadline), instant(w.now), at)
	if err != nil {
		return err
	}
	if err := w.dead.Delete(timeKey(r.finished, id)); err != nil {
		return err
	}
	// The death's expiry entry, if the retention is the one it was
	// written with; purge drops any other when it comes.
	if err := w.expiry.Delete(expiryKey(r.finished+int64(w.o.DeadRetention), id, expireTask)); err != nil {
		return err
	}
	w.c.dead--
	r.died, r.finished = r.finished, 0
	r.attempts, r.readyAt, r.until, r.token = 0, nanos(ready), 0, 0
	return w.place(id, &r)
}

// listDead reads up to n dead tasks from the dead index, after the place
// of the task named after ("" for the first); see queue.Queue.ListDead.
func listDead(tx *bolt.Tx, after string, n int, now int64) ([]queue.Info, error) {
	c := tx.Bucket(bDead).Cursor()
	k, _ := c.First()
	if after != "" {
		from, err := deadPlace(tx, after)
		if err != nil {
			return nil, err
		}
		k, _ = c.Seek(from)
		if bytes.Equal(k, from) {
			k, _ = c.Next()
		}
	}
	out := make([]queue.Info, 0, min(n, 256))
	for ; k != nil && len(out) < n; k, _ = c.Next() {
		id := k[8:]
		r, err := readRecord(tx, id)
		if err != nil {
			return nil, fmt.Errorf("boltqueue: the dead index names task %x: %w", id, err)
		}
		if r.state != queue.Dead || r.finished != keyTime(k) {
			return nil, fmt.Errorf("boltqueue: the dead index names task %x as dead at %d, but it is %v (finished %d)", id, keyTime(k), r.state, r.finished)
		}
		out = append(out, infoOf(tx, id, r, now))
	}
	return out, nil
}

// deadPlace returns the dead-index key of the place of task idText in the
// order of deaths: its death if it is dead, else the death it was last
// revived from.
func deadPlace(tx *bolt.Tx, idText string) ([]byte, error) {
	id, ok := parseID(idText)
	if !ok {
		return nil, fmt.Errorf("boltqueue: list dead after %q: %w: not a task ID of this queue", idText, queue.ErrNotFound)
	}
	r, err := readRecord(tx, id)
	if err != nil {
		return nil, fmt.Errorf("boltqueue: list dead after task %s: %w", idText, err)
	}
	place := r.died
	if r.state == queue.Dead {
		place = r.finished
	}
	if place == 0 {
		return nil, fmt.Errorf("boltqueue: list dead after task %s: %w: the task is %v and was never dead, so it has no place among the dead",
			idText, queue.ErrInvalid, r.state)
	}
	return timeKey(place, id), nil
}
