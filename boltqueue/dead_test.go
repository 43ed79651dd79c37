package boltqueue_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queuetest"
)

// deadFile opens a queue at path on clock, kills three tasks in the order
// 2, 0, 1 (a second apart), closes it and returns their IDs in that order.
func deadFile(t *testing.T, path string, clock *queuetest.Clock) []string {
	t.Helper()
	q, err := boltqueue.Open(path, boltqueue.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := t.Context()
	got, err := q.Enqueue(ctx, queue.Task{Payload: []byte("a")}, queue.Task{Payload: []byte("b")}, queue.Task{Payload: []byte("c")})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := q.Lease(ctx, 3, time.Hour)
	if err != nil || len(ls) != 3 {
		t.Fatalf("Lease = %v, %v", ls, err)
	}
	for _, i := range []int{2, 0, 1} {
		if err := q.DeadLetter(ctx, ls[i].Receipt, "reason "+ls[i].ID); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	return []string{got[2].ID, got[0].ID, got[1].ID}
}

// update changes the closed file at path with bbolt directly.
func update(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// listDeadIDs opens the queue at path, lists its dead and closes it; it
// returns the IDs and what Open logged.
func listDeadIDs(t *testing.T, path string, clock *queuetest.Clock) ([]string, string) {
	t.Helper()
	var log bytes.Buffer
	q, err := boltqueue.Open(path, boltqueue.Options{Now: clock.Now, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	infos, err := q.ListDead(t.Context(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(infos))
	for i, in := range infos {
		ids[i] = in.ID
	}
	return ids, log.String()
}

// A file written before the dead index (no bucket "dead", no mark) is
// consistent for Verify, and Open builds the index, says so, and lists
// the dead in the order they died.
func TestDeadIndexBuiltForAnEarlierFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	clock := queuetest.NewFakeClock()
	want := deadFile(t, path, clock)
	update(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("dead")); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Delete([]byte("dead-index-txid"))
	})
	if err := boltqueue.Verify(path); err != nil {
		t.Fatalf("Verify of a file without the dead index: %v", err)
	}
	got, log := listDeadIDs(t, path, clock)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ListDead after Open built the index = %v, want %v", got, want)
	}
	if !strings.Contains(log, "built the index of dead tasks") || !strings.Contains(log, "dead=3") {
		t.Errorf("Open's log does not say it built the index of 3 dead tasks:\n%s", log)
	}
	if err := boltqueue.Verify(path); err != nil {
		t.Fatalf("Verify after the build: %v", err)
	}
	// Built once: the next Open finds it current.
	if _, log := listDeadIDs(t, path, clock); strings.Contains(log, "built the index") {
		t.Errorf("the index was built again on a file this version wrote:\n%s", log)
	}
}

// A commit by a boltqueue that does not keep the index (an earlier one,
// run on the file after this one) makes it stale: Open builds it again.
func TestDeadIndexRebuiltAfterAnEarlierVersionWrote(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	clock := queuetest.NewFakeClock()
	want := deadFile(t, path, clock)
	// As an earlier version's commit: the index not kept (one entry
	// lost), the mark not written.
	update(t, path, func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("dead")).Cursor()
		k, _ := c.First()
		return tx.Bucket([]byte("dead")).Delete(k)
	})
	if err := boltqueue.Verify(path); err != nil {
		t.Fatalf("Verify of a file whose index is not current: %v", err)
	}
	got, log := listDeadIDs(t, path, clock)
	if fmt.Sprint(got) != fmt.Sprint(want) || !strings.Contains(log, "built the index") {
		t.Errorf("ListDead = %v (log %q), want %v after a rebuild", got, log, want)
	}
}

// Verify sees a dead index that is current but wrong: the negative
// control of the check the crash tests run after every kill.
func TestVerifySeesABrokenDeadIndex(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	deadFile(t, path, queuetest.NewFakeClock())
	update(t, path, func(tx *bolt.Tx) error {
		dead := tx.Bucket([]byte("dead"))
		k, _ := dead.Cursor().First()
		if err := dead.Delete(k); err != nil {
			return err
		}
		// Claim the index current, as this version's commits do.
		return tx.Bucket([]byte("meta")).Put([]byte("dead-index-txid"), binaryID(tx.ID()))
	})
	err := boltqueue.Verify(path)
	if err == nil || !strings.Contains(err.Error(), "dead index holds 2 entries for 3 dead tasks") {
		t.Fatalf("Verify = %v, want the missing entry reported", err)
	}
}

// A file whose first Open was killed before it made the buckets holds
// nothing and passes; a file missing one bucket does not.
func TestVerifyEmptyAndPartialFiles(t *testing.T) {
	t.Parallel()
	bare := filepath.Join(t.TempDir(), "bare.db")
	db, err := bolt.Open(bare, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := boltqueue.Verify(bare); err != nil {
		t.Errorf("Verify(a bbolt file without buckets) = %v, want nil", err)
	}
	path := filepath.Join(t.TempDir(), "queue.db")
	deadFile(t, path, queuetest.NewFakeClock())
	update(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("meta")) })
	if err := boltqueue.Verify(path); err == nil || !strings.Contains(err.Error(), "bucket meta is missing") {
		t.Errorf("Verify(a file without its meta bucket) = %v, want it reported", err)
	}
}

func binaryID(id int) []byte {
	b := make([]byte, 8)
	for i := range 8 {
		b[7-i] = byte(id >> (8 * i))
	}
	return b
}

// Dead tasks past the dead retention disappear from ListDead and the
// counts; a revived task that finished again is kept for its own
// retention, not its earlier death's (here shorter, from an earlier
// configuration).
func TestDeadRetention(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	clock := queuetest.NewFakeClock()
	ids := deadFile(t, path, clock) // died at Epoch, +1 s, +2 s; kept 7 days
	q, err := boltqueue.Open(path, boltqueue.Options{Now: clock.Now, Retention: 10 * 24 * time.Hour, DeadRetention: 30 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := t.Context()
	// ids[0] revived and succeeded in its new life, an hour on.
	clock.Advance(time.Hour)
	if err := q.Revive(ctx, ids[0], time.Time{}); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Lease(ctx, 1, time.Minute)
	if err != nil || len(ls) != 1 || ls[0].ID != ids[0] {
		t.Fatalf("Lease = %v, %v; want %s", ls, err, ids[0])
	}
	if err := q.Ack(ctx, ls[0].Receipt, nil); err != nil {
		t.Fatal(err)
	}
	// Seven days and a minute on, the entries of the deaths (7 days, the
	// earlier configuration) are due, but not the tasks: the succeeded
	// one is kept 10 days from its success, the dead 30 days now.
	clock.Advance(7*24*time.Hour - time.Hour + time.Minute)
	if err := boltqueue.Purge(q); err != nil {
		t.Fatal(err)
	}
	if info, err := q.Get(ctx, ids[0]); err != nil || info.State != queue.Succeeded {
		t.Errorf("the revived task after its earlier death's retention: %+v, %v; want kept, succeeded", info, err)
	}
	if dead, err := q.ListDead(ctx, "", 10); err != nil || len(dead) != 2 {
		t.Fatalf("ListDead = %v, %v; want the two dead kept for the new retention", dead, err)
	}
	if s, err := q.Stats(ctx); err != nil || s.Dead != 2 || s.Succeeded != 1 {
		t.Errorf("Stats = %+v, %v; want 2 dead, 1 succeeded", s, err)
	}
	// Past 30 days: every one is past its retention.
	clock.Advance(24 * 24 * time.Hour)
	if err := boltqueue.Purge(q); err != nil {
		t.Fatal(err)
	}
	if dead, err := q.ListDead(ctx, "", 10); err != nil || len(dead) != 0 {
		t.Errorf("ListDead past the dead retention = %v, %v; want none", dead, err)
	}
	for _, id := range ids {
		if _, err := q.Get(ctx, id); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Get(%s) past its retention = %v, want ErrNotFound", id, err)
		}
	}
	if s, err := q.Stats(ctx); err != nil || s.Dead != 0 || s.Succeeded != 0 {
		t.Errorf("Stats = %+v, %v; want nothing kept", s, err)
	}
	if _, err := q.ListDead(ctx, ids[1], 1); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("ListDead after a forgotten task = %v, want ErrNotFound", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := boltqueue.Verify(path); err != nil {
		t.Fatal(err)
	}
}
