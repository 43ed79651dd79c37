// Package boltqueue is sluice's embedded durable queue: a [queue.Queue] in
// one bbolt file.
//
// Every change is committed with an fsync before the call that asked for
// it returns (bbolt's NoSync stays false), so an accepted task survives a
// process crash and a power loss. Concurrent callers share commits: one
// goroutine, the committer, takes every change waiting when the previous
// commit ends and applies them in one transaction with one fsync (a group
// commit that fires when the waiting writers have joined, never on a
// timer, so a lone caller waits for nothing but its own fsync). A change
// that is refused (a stale receipt, a key conflict, an invalid task) is
// refused alone; the others in its commit go through. A commit that fails
// (a full disk) fails every change in it, and none of them is applied.
//
// # Layout
//
// Tasks are numbered in enqueue order; the number, as 16 hexadecimal
// digits, is the task's ID. The file holds, each in a bucket of its own:
// the tasks' records (state, attempts, instants, key, outcome — about 100
// bytes), their payloads and results, the ready index (priority, ready
// time, task), the schedule index (ready time, task) of tasks not yet
// ready, the lease index (end of lease, task), the dead index (instant of
// death, task) of dead tasks, the idempotency keys (key → task, enqueue
// time, payload digest) and the expiry index that forgets keys after the
// dedup window and finished tasks after their retention. Lease reads the
// fronts of the indexes and never scans the backlog; ListDead reads n
// entries of the dead index from its cursor's place and their records;
// the counts Stats reports are kept beside the indexes, so memory does
// not grow with the backlog (bbolt maps the file; only the pages touched
// are resident).
//
// The dead index is newer than the file format: Open builds it, reading
// every task once, when the file was last written by a boltqueue without
// it (and logs so). Such a file opens unchanged otherwise, and an earlier
// boltqueue still opens a file this one wrote (it ignores the index,
// which the next Open of this one builds again).
//
// A lease is recorded in the file: after a restart it is still held until
// it expires, then its task is handed out again (at-least-once).
//
// Only one process opens a file at a time (bbolt locks it); Open waits up
// to Options.LockTimeout for the lock.
package boltqueue

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/queue"
)

// Options configure a queue. The zero value of each field means its
// documented default.
type Options struct {
	// MaxPayload is the largest task payload, in bytes (default 1 MiB,
	// at most 64 MiB).
	MaxPayload int
	// MaxResult is the largest result Ack keeps, in bytes (default
	// 64 KiB, at most 16 MiB).
	MaxResult int
	// MaxAttempts is a task's attempts when it does not say (default 25,
	// at most 1000).
	MaxAttempts int
	// DedupWindow is how long an idempotency key is remembered after its
	// task was enqueued (default 24 h).
	DedupWindow time.Duration
	// Retention is how long a succeeded or cancelled task is kept for Get
	// (default 24 h); DeadRetention the same for dead tasks, which
	// ListDead lists and Revive brings back until then (default 7 days).
	Retention     time.Duration
	DeadRetention time.Duration
	// PurgeInterval is how often forgotten keys and tasks past their
	// retention are deleted (default 1 min).
	PurgeInterval time.Duration
	// MaxFileSize, if positive, is the largest the file may grow to, in
	// bytes: past it, commits fail (Enqueue says so) as on a full disk.
	MaxFileSize int64
	// LockTimeout is how long Open waits for another process to release
	// the file (default 5 s).
	LockTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the queue's rare events (open, a failed commit,
	// recovery of leases); default slog.Default().
	Logger *slog.Logger

	// ackBeforeCommit answers Enqueue before its commit is durable: the
	// negative control of the crash tests, set only by them.
	ackBeforeCommit bool
}

func (o Options) withDefaults() (Options, error) {
	set := func(v *int, def, most int, name string) error {
		switch {
		case *v == 0:
			*v = def
		case *v < 0 || *v > most:
			return fmt.Errorf("boltqueue: %s %d: must be from 1 to %d", name, *v, most)
		}
		return nil
	}
	setD := func(v *time.Duration, def time.Duration, name string) error {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			return fmt.Errorf("boltqueue: %s %v: must be positive", name, *v)
		}
		return nil
	}
	for _, err := range []error{
		set(&o.MaxPayload, queue.DefaultMaxPayload, 64<<20, "MaxPayload"),
		set(&o.MaxResult, queue.DefaultMaxResult, 16<<20, "MaxResult"),
		set(&o.MaxAttempts, queue.DefaultMaxAttempts, 1000, "MaxAttempts"),
		setD(&o.DedupWindow, queue.DefaultDedupWindow, "DedupWindow"),
		setD(&o.Retention, queue.DefaultRetention, "Retention"),
		setD(&o.DeadRetention, queue.DefaultDeadRetention, "DeadRetention"),
		setD(&o.PurgeInterval, time.Minute, "PurgeInterval"),
		setD(&o.LockTimeout, 5*time.Second, "LockTimeout"),
	} {
		if err != nil {
			return o, err
		}
	}
	if o.MaxFileSize < 0 {
		return o, fmt.Errorf("boltqueue: MaxFileSize %d: must be positive (0: no bound)", o.MaxFileSize)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Queue is a queue.Queue in one bbolt file. Safe for concurrent use.
type Queue struct {
	db   *bolt.DB
	o    Options
	path string

	ops  chan *op
	quit chan struct{}
	done chan struct{} // closed when the committer and janitor have ended

	mu     sync.RWMutex // held for reading by every call, for writing by Close
	closed bool

	commits atomic.Int64 // transactions committed (a test's view of grouping)
	changes atomic.Int64 // changes applied in them
}

var _ queue.Queue = (*Queue)(nil)

// Bucket names.
var (
	bTasks    = []byte("tasks")
	bPayloads = []byte("payloads")
	bResults  = []byte("results")
	bReady    = []byte("ready")
	bSchedule = []byte("schedule")
	bLeases   = []byte("leases")
	bKeys     = []byte("keys")
	bExpiry   = []byte("expiry")
	bMeta     = []byte("meta")
	bDead     = []byte("dead")
	// allBuckets are the buckets every file has; Open adds bDead (see
	// ensureDeadIndex).
	allBuckets = [][]byte{bTasks, bPayloads, bResults, bReady, bSchedule, bLeases, bKeys, bExpiry, bMeta}
)

// Open opens (creating it if needed) the queue in the file at path.
func Open(path string, o Options) (*Queue, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      o.LockTimeout,
		FreelistType: bolt.FreelistMapType,
		MaxSize:      int(o.MaxFileSize),
		// Read transactions never wait for a remap up to this size.
		InitialMmapSize: 256 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("boltqueue: open %s: %w", path, err)
	}
	var held int64
	indexed := -1
	start := time.Now()
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		held = loadCounts(tx).leased
		n, err := ensureDeadIndex(tx)
		indexed = n
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltqueue: open %s: %w", path, err)
	}
	q := &Queue{db: db, o: o, path: path, ops: make(chan *op, 1024), quit: make(chan struct{}), done: make(chan struct{})}
	if held > 0 {
		o.Logger.Info("boltqueue: opened with leases held before the restart; their tasks return when the leases end", "leases", held)
	}
	if indexed > 0 {
		o.Logger.Info("boltqueue: built the index of dead tasks (the file was last written by a boltqueue without it)",
			"dead", indexed, "took", time.Since(start))
	}
	var wg sync.WaitGroup
	wg.Go(q.commit)
	wg.Go(q.janitor)
	go func() { wg.Wait(); close(q.done) }()
	return q, nil
}

// Path returns the file's path.
func (q *Queue) Path() string { return q.path }

// Close commits the changes already submitted, stops the queue and closes
// the file. Leases stay recorded and end when they expire. Idempotent.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	close(q.quit)
	q.mu.Unlock()
	<-q.done
	if err := q.db.Close(); err != nil {
		return fmt.Errorf("boltqueue: close: %w", err)
	}
	return nil
}

// op is one change waiting for a commit.
type op struct {
	// apply makes the change in tx. An error that is a refusal
	// (isRefusal) is returned before anything was written and refuses
	// this change alone; any other error fails the whole commit.
	apply func(w *writer) error
	// bytes is roughly what the change writes, to bound a commit.
	bytes int
	// taken is set by the committer when it takes the op, or by the
	// caller when it gives up first; whoever sets it decides.
	taken atomic.Bool
	// answered is closed when err holds the outcome.
	answered chan struct{}
	err      error
	// early, for the negative control: answered before the commit.
	early bool
}

func isRefusal(err error) bool {
	return errors.Is(err, queue.ErrInvalid) || errors.Is(err, queue.ErrKeyConflict) ||
		errors.Is(err, queue.ErrLeaseLost) || errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrFinished) ||
		errors.Is(err, queue.ErrNotDead) || errors.Is(err, queue.ErrDeadlinePassed)
}

// submit hands a change to the committer and waits for its outcome. If
// ctx ends before the committer took it, nothing is applied and ctx's
// error is returned; once taken, the change is waited for (a commit's
// fsync) so the caller always learns whether it was applied.
func (q *Queue) submit(ctx context.Context, o *op) error {
	o.answered = make(chan struct{})
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		return queue.ErrClosed
	}
	select {
	case q.ops <- o:
	case <-ctx.Done():
		q.mu.RUnlock()
		return ctx.Err()
	}
	q.mu.RUnlock()
	select {
	case <-o.answered:
		return o.err
	case <-ctx.Done():
		if o.taken.CompareAndSwap(false, true) {
			return ctx.Err()
		}
		<-o.answered
		return o.err
	}
}

// Group bounds: a commit takes at most this many changes and about this
// many bytes.
const (
	maxGroup      = 4096
	maxGroupBytes = 32 << 20
)

// commit is the committer: it takes the changes waiting, applies them in
// one transaction and answers each. It drains what is left when the queue
// closes.
func (q *Queue) commit() {
	group := make([]*op, 0, 64)
	answered := 0
	for {
		var first *op
		select {
		case first = <-q.ops:
		case <-q.quit:
			// Close holds no more senders: drain what was submitted.
			for {
				select {
				case o := <-q.ops:
					q.apply([]*op{o})
				default:
					return
				}
			}
		}
		group = append(group[:0], first)
		size := first.bytes
		// first may be one of those answered: wait for the others.
		rejoin(q.ops, answered-1)
	gather:
		for len(group) < maxGroup && size < maxGroupBytes {
			select {
			case o := <-q.ops:
				group = append(group, o)
				size += o.bytes
			default:
				break gather
			}
		}
		answered = q.apply(group)
	}
}

// rejoin gives the callers the last commit answered a chance to submit
// their next change before the next commit starts, so that n callers in a
// loop share one commit instead of splitting into two halves that
// alternate (the half answered always arriving just after the next commit
// started). It yields the processor while the changes waiting grow toward
// those answered, and stops when they are all back, when none came for
// rejoinStall, or after rejoinLongest in all: a caller that does not come
// back (one with other work between its calls) costs the next commit at
// most that, never a batching timer, and a lone caller costs nothing.
func rejoin(ops chan *op, answered int) {
	awaitCallers(func() int { return len(ops) }, min(len(ops)+answered, cap(ops)), time.Now, runtime.Gosched)
}

// awaitCallers is rejoin's loop, apart from the channel, the clock and
// the scheduler so that a test can drive it: it yields while waiting()
// grows toward want, within rejoinStall of the last growth and
// rejoinLongest in all.
func awaitCallers(waiting func() int, want int, now func() time.Time, yield func()) {
	start := now()
	seen, last := waiting(), start
	for seen < want {
		yield()
		t := now()
		if n := waiting(); n != seen {
			seen, last = n, t
		} else if t.Sub(last) > rejoinStall {
			return
		}
		if t.Sub(start) > rejoinLongest {
			return
		}
	}
}

// rejoinStall is how long rejoin waits for the next caller once the last
// one came back: a few goroutine switches. rejoinLongest bounds the whole
// wait, so that callers trickling in cannot make it a batching timer: a
// part of a commit's fsyncs (~0.5 ms here).
const (
	rejoinStall   = 50 * time.Microsecond
	rejoinLongest = 250 * time.Microsecond
)

// crashHook, when set by the crash tests, is called at named points; it
// may kill the process there.
var crashHook func(point string)

func crashPoint(point string) {
	if crashHook != nil {
		crashHook(point)
	}
}

// apply commits one group and returns how many changes it answered.
func (q *Queue) apply(group []*op) int {
	live := group[:0:0]
	for _, o := range group {
		if o.taken.CompareAndSwap(false, true) {
			live = append(live, o)
		}
	}
	if len(live) == 0 {
		return 0
	}
	err := q.db.Update(func(tx *bolt.Tx) error {
		w := newWriter(tx, q.o.Now(), q.o)
		for i, o := range live {
			if i == len(live)/2 && len(live) > 1 {
				crashPoint("mid-commit")
			}
			o.err = o.apply(w)
			if o.err != nil && !isRefusal(o.err) {
				return o.err
			}
		}
		if err := w.saveMeta(); err != nil {
			return err
		}
		if q.o.ackBeforeCommit {
			for _, o := range live {
				o.early = true
				close(o.answered)
			}
			crashPoint("answered-before-commit")
		}
		return nil
	})
	if err != nil {
		q.o.Logger.Error("boltqueue: a commit failed; every change in it was refused", "changes", len(live), "err", err)
		err = fmt.Errorf("boltqueue: commit: %w", err)
		for _, o := range live {
			if !o.early {
				o.err = err
			}
		}
	} else {
		q.commits.Add(1)
		q.changes.Add(int64(len(live)))
	}
	for _, o := range live {
		if !o.early {
			close(o.answered)
		}
	}
	return len(live)
}

// janitor purges forgotten keys and finished tasks past their retention.
func (q *Queue) janitor() {
	t := time.NewTicker(q.o.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-q.quit:
			return
		case <-t.C:
			o := &op{apply: func(w *writer) error { return w.purge(purgeBatch) }}
			if err := q.submit(context.Background(), o); err != nil && !errors.Is(err, queue.ErrClosed) {
				q.o.Logger.Warn("boltqueue: purge failed", "err", err)
			}
		}
	}
}

const purgeBatch = 10000

// Enqueue implements queue.Queue.
func (q *Queue) Enqueue(ctx context.Context, tasks ...queue.Task) ([]queue.Enqueued, error) {
	limits := queue.Limits{MaxPayload: q.o.MaxPayload, MaxAttempts: 1000}
	size := 0
	digests := make([][sha256.Size]byte, len(tasks))
	for i, t := range tasks {
		if err := queue.Check(i, t, limits); err != nil {
			return nil, err
		}
		size += len(t.Payload) + len(t.Key) + 128
		if t.Key != "" {
			digests[i] = sha256.Sum256(t.Payload)
		}
	}
	if len(tasks) == 0 {
		return []queue.Enqueued{}, nil
	}
	var out []queue.Enqueued
	o := &op{bytes: size, apply: func(w *writer) error {
		var err error
		out, err = w.enqueue(tasks, digests)
		return err
	}}
	if err := q.submit(ctx, o); err != nil {
		return nil, err
	}
	crashPoint("enqueue-synced")
	return out, nil
}

// Lease implements queue.Queue.
func (q *Queue) Lease(ctx context.Context, n int, visibility time.Duration) ([]queue.Lease, error) {
	if err := queue.CheckLease(n, visibility); err != nil {
		return nil, err
	}
	var out []queue.Lease
	o := &op{bytes: n * 256, apply: func(w *writer) error {
		var err error
		out, err = w.lease(n, visibility)
		return err
	}}
	if err := q.submit(ctx, o); err != nil {
		return nil, err
	}
	crashPoint("lease-committed")
	return out, nil
}

// Extend implements queue.Queue.
func (q *Queue) Extend(ctx context.Context, r queue.Receipt, visibility time.Duration) (time.Time, error) {
	if err := queue.CheckVisibility(visibility); err != nil {
		return time.Time{}, err
	}
	if err := queue.CheckReceipt(r); err != nil {
		return time.Time{}, err
	}
	var until time.Time
	err := q.submit(ctx, &op{bytes: 256, apply: func(w *writer) error {
		var err error
		until, err = w.extend(r, visibility)
		return err
	}})
	return until, err
}

// Ack implements queue.Queue.
func (q *Queue) Ack(ctx context.Context, r queue.Receipt, result []byte) error {
	if err := queue.CheckReceipt(r); err != nil {
		return err
	}
	if len(result) > q.o.MaxResult {
		return fmt.Errorf("%w: result of task %s: %d bytes, more than the %d kept", queue.ErrInvalid, r.ID, len(result), q.o.MaxResult)
	}
	return q.submit(ctx, &op{bytes: 256 + len(result), apply: func(w *writer) error { return w.ack(r, result) }})
}

// Retry implements queue.Queue.
func (q *Queue) Retry(ctx context.Context, r queue.Receipt, how queue.Retry) error {
	if err := queue.CheckReceipt(r); err != nil {
		return err
	}
	return q.submit(ctx, &op{bytes: 256 + len(how.Reason), apply: func(w *writer) error { return w.retry(r, how) }})
}

// DeadLetter implements queue.Queue.
func (q *Queue) DeadLetter(ctx context.Context, r queue.Receipt, reason string) error {
	if err := queue.CheckReceipt(r); err != nil {
		return err
	}
	return q.submit(ctx, &op{bytes: 256 + len(reason), apply: func(w *writer) error { return w.deadLetter(r, reason) }})
}

// Cancel implements queue.Queue.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	return q.submit(ctx, &op{bytes: 256, apply: func(w *writer) error { return w.cancel(id) }})
}

// Revive implements queue.Queue: the task's record, its indexes and the
// counts change in one commit of the committer, so a concurrent Revive of
// the same task finds it queued or scheduled (ErrNotDead).
func (q *Queue) Revive(ctx context.Context, id string, at time.Time) error {
	return q.submit(ctx, &op{bytes: 256, apply: func(w *writer) error { return w.revive(id, at) }})
}

// ListDead implements queue.Queue: one read transaction (it does not wait
// for the committer) that seeks the cursor's place in the dead index and
// reads the next n entries and their tasks.
func (q *Queue) ListDead(ctx context.Context, after string, n int) ([]queue.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := queue.CheckList(n); err != nil {
		return nil, err
	}
	var out []queue.Info
	err := q.view(func(tx *bolt.Tx) error {
		var err error
		out, err = listDead(tx, after, n, nanos(q.o.Now()))
		return err
	})
	return out, err
}

// view runs a read transaction unless the queue is closed.
func (q *Queue) view(fn func(tx *bolt.Tx) error) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return queue.ErrClosed
	}
	return q.db.View(fn)
}

// Get implements queue.Queue.
func (q *Queue) Get(ctx context.Context, id string) (queue.Info, error) {
	if err := ctx.Err(); err != nil {
		return queue.Info{}, err
	}
	var info queue.Info
	err := q.view(func(tx *bolt.Tx) error {
		var err error
		info, err = get(tx, id, nanos(q.o.Now()))
		return err
	})
	return info, err
}

// Stats implements queue.Queue.
func (q *Queue) Stats(ctx context.Context) (queue.Stats, error) {
	if err := ctx.Err(); err != nil {
		return queue.Stats{}, err
	}
	var s queue.Stats
	err := q.view(func(tx *bolt.Tx) error {
		s = stats(tx, nanos(q.o.Now()))
		return nil
	})
	s.Durability = "fsync on every commit: an accepted task survives a crash and a power loss"
	return s, err
}

// CommitStats reports how many transactions were committed and how many
// changes they carried: their ratio is the group commit's mean size.
func (q *Queue) CommitStats() (commits, changes int64) { return q.commits.Load(), q.changes.Load() }
