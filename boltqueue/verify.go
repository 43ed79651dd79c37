package boltqueue

import (
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/queue"
)

// Verify checks the queue file at path, which no process may have open:
// bbolt's own consistency check (every page reachable once, no page both
// used and free), then the queue's (every index entry names a task in the
// state the index says, every dead task has its entry in the dead index,
// and the counts match the indexes). It returns every problem found,
// joined, or nil. The dead index of a file last written by a boltqueue
// without it is not checked: it is not kept there, and Open builds it. A
// file with no bucket at all is a queue whose first Open was killed before
// it created them: it holds nothing, and the next Open creates them.
func Verify(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("boltqueue: verify %s: %w", path, err)
	}
	defer db.Close()
	var problems []error
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			problems = append(problems, err)
		}
		if k, _ := tx.Cursor().First(); k == nil && len(problems) == 0 {
			return nil // no bucket yet: never initialised, empty
		}
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				problems = append(problems, fmt.Errorf("bucket %s is missing", name))
			}
		}
		if len(problems) > 0 {
			return nil
		}
		problems = append(problems, verifyIndexes(tx)...)
		return nil
	})
	if err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("boltqueue: verify %s: %w", path, errors.Join(problems...))
	}
	return nil
}

func verifyIndexes(tx *bolt.Tx) []error {
	var problems []error
	tasks := tx.Bucket(bTasks)
	check := func(index string, id []byte, want queue.State) {
		b := tasks.Get(id)
		if b == nil {
			problems = append(problems, fmt.Errorf("%s index names task %x, which is missing", index, id))
			return
		}
		r, err := decodeRecord(b)
		if err != nil {
			problems = append(problems, fmt.Errorf("task %x: %w", id, err))
		} else if r.state != want {
			problems = append(problems, fmt.Errorf("%s index names task %x, which is %v", index, id, r.state))
		}
	}
	var n counts
	var dead int64
	deadKept := deadIndexCurrent(tx, tx.ID())
	if deadKept {
		_ = tx.Bucket(bDead).ForEach(func(k, _ []byte) error {
			dead++
			check("dead", k[8:], queue.Dead)
			if r, err := readRecord(tx, k[8:]); err == nil && r.state == queue.Dead && r.finished != keyTime(k) {
				problems = append(problems, fmt.Errorf("dead index names task %x as dead at %d, but it died at %d", k[8:], keyTime(k), r.finished))
			}
			return nil
		})
	}
	_ = tx.Bucket(bReady).ForEach(func(k, _ []byte) error {
		n.ready++
		check("ready", k[9:], queue.Queued)
		return nil
	})
	_ = tx.Bucket(bSchedule).ForEach(func(k, _ []byte) error {
		n.scheduled++
		check("schedule", k[8:], queue.Scheduled)
		return nil
	})
	_ = tx.Bucket(bLeases).ForEach(func(k, _ []byte) error {
		n.leased++
		check("lease", k[8:], queue.Leased)
		return nil
	})
	_ = tasks.ForEach(func(k, v []byte) error {
		r, err := decodeRecord(v)
		if err != nil {
			problems = append(problems, fmt.Errorf("task %x: %w", k, err))
			return nil
		}
		if r.state.Finished() {
			(*n.finishedCount(r.state))++
		}
		return nil
	})
	if c := loadCounts(tx); c != n {
		problems = append(problems, fmt.Errorf("the counts say %+v, the indexes hold %+v", c, n))
	}
	if deadKept && dead != n.dead {
		problems = append(problems, fmt.Errorf("the dead index holds %d entries for %d dead tasks", dead, n.dead))
	}
	return problems
}
