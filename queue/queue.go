// Package queue is the contract of sluice's durable queue: the half of the
// client side that "absorbs the full input rate" while processors take out
// only what the current slice allows.
//
// A [Queue] accepts every task at once ([Queue.Enqueue] returns only when
// the tasks are durable), hands out ready tasks under leases
// ([Queue.Lease]), and records what became of each: acknowledged
// ([Queue.Ack], with a bounded result for asynchronous request-reply),
// retried at an instant with or without spending an attempt
// ([Queue.Retry]), dead-lettered with a reason ([Queue.DeadLetter]) or
// cancelled ([Queue.Cancel]). Delivery is at-least-once: a lease that
// expires returns its task to the queue, and the expired holder's
// acknowledgement is refused with [ErrLeaseLost]. Dead tasks are listed
// in the order they died ([Queue.ListDead]) and can be brought back for
// a new life ([Queue.Revive]).
//
// The backends are [github.com/sluicehq/sluice/boltqueue] (one bbolt file,
// the embedded default) and [github.com/sluicehq/sluice/jsqueue] (NATS
// JetStream, for a fleet). [github.com/sluicehq/sluice/queuetest] is the
// conformance suite both pass unchanged.
//
// # A task's life
//
//	Enqueue ──▶ scheduled ──(not-before passes)──▶ queued ──Lease──▶ leased
//	                ▲                                 ▲                │
//	                └──────── Retry(at) ◀─────────────┴── lease expires┤
//	                                                                   ├─Ack──────▶ succeeded
//	                                                                   └─DeadLetter▶ dead
//	queued, scheduled, leased ──Cancel──▶ cancelled
//	dead ──Revive(at)──▶ scheduled or queued (a new life: attempts from zero)
//
// A task is *ready* when it is queued (its not-before has passed). Lease
// hands out ready tasks by priority (higher first), then by the instant
// they became ready (older first). A task whose deadline has passed when
// Lease reaches it is dead-lettered with the reason [ReasonDeadline], never
// handed out. Attempts are counted when a lease is handed out; a throttled
// retry (Retry with Throttled set: the target said 429 or 503 with
// Retry-After) gives its attempt back, so waiting for a target's capacity
// never exhausts a task. A task leased for the last of its attempts whose
// lease then expires is dead-lettered with [ReasonAttempts] when Lease next
// reaches it.
//
// # Dead letters
//
// A dead task keeps its payload, its reason (Info.Outcome) and its place
// in the order of deaths for the dead retention ([DefaultDeadRetention]
// unless the backend is configured otherwise); after that it may
// disappear. [Queue.ListDead] pages through the dead tasks, oldest death
// first, with the ID of the last task of a page as the cursor of the next.
// [Queue.Revive] gives a dead task a new life under the same ID: its key,
// payload, cost, priority, max attempts and deadline are kept, its
// attempts count from zero again, and it is ready at the instant given.
// To replay every dead task, page from "" and revive each task of a page
// before asking for the next: a revived task keeps its place as a cursor,
// and a task Revive refused (its deadline passed) is not met again.
package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Queue is a durable task queue. Implementations are safe for concurrent
// use by many goroutines and, where the backend says so, many processes.
//
// Every method returns [ErrClosed] after Close. Errors from the backend
// (a full disk, a server that does not answer) are returned wrapped; a
// method that returns an error changed nothing it was asked to change,
// except that a backend may not know whether a write that timed out was
// applied (it says so in its documentation).
type Queue interface {
	// Enqueue stores tasks and returns, for each in order, its ID and
	// whether it was a duplicate of a task already stored under the same
	// Key within the dedup window (then nothing was stored for it and the
	// ID is the earlier task's). It returns only when the tasks are
	// durable. A batch is all or nothing: a task that fails validation
	// ([TaskError]) or whose Key is held by a task with another payload
	// ([ErrKeyConflict]) fails the whole call and stores none of it.
	Enqueue(ctx context.Context, tasks ...Task) ([]Enqueued, error)

	// Lease hands out up to n ready tasks, by priority then ready time,
	// each under a lease that lasts visibility from now and a receipt that
	// identifies it. It returns at once with what is ready, possibly
	// nothing; it never waits for tasks to arrive. n must be from 1 to
	// [MaxLease]; visibility from [MinVisibility] to [MaxVisibility].
	Lease(ctx context.Context, n int, visibility time.Duration) ([]Lease, error)

	// Extend makes a lease last visibility from now and returns its new
	// end. It fails with [ErrLeaseLost] if the lease has expired, was
	// cancelled or is not the task's current one.
	Extend(ctx context.Context, r Receipt, visibility time.Duration) (time.Time, error)

	// Ack records the task as succeeded, with result (at most the
	// backend's result bound; nil for none) kept for [Queue.Get]. It
	// fails with [ErrLeaseLost] if the lease is not current, and then
	// changes nothing.
	Ack(ctx context.Context, r Receipt, result []byte) error

	// Retry returns the task to the queue, ready at how.At (now if zero or
	// past), with how.Reason as its last outcome. A throttled retry gives
	// the attempt back. A retry that is not throttled, on the task's last
	// attempt, dead-letters it instead with how.Reason.
	Retry(ctx context.Context, r Receipt, how Retry) error

	// DeadLetter records the task as dead with reason; it is never leased
	// again.
	DeadLetter(ctx context.Context, r Receipt, reason string) error

	// ListDead returns up to n dead tasks, oldest death first, starting
	// after the task whose ID is after ("" for the oldest). Each Info is
	// the task as Get shows it: State Dead, Outcome the reason it died,
	// Finished the instant, Payload its payload. n must be from 1 to
	// [MaxList]. Its cost is O(n): backends keep the dead in the order of
	// deaths and read from the cursor's place, never the whole queue.
	// Fewer than n tasks (none at the end) means no more are dead now.
	//
	// after is the ID of a task an earlier ListDead returned: the page
	// starts after that task's place in the order of deaths, which it
	// keeps when it is revived (its latest death's place, if it died
	// again). It fails with [ErrNotFound] for an ID the queue does not
	// know (or has forgotten after its retention) and [ErrInvalid] for a
	// task that was never dead.
	ListDead(ctx context.Context, after string, n int) ([]Info, error)

	// Revive gives a dead task a new life: it becomes scheduled until at,
	// then queued (at once when at is zero or past), with its attempts
	// counted from zero, its lease gone, and its ID, key, payload, cost,
	// priority, max attempts, deadline and last outcome kept. It is
	// atomic: a task revived by two calls at once is revived once, and
	// the other call fails with [ErrNotDead].
	//
	// It fails with [ErrNotFound] for an unknown ID (or one forgotten
	// after its retention), [ErrNotDead] for a task that is not dead
	// (queued, scheduled, leased, succeeded, cancelled, or revived
	// already), [ErrDeadlinePassed] when the task's deadline has passed
	// (enqueue its payload again as a new task instead), and [ErrInvalid]
	// when at is not before the task's deadline; it then changes nothing.
	Revive(ctx context.Context, id string, at time.Time) error

	// Cancel records a task that is queued, scheduled or leased as
	// cancelled (a current lease is lost: its holder's Ack is refused). It
	// fails with [ErrNotFound] for an unknown ID and [ErrFinished] for a
	// task that already succeeded, died or was cancelled.
	Cancel(ctx context.Context, id string) error

	// Get returns what the queue knows of one task, or [ErrNotFound].
	// Finished tasks are kept for the backend's retention period.
	Get(ctx context.Context, id string) (Info, error)

	// Stats returns the queue's counts at one instant.
	Stats(ctx context.Context) (Stats, error)

	// Close releases the backend. Leases held stay held until they
	// expire. Close is idempotent.
	Close() error
}

// Limits every backend honours.
const (
	// MaxLease is the most tasks one Lease hands out.
	MaxLease = 10000
	// MaxList is the most tasks one ListDead returns.
	MaxList = 10000
	// MaxPriority is the highest priority; priorities run from 0 (the
	// default) to MaxPriority, and higher ones are leased first.
	MaxPriority = 9
	// MinVisibility and MaxVisibility bound a lease's duration.
	MinVisibility = time.Millisecond
	MaxVisibility = 12 * time.Hour
	// MaxKey is the longest idempotency key, in bytes.
	MaxKey = 256
	// MaxReason is the longest reason kept; longer ones are cut (on a
	// rune boundary) and marked with "…".
	MaxReason = 1024
)

// Defaults every backend applies where its options leave a field zero,
// so a task behaves the same on either.
const (
	DefaultMaxPayload    = 1 << 20
	DefaultMaxResult     = 64 << 10
	DefaultMaxAttempts   = 25
	DefaultDedupWindow   = 24 * time.Hour
	DefaultRetention     = 24 * time.Hour
	DefaultDeadRetention = 7 * 24 * time.Hour
)

// Reasons the queue itself gives.
const (
	// ReasonDeadline is the reason of a task dead-lettered because its
	// deadline passed before it was delivered.
	ReasonDeadline = "deadline passed"
	// ReasonAttempts is the reason of a task dead-lettered because its
	// last attempt's lease expired.
	ReasonAttempts = "attempts exhausted: the last lease expired"
)

// Task is a unit of work as enqueued.
type Task struct {
	// Key makes Enqueue idempotent: within the dedup window, a second task
	// with the same Key is the first task (Enqueued.Duplicate), and one
	// with the same Key and another payload is refused with
	// ErrKeyConflict. Empty means no key. At most MaxKey bytes.
	Key string
	// Payload is opaque to the queue; at most the backend's payload bound
	// (a nil payload is allowed).
	Payload []byte
	// Cost is what delivering the task spends of its target's limit, in
	// the limit's units; 0 means 1. Positive and finite.
	Cost float64
	// Priority from 0 (default) to MaxPriority; higher is leased first.
	Priority int
	// NotBefore is the earliest instant the task is handed out; zero
	// means at once.
	NotBefore time.Time
	// Deadline, if not zero, is the instant after which the task is not
	// delivered: Lease dead-letters it with ReasonDeadline instead. It
	// must be after NotBefore.
	Deadline time.Time
	// MaxAttempts is how many leases the task may be handed out under
	// (throttled retries not counted); 0 means the backend's default.
	MaxAttempts int
}

// Enqueued is what Enqueue says of one task.
type Enqueued struct {
	// ID names the task in the queue.
	ID string
	// Duplicate is true when a task with the same Key was already stored
	// within the dedup window: ID is that task's and nothing was stored.
	Duplicate bool
}

// Receipt identifies one lease on one task. A receipt from an earlier
// lease of the same task is stale: the queue refuses it.
type Receipt struct {
	ID    string
	Token string
}

// Lease is a task handed out by Queue.Lease, under a lease.
type Lease struct {
	Receipt
	Task
	// Attempt is the attempt this lease is (1 for the first).
	Attempt int
	// Until is when the lease expires.
	Until time.Time
	// Enqueued is when the task was enqueued.
	Enqueued time.Time
}

// Retry says when and why a leased task goes back to the queue.
type Retry struct {
	// At is when the task is ready again; zero or past means now.
	At time.Time
	// Reason is kept as the task's last outcome (e.g. "503 Service
	// Unavailable").
	Reason string
	// Throttled gives the attempt back: the delivery did not happen
	// because the target said it was over its limit.
	Throttled bool
}

// State is where a task is in its life.
type State uint8

// The states of a task.
const (
	// Queued: ready, waiting for a lease.
	Queued State = iota + 1
	// Scheduled: waiting for its not-before or retry instant.
	Scheduled
	// Leased: handed out, its lease not yet expired.
	Leased
	// Succeeded: acknowledged.
	Succeeded
	// Dead: dead-lettered, with a reason.
	Dead
	// Cancelled: cancelled before it finished.
	Cancelled
)

var stateNames = [...]string{"", "queued", "scheduled", "leased", "succeeded", "dead", "cancelled"}

// String returns the state's name as the API and docs spell it.
func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Finished reports whether s is succeeded, dead or cancelled.
func (s State) Finished() bool { return s == Succeeded || s == Dead || s == Cancelled }

// Info is what the queue knows of one task.
type Info struct {
	ID       string
	Key      string
	State    State
	Priority int
	Cost     float64
	// Attempts is how many leases counted so far.
	Attempts    int
	MaxAttempts int
	Enqueued    time.Time
	// ReadyAt is when the task is (or was) ready: its not-before, or the
	// instant a retry or an expired lease put it back.
	ReadyAt  time.Time
	Deadline time.Time
	// LeasedUntil is when the current lease expires (zero unless Leased).
	LeasedUntil time.Time
	// Finished is when the task succeeded, died or was cancelled (zero
	// while it is not finished, as after Revive).
	Finished time.Time
	// Outcome is the last reason given: a retry's, the dead letter's, or
	// "cancelled".
	Outcome string
	// Result is what Ack kept (at most the backend's result bound).
	Result []byte
	// Payload is the task's payload.
	Payload []byte
}

// Stats are a queue's counts at one instant.
type Stats struct {
	// Depth is every task not finished: Ready + Scheduled + Leased.
	Depth     int64
	Ready     int64
	Scheduled int64
	Leased    int64
	Succeeded int64
	Dead      int64
	Cancelled int64
	// OldestReady is how long the longest-waiting ready task has been
	// ready (0 when none is).
	OldestReady time.Duration
	// Durability says, in words, what a returned Enqueue survives (e.g.
	// "fsync on every commit: survives a power loss").
	Durability string
}

// Errors of the contract. Backends wrap them, so test with errors.Is.
var (
	// ErrNotFound: no task has that ID (or it was finished and its
	// retention has passed).
	ErrNotFound = errors.New("queue: no such task")
	// ErrLeaseLost: the receipt is not the task's current lease — it
	// expired, the task was cancelled or leased again, or the token is
	// not one the queue gave.
	ErrLeaseLost = errors.New("queue: the lease is not current (expired, cancelled, or leased again)")
	// ErrFinished: the task already succeeded, died or was cancelled.
	ErrFinished = errors.New("queue: the task is finished")
	// ErrNotDead: Revive was asked for a task that is not dead — it is
	// waiting, leased, succeeded, cancelled, or was revived already (by
	// an earlier or a concurrent call).
	ErrNotDead = errors.New("queue: the task is not dead")
	// ErrDeadlinePassed: Revive was asked for a dead task whose deadline
	// has passed; a new life would only die of it again. The task stays
	// dead.
	ErrDeadlinePassed = errors.New("queue: the task's deadline has passed")
	// ErrKeyConflict: a task with the same Key and another payload is
	// stored within the dedup window.
	ErrKeyConflict = errors.New("queue: the key is held by a task with another payload")
	// ErrInvalid: a task, a lease size, a visibility or a receipt is not
	// valid; the error says which field and why (see TaskError).
	ErrInvalid = errors.New("queue: invalid input")
	// ErrClosed: the queue was closed.
	ErrClosed = errors.New("queue: closed")
)

// TaskError says which task of an Enqueue call was refused, which field,
// and why. It wraps ErrInvalid or ErrKeyConflict.
type TaskError struct {
	// Index is the task's position in the call.
	Index int
	// Field is the Task field at fault ("payload", "key", ...).
	Field string
	// Reason says what is wrong, in words.
	Reason string
	// Err is ErrInvalid or ErrKeyConflict.
	Err error
}

func (e *TaskError) Error() string {
	return fmt.Sprintf("queue: task %d: %s: %s", e.Index, e.Field, e.Reason)
}

func (e *TaskError) Unwrap() error { return e.Err }

// Limits a backend applies to tasks; Check uses them.
type Limits struct {
	// MaxPayload is the largest payload, in bytes.
	MaxPayload int
	// MaxAttempts is the largest MaxAttempts a task may ask for.
	MaxAttempts int
}

// Check validates task i of an Enqueue call against the contract and l,
// and returns a *TaskError naming the field, or nil. Backends call it for
// every task before storing any.
func Check(i int, t Task, l Limits) error {
	bad := func(field, format string, args ...any) error {
		return &TaskError{Index: i, Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalid}
	}
	switch {
	case len(t.Key) > MaxKey:
		return bad("key", "%d bytes, more than the %d allowed", len(t.Key), MaxKey)
	case t.Key != "" && !utf8.ValidString(t.Key):
		return bad("key", "not valid UTF-8")
	case len(t.Payload) > l.MaxPayload:
		return bad("payload", "%d bytes, more than the %d allowed", len(t.Payload), l.MaxPayload)
	case t.Cost < 0 || math.IsNaN(t.Cost) || math.IsInf(t.Cost, 0):
		return bad("cost", "%v: must be a positive finite number (0 means 1)", t.Cost)
	case t.Priority < 0 || t.Priority > MaxPriority:
		return bad("priority", "%d: must be from 0 to %d", t.Priority, MaxPriority)
	case t.MaxAttempts < 0 || t.MaxAttempts > l.MaxAttempts:
		return bad("max_attempts", "%d: must be from 0 (the default) to %d", t.MaxAttempts, l.MaxAttempts)
	case !t.Deadline.IsZero() && !t.NotBefore.IsZero() && !t.Deadline.After(t.NotBefore):
		return bad("deadline", "%s is not after not_before %s", t.Deadline.Format(time.RFC3339Nano), t.NotBefore.Format(time.RFC3339Nano))
	}
	return nil
}

// CheckLease validates Lease's arguments.
func CheckLease(n int, visibility time.Duration) error {
	if n < 1 || n > MaxLease {
		return fmt.Errorf("%w: lease size %d: must be from 1 to %d", ErrInvalid, n, MaxLease)
	}
	return CheckVisibility(visibility)
}

// CheckList validates ListDead's page size.
func CheckList(n int) error {
	if n < 1 || n > MaxList {
		return fmt.Errorf("%w: page size %d: must be from 1 to %d", ErrInvalid, n, MaxList)
	}
	return nil
}

// CheckRevive decides whether a dead task whose deadline is deadline
// (zero: none) may be revived at now to be ready at at (zero or past:
// now). It returns the instant the task is ready, or an error wrapping
// ErrDeadlinePassed (the deadline is not after now) or ErrInvalid (at is
// not before the deadline) that names the task id and the instants.
// Backends call it on the task as stored, in the change that revives it.
func CheckRevive(id string, deadline, now, at time.Time) (time.Time, error) {
	if at.Before(now) {
		at = now
	}
	switch {
	case deadline.IsZero():
	case !deadline.After(now):
		return time.Time{}, fmt.Errorf("%w: task %s: its deadline %s is not after now (%s)",
			ErrDeadlinePassed, id, deadline.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	case !at.Before(deadline):
		return time.Time{}, fmt.Errorf("%w: revive task %s at %s: not before its deadline %s",
			ErrInvalid, id, at.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
	}
	return at, nil
}

// CheckVisibility validates a lease's duration.
func CheckVisibility(visibility time.Duration) error {
	if visibility < MinVisibility || visibility > MaxVisibility {
		return fmt.Errorf("%w: visibility %v: must be from %v to %v", ErrInvalid, visibility, MinVisibility, MaxVisibility)
	}
	return nil
}

// CheckReceipt validates a receipt's shape (not whether it is current).
func CheckReceipt(r Receipt) error {
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: receipt: empty task ID", ErrInvalid)
	case r.Token == "":
		return fmt.Errorf("%w: receipt of task %s: empty token", ErrInvalid, r.ID)
	}
	return nil
}

// Reason cuts a reason to MaxReason bytes on a rune boundary, marking a
// cut with "…", and replaces invalid UTF-8.
func Reason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxReason {
		return s
	}
	cut := MaxReason - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// CostOf returns a task's cost with the default applied.
func CostOf(t Task) float64 {
	if t.Cost == 0 {
		return 1
	}
	return t.Cost
}
