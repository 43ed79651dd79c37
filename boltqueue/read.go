package boltqueue

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/queue"
)

// get reads one task as it stands at now; see infoOf.
func get(tx *bolt.Tx, idText string, now int64) (queue.Info, error) {
	id, ok := parseID(idText)
	if !ok {
		return queue.Info{}, fmt.Errorf("%w: %q is not a task ID of this queue", queue.ErrNotFound, idText)
	}
	r, err := readRecord(tx, id)
	if err != nil {
		return queue.Info{}, fmt.Errorf("boltqueue: task %s: %w", idText, err)
	}
	return infoOf(tx, id, r, now), nil
}

// readRecord reads the record of task id, or says queue.ErrNotFound.
func readRecord(tx *bolt.Tx, id []byte) (record, error) {
	b := tx.Bucket(bTasks).Get(id)
	if b == nil {
		return record{}, queue.ErrNotFound
	}
	return decodeRecord(b)
}

// infoOf is what Get says of task id, whose record is r, at now: a
// scheduled task whose time has come is queued, a lease that has ended is
// queued (from its end).
func infoOf(tx *bolt.Tx, id []byte, r record, now int64) queue.Info {
	info := queue.Info{
		ID: formatID(id), Key: r.key, State: r.state, Priority: int(r.priority), Cost: r.cost,
		Attempts: int(r.attempts), MaxAttempts: int(r.maxAttempts),
		Enqueued: instant(r.enqueued), ReadyAt: instant(r.readyAt), Deadline: instant(r.deadline),
		Finished: instant(r.finished), Outcome: r.outcome,
		Payload: bytes.Clone(tx.Bucket(bPayloads).Get(id)),
		Result:  bytes.Clone(tx.Bucket(bResults).Get(id)),
	}
	switch {
	case r.state == queue.Leased && r.until <= now:
		info.State, info.ReadyAt = queue.Queued, instant(r.until)
	case r.state == queue.Leased:
		info.LeasedUntil = instant(r.until)
	case r.state == queue.Scheduled && r.readyAt <= now:
		info.State = queue.Queued
	}
	return info
}

// stats reads the counts at now: scheduled tasks whose time has come and
// leases that have ended count as ready (the next Lease moves them).
func stats(tx *bolt.Tx, now int64) queue.Stats {
	c := loadCounts(tx)
	oldest := int64(0)
	older := func(t int64) {
		if oldest == 0 || t < oldest {
			oldest = t
		}
	}
	due := func(b *bolt.Bucket) int64 {
		var n int64
		cur := b.Cursor()
		for k, _ := cur.First(); k != nil && keyTime(k) <= now; k, _ = cur.Next() {
			if n == 0 {
				older(keyTime(k))
			}
			n++
		}
		return n
	}
	dueScheduled, endedLeases := due(tx.Bucket(bSchedule)), due(tx.Bucket(bLeases))
	cur := tx.Bucket(bReady).Cursor()
	for k, _ := cur.First(); k != nil; k, _ = cur.Seek([]byte{k[0] + 1}) {
		if t := keyTime(k[1:]); t <= now {
			older(t)
		}
		if k[0] == 0xff {
			break
		}
	}
	s := queue.Stats{
		Ready: c.ready + dueScheduled + endedLeases, Scheduled: c.scheduled - dueScheduled, Leased: c.leased - endedLeases,
		Succeeded: c.succeeded, Dead: c.dead, Cancelled: c.cancelled,
	}
	s.Depth = s.Ready + s.Scheduled + s.Leased
	if oldest != 0 && oldest < now {
		s.OldestReady = instant(now).Sub(instant(oldest))
	}
	return s
}
