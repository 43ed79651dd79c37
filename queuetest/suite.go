package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// Run runs the conformance suite against b. Each case opens its own queue
// and runs in parallel with the others.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.Unit == 0 {
		b.Unit = 200 * time.Millisecond
	}
	cases := []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"EnqueueGet", testEnqueueGet},
		{"InvalidTasks", testInvalidTasks},
		{"BatchAllOrNothing", testBatchAllOrNothing},
		{"Dedup", testDedup},
		{"DedupWindow", testDedupWindow},
		{"Order", testOrder},
		{"NotBefore", testNotBefore},
		{"LeaseExpiry", testLeaseExpiry},
		{"StaleReceipts", testStaleReceipts},
		{"Extend", testExtend},
		{"Retry", testRetry},
		{"ThrottledRetry", testThrottledRetry},
		{"AttemptsExhausted", testAttemptsExhausted},
		{"DeadLetter", testDeadLetter},
		{"Deadline", testDeadline},
		{"Cancel", testCancel},
		{"ListDead", testListDead},
		{"ListDeadArguments", testListDeadArguments},
		{"Revive", testRevive},
		{"ReviveRefused", testReviveRefused},
		{"ReviveConcurrent", testReviveConcurrent},
		{"ReviveDeadline", testReviveDeadline},
		{"ReviveStats", testReviveStats},
		{"ReplayAllByPages", testReplayAllByPages},
		{"DeadRestart", testDeadRestart},
		{"Result", testResult},
		{"Stats", testStats},
		{"LeaseArguments", testLeaseArguments},
		{"Closed", testClosed},
		{"Restart", testRestart},
		{"Concurrent", testConcurrent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newEnv(t, b))
		})
	}
}

// env is one case's queue, clock and time unit.
type env struct {
	b     Backend
	clock *Clock
	cfg   Config
	q     queue.Queue
	// u is one step of the timelines: a second on a fake clock, b.Unit
	// in real time.
	u   time.Duration
	ctx context.Context
}

func newEnv(t *testing.T, b Backend) *env {
	e := &env{b: b, ctx: t.Context()}
	if b.FakeClock {
		e.clock, e.u = NewFakeClock(), time.Second
	} else {
		e.clock, e.u = &Clock{}, b.Unit
	}
	e.cfg = Config{DedupWindow: 20 * e.u, MaxAttempts: 3}
	if b.FakeClock {
		e.cfg.Now = e.clock.Now
	}
	e.q = b.Open(t, e.cfg)
	t.Cleanup(func() { _ = e.q.Close() })
	return e
}

func (e *env) enqueue(t *testing.T, tasks ...queue.Task) []queue.Enqueued {
	t.Helper()
	got, err := e.q.Enqueue(e.ctx, tasks...)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if len(got) != len(tasks) {
		t.Fatalf("Enqueue of %d tasks answered %d", len(tasks), len(got))
	}
	return got
}

func (e *env) lease(t *testing.T, n int, vis time.Duration) []queue.Lease {
	t.Helper()
	got, err := e.q.Lease(e.ctx, n, vis)
	if err != nil {
		t.Fatalf("Lease(%d, %v): %v", n, vis, err)
	}
	if len(got) > n {
		t.Fatalf("Lease(%d) handed out %d", n, len(got))
	}
	return got
}

func (e *env) get(t *testing.T, id string) queue.Info {
	t.Helper()
	info, err := e.q.Get(e.ctx, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return info
}

func (e *env) wantState(t *testing.T, id string, want queue.State) queue.Info {
	t.Helper()
	info := e.get(t, id)
	if info.State != want {
		t.Fatalf("task %s is %v, want %v (info %+v)", id, info.State, want, info)
	}
	return info
}

// sameInstant compares instants exactly on a fake clock and within a
// half unit in real time (a call on a loaded machine can take a fifth of a unit).
func (e *env) sameInstant(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	slack := time.Duration(0)
	if !e.b.FakeClock {
		slack = e.u / 2
	}
	if d := got.Sub(want); d < -slack || d > slack {
		t.Errorf("%s = %v, want %v (off by %v)", what, got, want, d)
	}
}

func payloads(ls []queue.Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = string(l.Payload)
	}
	return out
}

func testEnqueueGet(t *testing.T, e *env) {
	t0 := e.clock.Now()
	task := queue.Task{Key: "order-1", Payload: []byte("hello"), Cost: 2.5, Priority: 3, Deadline: t0.Add(100 * e.u), MaxAttempts: 2}
	got := e.enqueue(t, task)
	if got[0].ID == "" || got[0].Duplicate {
		t.Fatalf("Enqueue = %+v, want a new ID", got[0])
	}
	info := e.wantState(t, got[0].ID, queue.Queued)
	if info.ID != got[0].ID || info.Key != "order-1" || string(info.Payload) != "hello" || info.Cost != 2.5 ||
		info.Priority != 3 || info.MaxAttempts != 2 || info.Attempts != 0 || info.Outcome != "" || info.Result != nil {
		t.Errorf("Get = %+v, want the task as enqueued", info)
	}
	e.sameInstant(t, "Enqueued", info.Enqueued, t0)
	e.sameInstant(t, "ReadyAt", info.ReadyAt, t0)
	e.sameInstant(t, "Deadline", info.Deadline, task.Deadline)

	// Defaults: cost 1, the queue's attempts.
	def := e.enqueue(t, queue.Task{})
	info = e.wantState(t, def[0].ID, queue.Queued)
	if info.Cost != 1 || info.MaxAttempts != e.cfg.MaxAttempts || len(info.Payload) != 0 {
		t.Errorf("defaults: Get = %+v, want cost 1, max attempts %d, no payload", info, e.cfg.MaxAttempts)
	}
	if def[0].ID == got[0].ID {
		t.Errorf("two tasks share the ID %s", def[0].ID)
	}
	if _, err := e.q.Get(e.ctx, "no-such-task"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Get(unknown) = %v, want ErrNotFound", err)
	}
	// What Enqueue stored is not the caller's slice.
	buf := []byte("abc")
	id := e.enqueue(t, queue.Task{Payload: buf})[0].ID
	buf[0] = 'X'
	if p := e.get(t, id).Payload; string(p) != "abc" {
		t.Errorf("payload changed with the caller's slice: %q", p)
	}
}

func testInvalidTasks(t *testing.T, e *env) {
	big := bytes.Repeat([]byte("x"), e.b.MaxPayload+1)
	t0 := e.clock.Now()
	for _, c := range []struct {
		name  string
		task  queue.Task
		field string
	}{
		{"payload over the bound", queue.Task{Payload: big}, "payload"},
		{"negative cost", queue.Task{Cost: -1}, "cost"},
		{"NaN cost", queue.Task{Cost: math.NaN()}, "cost"},
		{"infinite cost", queue.Task{Cost: math.Inf(1)}, "cost"},
		{"priority below 0", queue.Task{Priority: -1}, "priority"},
		{"priority above the top", queue.Task{Priority: queue.MaxPriority + 1}, "priority"},
		{"key too long", queue.Task{Key: strings.Repeat("k", queue.MaxKey+1)}, "key"},
		{"key not UTF-8", queue.Task{Key: "\xff\xfe"}, "key"},
		{"negative attempts", queue.Task{MaxAttempts: -1}, "max_attempts"},
		{"deadline before not-before", queue.Task{NotBefore: t0.Add(2 * e.u), Deadline: t0.Add(e.u)}, "deadline"},
	} {
		_, err := e.q.Enqueue(e.ctx, c.task)
		var te *queue.TaskError
		if !errors.As(err, &te) || te.Field != c.field || te.Index != 0 || !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("%s: Enqueue = %v, want a TaskError on %q wrapping ErrInvalid", c.name, err, c.field)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %q does not name the field", c.name, err)
		}
	}
	// A payload at the bound is accepted.
	e.enqueue(t, queue.Task{Payload: big[:e.b.MaxPayload]})
	if _, err := e.q.Enqueue(e.ctx); err != nil {
		t.Errorf("Enqueue of nothing = %v, want no error", err)
	}
	s := stats(t, e)
	if s.Depth != 1 {
		t.Errorf("Depth = %d after one valid task, want 1", s.Depth)
	}
}

func testBatchAllOrNothing(t *testing.T, e *env) {
	_, err := e.q.Enqueue(e.ctx, queue.Task{Key: "a", Payload: []byte("1")}, queue.Task{Payload: []byte("2")},
		queue.Task{Priority: 99})
	var te *queue.TaskError
	if !errors.As(err, &te) || te.Index != 2 || te.Field != "priority" {
		t.Fatalf("Enqueue = %v, want task 2's priority refused", err)
	}
	if s := stats(t, e); s.Depth != 0 {
		t.Fatalf("Depth = %d after a refused batch, want 0", s.Depth)
	}
	// A key conflict in the middle refuses the batch too, and the key it
	// would have stored stays free.
	e.enqueue(t, queue.Task{Key: "held", Payload: []byte("first")})
	_, err = e.q.Enqueue(e.ctx, queue.Task{Key: "b", Payload: []byte("x")}, queue.Task{Key: "held", Payload: []byte("other")})
	if !errors.As(err, &te) || te.Index != 1 || te.Field != "key" || !errors.Is(err, queue.ErrKeyConflict) {
		t.Fatalf("Enqueue = %v, want task 1's key refused with ErrKeyConflict", err)
	}
	if s := stats(t, e); s.Depth != 1 {
		t.Fatalf("Depth = %d, want 1 (the refused batch stored nothing)", s.Depth)
	}
	got := e.enqueue(t, queue.Task{Key: "b", Payload: []byte("y")})
	if got[0].Duplicate {
		t.Errorf("key b was stored by a refused batch")
	}
}

func testDedup(t *testing.T, e *env) {
	first := e.enqueue(t, queue.Task{Key: "k1", Payload: []byte("p")})[0]
	again := e.enqueue(t, queue.Task{Key: "k1", Payload: []byte("p")})[0]
	if !again.Duplicate || again.ID != first.ID {
		t.Fatalf("second Enqueue of k1 = %+v, want Duplicate of %s", again, first.ID)
	}
	// Within one batch: the second is the first.
	batch := e.enqueue(t, queue.Task{Key: "k2", Payload: []byte("q")}, queue.Task{Key: "k2", Payload: []byte("q")}, queue.Task{Key: "k3"})
	if batch[0].Duplicate || !batch[1].Duplicate || batch[1].ID != batch[0].ID || batch[2].Duplicate {
		t.Fatalf("batch = %+v, want the second k2 a duplicate of the first", batch)
	}
	_, err := e.q.Enqueue(e.ctx, queue.Task{Key: "k1", Payload: []byte("other")})
	if !errors.Is(err, queue.ErrKeyConflict) {
		t.Fatalf("k1 with another payload = %v, want ErrKeyConflict", err)
	}
	// A duplicate of a finished task is still the same task.
	l := e.lease(t, 10, 10*e.u)
	for _, x := range l {
		if err := e.q.Ack(e.ctx, x.Receipt, nil); err != nil {
			t.Fatal(err)
		}
	}
	again = e.enqueue(t, queue.Task{Key: "k1", Payload: []byte("p")})[0]
	if !again.Duplicate || again.ID != first.ID {
		t.Fatalf("k1 after it succeeded = %+v, want Duplicate of %s", again, first.ID)
	}
	if s := stats(t, e); s.Depth != 0 || s.Succeeded != 3 {
		t.Errorf("Stats = %+v, want 3 succeeded and nothing waiting", s)
	}
}

// A key is remembered for the dedup window from its task's enqueue, and
// not after.
func testDedupWindow(t *testing.T, e *env) {
	first := e.enqueue(t, queue.Task{Key: "w", Payload: []byte("1")})[0]
	e.clock.Advance(e.cfg.DedupWindow - 5*e.u)
	if got := e.enqueue(t, queue.Task{Key: "w", Payload: []byte("1")})[0]; !got.Duplicate || got.ID != first.ID {
		t.Fatalf("within the window: %+v, want Duplicate of %s", got, first.ID)
	}
	e.clock.Advance(10 * e.u)
	got := e.enqueue(t, queue.Task{Key: "w", Payload: []byte("2")})[0]
	if got.Duplicate || got.ID == first.ID {
		t.Fatalf("after the window: %+v, want a new task", got)
	}
}

func testOrder(t *testing.T, e *env) {
	// Ready time first within a priority, priority first across them.
	e.enqueue(t, queue.Task{Payload: []byte("p0-a")})
	e.clock.Advance(e.u)
	e.enqueue(t, queue.Task{Payload: []byte("p5-a"), Priority: 5}, queue.Task{Payload: []byte("p0-b")})
	e.clock.Advance(e.u)
	e.enqueue(t, queue.Task{Payload: []byte("p5-b"), Priority: 5}, queue.Task{Payload: []byte("p9"), Priority: 9})
	e.clock.Advance(e.u)
	got := payloads(e.lease(t, 3, 10*e.u))
	want := []string{"p9", "p5-a", "p5-b"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("first lease = %v, want %v", got, want)
	}
	got = payloads(e.lease(t, 10, 10*e.u))
	want = []string{"p0-a", "p0-b"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("second lease = %v, want %v", got, want)
	}
	if got := e.lease(t, 10, 10*e.u); len(got) != 0 {
		t.Fatalf("third lease = %v, want nothing", payloads(got))
	}
}

func testNotBefore(t *testing.T, e *env) {
	t0 := e.clock.Now()
	ids := e.enqueue(t,
		queue.Task{Payload: []byte("at 4"), NotBefore: t0.Add(4 * e.u)},
		queue.Task{Payload: []byte("at 2"), NotBefore: t0.Add(2 * e.u)},
		queue.Task{Payload: []byte("now")},
		queue.Task{Payload: []byte("past"), NotBefore: t0.Add(-time.Hour)},
	)
	e.wantState(t, ids[0].ID, queue.Scheduled)
	info := e.wantState(t, ids[3].ID, queue.Queued)
	e.sameInstant(t, "ReadyAt of a past not-before", info.ReadyAt, t0.Add(-time.Hour))
	// Timeline: t0 "past" and "now"; t0+3u "at 2"; t0+5u "at 4".
	for _, step := range []struct {
		at   time.Duration
		want []string
	}{
		{0, []string{"past", "now"}},
		{e.u, nil},
		{3 * e.u, []string{"at 2"}},
		{5 * e.u, []string{"at 4"}},
	} {
		e.clock.Advance(t0.Add(step.at).Sub(e.clock.Now()))
		got := payloads(e.lease(t, 10, 100*e.u))
		if fmt.Sprint(got) != fmt.Sprint(step.want) && !(len(got) == 0 && len(step.want) == 0) {
			t.Fatalf("at t0+%v: leased %v, want %v", step.at, got, step.want)
		}
	}
}

func testLeaseExpiry(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{Payload: []byte("x")})[0].ID
	t0 := e.clock.Now()
	l := e.lease(t, 1, 4*e.u)
	if len(l) != 1 || l[0].ID != id || l[0].Attempt != 1 || l[0].Token == "" {
		t.Fatalf("Lease = %+v, want task %s, attempt 1, with a token", l, id)
	}
	e.sameInstant(t, "Until", l[0].Until, t0.Add(4*e.u))
	info := e.wantState(t, id, queue.Leased)
	e.sameInstant(t, "LeasedUntil", info.LeasedUntil, t0.Add(4*e.u))
	if info.Attempts != 1 {
		t.Errorf("Attempts = %d while leased, want 1", info.Attempts)
	}
	e.clock.Advance(3 * e.u)
	if got := e.lease(t, 1, 4*e.u); len(got) != 0 {
		t.Fatalf("at t0+3u the task was handed out again: %+v", got)
	}
	e.clock.Advance(2 * e.u)
	// At t0+5u the lease has expired: the task is back, its holder lost it.
	again := e.lease(t, 1, 4*e.u)
	if len(again) != 1 || again[0].ID != id || again[0].Attempt != 2 || again[0].Token == l[0].Token {
		t.Fatalf("at t0+5u Lease = %+v, want task %s again, attempt 2, a new token", again, id)
	}
	if err := e.q.Ack(e.ctx, l[0].Receipt, nil); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("Ack with the expired lease = %v, want ErrLeaseLost", err)
	}
	if err := e.q.Ack(e.ctx, again[0].Receipt, []byte("done")); err != nil {
		t.Fatalf("Ack with the current lease: %v", err)
	}
	info = e.wantState(t, id, queue.Succeeded)
	if info.Attempts != 2 || string(info.Result) != "done" {
		t.Errorf("Get = %+v, want 2 attempts and the result", info)
	}
	e.sameInstant(t, "Finished", info.Finished, e.clock.Now())
}

func testStaleReceipts(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{})[0].ID
	l := e.lease(t, 1, 10*e.u)[0]
	forged := queue.Receipt{ID: id, Token: l.Token + "0"}
	for _, r := range []queue.Receipt{forged, {ID: id, Token: "not-a-token"}} {
		if err := e.q.Ack(e.ctx, r, nil); !errors.Is(err, queue.ErrLeaseLost) {
			t.Errorf("Ack(%+v) = %v, want ErrLeaseLost", r, err)
		}
		if _, err := e.q.Extend(e.ctx, r, e.u); !errors.Is(err, queue.ErrLeaseLost) {
			t.Errorf("Extend(%+v) = %v, want ErrLeaseLost", r, err)
		}
		if err := e.q.Retry(e.ctx, r, queue.Retry{}); !errors.Is(err, queue.ErrLeaseLost) {
			t.Errorf("Retry(%+v) = %v, want ErrLeaseLost", r, err)
		}
		if err := e.q.DeadLetter(e.ctx, r, "x"); !errors.Is(err, queue.ErrLeaseLost) {
			t.Errorf("DeadLetter(%+v) = %v, want ErrLeaseLost", r, err)
		}
	}
	for _, r := range []queue.Receipt{{}, {ID: id}} {
		if err := e.q.Ack(e.ctx, r, nil); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("Ack(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	if err := e.q.Ack(e.ctx, queue.Receipt{ID: "no-such-task", Token: l.Token}, nil); !errors.Is(err, queue.ErrNotFound) && !errors.Is(err, queue.ErrLeaseLost) {
		t.Errorf("Ack of an unknown task = %v, want ErrNotFound or ErrLeaseLost", err)
	}
	// The forged acks changed nothing: the holder still acks.
	e.wantState(t, id, queue.Leased)
	if err := e.q.Ack(e.ctx, l.Receipt, nil); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	// A second Ack with the same receipt is refused: the task is no longer leased.
	if err := e.q.Ack(e.ctx, l.Receipt, nil); !errors.Is(err, queue.ErrLeaseLost) {
		t.Errorf("second Ack = %v, want ErrLeaseLost", err)
	}
}

func testExtend(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{})[0].ID
	t0 := e.clock.Now()
	l := e.lease(t, 1, 4*e.u)[0]
	e.clock.Advance(3 * e.u)
	until, err := e.q.Extend(e.ctx, l.Receipt, 4*e.u)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	e.sameInstant(t, "Extend's end", until, t0.Add(7*e.u))
	e.clock.Advance(3 * e.u) // t0+6u: past the first end, before the second
	if got := e.lease(t, 1, e.u); len(got) != 0 {
		t.Fatalf("an extended lease was handed out again at t0+6u")
	}
	if _, err := e.q.Extend(e.ctx, l.Receipt, 0); !errors.Is(err, queue.ErrInvalid) {
		t.Errorf("Extend by 0 = %v, want ErrInvalid", err)
	}
	e.clock.Advance(2 * e.u) // t0+8u: expired
	if _, err := e.q.Extend(e.ctx, l.Receipt, 4*e.u); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("Extend after expiry = %v, want ErrLeaseLost", err)
	}
	if got := e.lease(t, 1, e.u); len(got) != 1 || got[0].ID != id {
		t.Fatalf("after the extended lease expired, Lease = %+v, want %s", got, id)
	}
}

func testRetry(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{Payload: []byte("r")})[0].ID
	l := e.lease(t, 1, 10*e.u)[0]
	t0 := e.clock.Now()
	if err := e.q.Retry(e.ctx, l.Receipt, queue.Retry{At: t0.Add(3 * e.u), Reason: "503 Service Unavailable"}); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	info := e.wantState(t, id, queue.Scheduled)
	if info.Attempts != 1 || info.Outcome != "503 Service Unavailable" {
		t.Errorf("after Retry: %+v, want 1 attempt and the reason", info)
	}
	e.sameInstant(t, "ReadyAt", info.ReadyAt, t0.Add(3*e.u))
	if err := e.q.Ack(e.ctx, l.Receipt, nil); !errors.Is(err, queue.ErrLeaseLost) {
		t.Errorf("Ack after Retry = %v, want ErrLeaseLost", err)
	}
	e.clock.Advance(2 * e.u)
	if got := e.lease(t, 1, 10*e.u); len(got) != 0 {
		t.Fatalf("leased before its retry instant")
	}
	e.clock.Advance(2 * e.u)
	got := e.lease(t, 1, 10*e.u)
	if len(got) != 1 || got[0].ID != id || got[0].Attempt != 2 {
		t.Fatalf("after the retry instant: %+v, want attempt 2 of %s", got, id)
	}
	// A retry at once (zero At) is ready now.
	if err := e.q.Retry(e.ctx, got[0].Receipt, queue.Retry{Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	e.wantState(t, id, queue.Queued)
	// The last attempt's retry dead-letters it with the reason.
	got = e.lease(t, 1, 10*e.u)
	if len(got) != 1 || got[0].Attempt != 3 {
		t.Fatalf("third lease = %+v, want attempt 3", got)
	}
	if err := e.q.Retry(e.ctx, got[0].Receipt, queue.Retry{Reason: "500 Internal Server Error"}); err != nil {
		t.Fatal(err)
	}
	info = e.wantState(t, id, queue.Dead)
	if info.Attempts != 3 || !strings.Contains(info.Outcome, "500 Internal Server Error") {
		t.Errorf("after the last attempt: %+v, want dead after 3 attempts with the reason", info)
	}
}

func testThrottledRetry(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{MaxAttempts: 1})[0].ID
	// Throttled ten times on a task of one attempt: never dead.
	for i := range 10 {
		l := e.lease(t, 1, 10*e.u)
		if len(l) != 1 || l[0].Attempt != 1 {
			t.Fatalf("lease %d = %+v, want attempt 1 again", i, l)
		}
		if err := e.q.Retry(e.ctx, l[0].Receipt, queue.Retry{Reason: "429 Too Many Requests", Throttled: true}); err != nil {
			t.Fatal(err)
		}
		if info := e.wantState(t, id, queue.Queued); info.Attempts != 0 {
			t.Fatalf("throttled retry %d left %d attempts, want 0", i, info.Attempts)
		}
	}
}

func testAttemptsExhausted(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{MaxAttempts: 2})[0].ID
	for attempt := 1; attempt <= 2; attempt++ {
		l := e.lease(t, 1, 2*e.u)
		if len(l) != 1 || l[0].Attempt != attempt {
			t.Fatalf("lease = %+v, want attempt %d", l, attempt)
		}
		e.clock.Advance(3 * e.u) // the holder vanished
	}
	if got := e.lease(t, 1, 2*e.u); len(got) != 0 {
		t.Fatalf("a task whose last lease expired was handed out again: %+v", got)
	}
	info := e.wantState(t, id, queue.Dead)
	if info.Outcome != queue.ReasonAttempts || info.Attempts != 2 {
		t.Errorf("Get = %+v, want dead with %q after 2 attempts", info, queue.ReasonAttempts)
	}
}

func testDeadLetter(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{})[0].ID
	l := e.lease(t, 1, 10*e.u)[0]
	long := strings.Repeat("é", queue.MaxReason)
	if err := e.q.DeadLetter(e.ctx, l.Receipt, "400 Bad Request: "+long); err != nil {
		t.Fatal(err)
	}
	info := e.wantState(t, id, queue.Dead)
	if !strings.HasPrefix(info.Outcome, "400 Bad Request") || len(info.Outcome) > queue.MaxReason || !strings.HasSuffix(info.Outcome, "…") {
		t.Errorf("Outcome = %q (%d bytes), want the reason cut to %d bytes", info.Outcome[:20], len(info.Outcome), queue.MaxReason)
	}
	e.clock.Advance(20 * e.u)
	if got := e.lease(t, 1, e.u); len(got) != 0 {
		t.Fatalf("a dead task was leased")
	}
	if s := stats(t, e); s.Dead != 1 || s.Depth != 0 {
		t.Errorf("Stats = %+v, want 1 dead", s)
	}
}

func testDeadline(t *testing.T, e *env) {
	t0 := e.clock.Now()
	late := e.enqueue(t, queue.Task{Payload: []byte("late"), Deadline: t0.Add(2 * e.u)})[0].ID
	onTime := e.enqueue(t, queue.Task{Payload: []byte("on time"), Deadline: t0.Add(20 * e.u)})[0].ID
	e.clock.Advance(3 * e.u)
	got := e.lease(t, 10, 10*e.u)
	if len(got) != 1 || got[0].ID != onTime {
		t.Fatalf("Lease = %v, want only the task on time", payloads(got))
	}
	info := e.wantState(t, late, queue.Dead)
	if info.Outcome != queue.ReasonDeadline {
		t.Errorf("Outcome = %q, want %q", info.Outcome, queue.ReasonDeadline)
	}
}

func testCancel(t *testing.T, e *env) {
	t0 := e.clock.Now()
	ids := e.enqueue(t, queue.Task{Payload: []byte("queued")}, queue.Task{Payload: []byte("scheduled"), NotBefore: t0.Add(5 * e.u)},
		queue.Task{Payload: []byte("leased"), Priority: 9})
	l := e.lease(t, 1, 10*e.u)
	if len(l) != 1 || l[0].ID != ids[2].ID {
		t.Fatalf("Lease = %v, want the leased task", payloads(l))
	}
	for _, x := range ids {
		if err := e.q.Cancel(e.ctx, x.ID); err != nil {
			t.Fatalf("Cancel(%s): %v", x.ID, err)
		}
		if info := e.wantState(t, x.ID, queue.Cancelled); info.Outcome != "cancelled" {
			t.Errorf("Outcome = %q, want cancelled", info.Outcome)
		}
	}
	if err := e.q.Ack(e.ctx, l[0].Receipt, nil); !errors.Is(err, queue.ErrLeaseLost) {
		t.Errorf("Ack of a cancelled task = %v, want ErrLeaseLost", err)
	}
	if err := e.q.Cancel(e.ctx, ids[0].ID); !errors.Is(err, queue.ErrFinished) {
		t.Errorf("second Cancel = %v, want ErrFinished", err)
	}
	if err := e.q.Cancel(e.ctx, "no-such-task"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Cancel(unknown) = %v, want ErrNotFound", err)
	}
	e.clock.Advance(20 * e.u)
	if got := e.lease(t, 10, e.u); len(got) != 0 {
		t.Fatalf("cancelled tasks were leased: %v", payloads(got))
	}
	if s := stats(t, e); s.Cancelled != 3 || s.Depth != 0 {
		t.Errorf("Stats = %+v, want 3 cancelled, nothing waiting", s)
	}
}

func testResult(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{})[0].ID
	l := e.lease(t, 1, 10*e.u)[0]
	over := bytes.Repeat([]byte("r"), e.b.MaxResult+1)
	if err := e.q.Ack(e.ctx, l.Receipt, over); !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "result") {
		t.Fatalf("Ack with a result over the bound = %v, want ErrInvalid naming the result", err)
	}
	e.wantState(t, id, queue.Leased)
	if err := e.q.Ack(e.ctx, l.Receipt, over[:e.b.MaxResult]); err != nil {
		t.Fatalf("Ack with a result at the bound: %v", err)
	}
	if got := e.get(t, id).Result; len(got) != e.b.MaxResult {
		t.Errorf("Result holds %d bytes, want %d", len(got), e.b.MaxResult)
	}
}

func stats(t *testing.T, e *env) queue.Stats {
	t.Helper()
	s, err := e.q.Stats(e.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if s.Depth != s.Ready+s.Scheduled+s.Leased {
		t.Errorf("Stats: Depth %d is not Ready %d + Scheduled %d + Leased %d", s.Depth, s.Ready, s.Scheduled, s.Leased)
	}
	if s.Durability == "" {
		t.Errorf("Stats: Durability not said")
	}
	return s
}

func testStats(t *testing.T, e *env) {
	t0 := e.clock.Now()
	ab := e.enqueue(t, queue.Task{Payload: []byte("a")}, queue.Task{Payload: []byte("b")})
	e.clock.Advance(2 * e.u)
	c := e.enqueue(t, queue.Task{Payload: []byte("c")}, queue.Task{NotBefore: t0.Add(10 * e.u)}, queue.Task{NotBefore: t0.Add(20 * e.u)})
	e.clock.Advance(e.u)
	s := e.oldestReady(t, e.get(t, ab[0].ID).ReadyAt)
	if s.Depth != 5 || s.Ready != 3 || s.Scheduled != 2 || s.Leased != 0 {
		t.Errorf("Stats = %+v, want depth 5: 3 ready, 2 scheduled", s)
	}
	l := e.lease(t, 1, 100*e.u)
	if err := e.q.Ack(e.ctx, l[0].Receipt, nil); err != nil {
		t.Fatal(err)
	}
	e.lease(t, 1, 100*e.u)
	e.clock.Advance(8 * e.u) // t0+11u: the first scheduled one is ready
	// "a" and "b" are leased; "c" is the oldest ready.
	s = e.oldestReady(t, e.get(t, c[0].ID).ReadyAt)
	if s.Depth != 4 || s.Ready != 2 || s.Scheduled != 1 || s.Leased != 1 || s.Succeeded != 1 {
		t.Errorf("Stats = %+v, want depth 4: 2 ready, 1 scheduled, 1 leased; 1 succeeded", s)
	}
}

// oldestReady calls Stats and checks OldestReady is the age of a task
// ready since readyAt: exactly on a fake clock, between the ages before
// and after the call in real time.
func (e *env) oldestReady(t *testing.T, readyAt time.Time) queue.Stats {
	t.Helper()
	before := e.clock.Now().Sub(readyAt)
	s := stats(t, e)
	after := e.clock.Now().Sub(readyAt)
	if s.OldestReady < before-time.Millisecond || s.OldestReady > after+time.Millisecond {
		t.Errorf("OldestReady = %v, want from %v to %v (the age of the oldest ready task)", s.OldestReady, before, after)
	}
	return s
}

func testLeaseArguments(t *testing.T, e *env) {
	for _, c := range []struct {
		n   int
		vis time.Duration
	}{{0, time.Second}, {-1, time.Second}, {queue.MaxLease + 1, time.Second}, {1, 0}, {1, -time.Second}, {1, queue.MaxVisibility + 1}} {
		if _, err := e.q.Lease(e.ctx, c.n, c.vis); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("Lease(%d, %v) = %v, want ErrInvalid", c.n, c.vis, err)
		}
	}
	if got := e.lease(t, queue.MaxLease, queue.MaxVisibility); len(got) != 0 {
		t.Errorf("Lease on an empty queue = %v", got)
	}
}

func testClosed(t *testing.T, e *env) {
	id := e.enqueue(t, queue.Task{})[0].ID
	if err := e.q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.q.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.q.Enqueue(e.ctx, queue.Task{}); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Enqueue after Close = %v, want ErrClosed", err)
	}
	if _, err := e.q.Lease(e.ctx, 1, time.Second); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Lease after Close = %v, want ErrClosed", err)
	}
	if _, err := e.q.Get(e.ctx, id); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	if _, err := e.q.Stats(e.ctx); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Stats after Close = %v, want ErrClosed", err)
	}
	if _, err := e.q.ListDead(e.ctx, "", 1); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("ListDead after Close = %v, want ErrClosed", err)
	}
	if err := e.q.Revive(e.ctx, id, time.Time{}); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Revive after Close = %v, want ErrClosed", err)
	}
}

// What was stored survives a restart; a lease held across it stays held
// until it expires, then returns its task (not lost, not stuck).
func testRestart(t *testing.T, e *env) {
	if e.b.Reopen == nil {
		t.Skip("SKIP: this backend cannot be reopened by the suite")
	}
	t0 := e.clock.Now()
	ids := e.enqueue(t, queue.Task{Key: "k", Payload: []byte("leased")}, queue.Task{Payload: []byte("acked")},
		queue.Task{Payload: []byte("waiting"), NotBefore: t0.Add(2 * e.u)})
	l := e.lease(t, 2, 6*e.u)
	if len(l) != 2 {
		t.Fatalf("Lease = %v", payloads(l))
	}
	var held queue.Lease
	for _, x := range l {
		if string(x.Payload) == "acked" {
			if err := e.q.Ack(e.ctx, x.Receipt, []byte("ok")); err != nil {
				t.Fatal(err)
			}
		} else {
			held = x
		}
	}
	e.q = e.b.Reopen(t, e.q, e.cfg)
	e.wantState(t, ids[1].ID, queue.Succeeded)
	e.wantState(t, held.ID, queue.Leased)
	if got := e.enqueue(t, queue.Task{Key: "k", Payload: []byte("leased")})[0]; !got.Duplicate || got.ID != ids[0].ID {
		t.Errorf("the key was forgotten by the restart: %+v", got)
	}
	e.clock.Advance(3 * e.u) // t0+3u: "waiting" is ready, the lease is not over
	got := e.lease(t, 10, 10*e.u)
	if len(got) != 1 || got[0].ID != ids[2].ID {
		t.Fatalf("at t0+3u Lease = %v, want only the task that was waiting", payloads(got))
	}
	// The holder's lease is still good after the restart.
	if _, err := e.q.Extend(e.ctx, held.Receipt, 2*e.u); err != nil {
		t.Fatalf("Extend across the restart: %v", err)
	}
	e.clock.Advance(3 * e.u) // t0+6u: expired
	got = e.lease(t, 10, 10*e.u)
	if len(got) != 1 || got[0].ID != held.ID || got[0].Attempt != 2 {
		t.Fatalf("after the held lease expired, Lease = %+v, want %s again", got, held.ID)
	}
}

// Producers and consumers at once: every task is acknowledged exactly
// once, and no two holders ever hold one task at the same time.
func testConcurrent(t *testing.T, e *env) {
	const producers, perProducer, consumers = 8, 200, 4
	total := producers * perProducer
	var wg sync.WaitGroup
	errs := make(chan error, producers+consumers)
	for p := range producers {
		wg.Go(func() {
			for i := 0; i < perProducer; i += 4 {
				batch := make([]queue.Task, 0, 4)
				for j := i; j < i+4 && j < perProducer; j++ {
					batch = append(batch, queue.Task{Key: fmt.Sprintf("p%d-%d", p, j), Payload: fmt.Appendf(nil, "p%d-%d", p, j)})
				}
				if _, err := e.q.Enqueue(e.ctx, batch...); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var acked atomic.Int64
	var mu sync.Mutex
	seen := map[string]int{}
	deadline := time.Now().Add(time.Minute)
	for range consumers {
		wg.Go(func() {
			for acked.Load() < int64(total) && time.Now().Before(deadline) {
				ls, err := e.q.Lease(e.ctx, 7, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				if len(ls) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				for _, l := range ls {
					mu.Lock()
					seen[string(l.Payload)]++
					mu.Unlock()
					if err := e.q.Ack(e.ctx, l.Receipt, nil); err != nil {
						errs <- fmt.Errorf("Ack(%s): %w", l.ID, err)
						return
					}
					acked.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if int(acked.Load()) != total || len(seen) != total {
		t.Fatalf("acked %d, saw %d distinct tasks, want %d", acked.Load(), len(seen), total)
	}
	for p, n := range seen {
		if n != 1 {
			t.Errorf("task %s was handed out %d times under an hour's lease", p, n)
		}
	}
	if s := stats(t, e); s.Depth != 0 || s.Succeeded != int64(total) {
		t.Errorf("Stats = %+v, want %d succeeded and nothing waiting", s, total)
	}
}
