package queuetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// The cases of dead letters: ListDead's order, paging and cursor, and
// Revive's new life, refusals, atomicity and counts.

func (e *env) listDead(t *testing.T, after string, n int) []queue.Info {
	t.Helper()
	got, err := e.q.ListDead(e.ctx, after, n)
	if err != nil {
		t.Fatalf("ListDead(%q, %d): %v", after, n, err)
	}
	if len(got) > n {
		t.Fatalf("ListDead(%q, %d) returned %d tasks", after, n, len(got))
	}
	return got
}

func (e *env) revive(t *testing.T, id string, at time.Time) {
	t.Helper()
	if err := e.q.Revive(e.ctx, id, at); err != nil {
		t.Fatalf("Revive(%s): %v", id, err)
	}
}

// leaseAll leases every ready task (at most ten) for a long while and
// returns the leases by task ID.
func (e *env) leaseAll(t *testing.T) map[string]queue.Lease {
	t.Helper()
	out := map[string]queue.Lease{}
	for _, l := range e.lease(t, 10, 100*e.u) {
		out[l.ID] = l
	}
	return out
}

// dieInOrder dead-letters the leased tasks ids in that order, a
// millisecond apart, each with the reason "reason of <id>".
func (e *env) dieInOrder(t *testing.T, leased map[string]queue.Lease, ids ...string) {
	t.Helper()
	for _, id := range ids {
		l, ok := leased[id]
		if !ok {
			t.Fatalf("task %s is not leased", id)
		}
		if err := e.q.DeadLetter(e.ctx, l.Receipt, "reason of "+id); err != nil {
			t.Fatalf("DeadLetter(%s): %v", id, err)
		}
		e.clock.Advance(time.Millisecond)
	}
}

func infoIDs(infos []queue.Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.ID
	}
	return out
}

func enqueuedIDs(got []queue.Enqueued) []string {
	out := make([]string, len(got))
	for i, g := range got {
		out[i] = g.ID
	}
	return out
}

// ListDead lists the dead tasks only, oldest death first (not in enqueue
// order), each with its reason and payload; pages of any size put
// together are the whole list, and the cursor of the last page's last
// task gives an empty page.
func testListDead(t *testing.T, e *env) {
	if got := e.listDead(t, "", 10); len(got) != 0 {
		t.Fatalf("ListDead on an empty queue = %v", infoIDs(got))
	}
	ids := enqueuedIDs(e.enqueue(t,
		queue.Task{Key: "dead-0", Payload: []byte("p0")}, queue.Task{Payload: []byte("p1")}, queue.Task{Payload: []byte("p2")},
		queue.Task{Payload: []byte("p3")}, queue.Task{Payload: []byte("p4"), MaxAttempts: 1}, queue.Task{Payload: []byte("acked")}))
	leased := e.leaseAll(t)
	if len(leased) != 6 {
		t.Fatalf("leased %d tasks, want 6", len(leased))
	}
	if err := e.q.Ack(e.ctx, leased[ids[5]].Receipt, nil); err != nil {
		t.Fatal(err)
	}
	waiting := e.enqueue(t, queue.Task{Payload: []byte("waiting")})[0].ID

	// Deaths: 3, 0, 4 (its last attempt retried), 1, 2.
	e.dieInOrder(t, leased, ids[3], ids[0])
	if err := e.q.Retry(e.ctx, leased[ids[4]].Receipt, queue.Retry{Reason: "500 Internal Server Error"}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	e.dieInOrder(t, leased, ids[1], ids[2])
	order := []string{ids[3], ids[0], ids[4], ids[1], ids[2]}

	all := e.listDead(t, "", 10)
	if fmt.Sprint(infoIDs(all)) != fmt.Sprint(order) {
		t.Fatalf("ListDead = %v, want the deaths in order %v", infoIDs(all), order)
	}
	for i, in := range all {
		want := e.get(t, in.ID)
		wantReason := "reason of " + in.ID
		if in.ID == ids[4] {
			wantReason = in.Outcome
			if !strings.Contains(in.Outcome, "500 Internal Server Error") {
				t.Errorf("task %s died of its last retry; Outcome = %q, want the retry's reason", in.ID, in.Outcome)
			}
		}
		if in.State != queue.Dead || in.Outcome != wantReason || in.Attempts != 1 || in.Finished.IsZero() ||
			string(in.Payload) != string(want.Payload) || in.Key != want.Key || !in.Finished.Equal(want.Finished) {
			t.Errorf("ListDead's task %d = %+v, want dead with %q after 1 attempt, as Get says: %+v", i, in, wantReason, want)
		}
		if i > 0 && in.Finished.Before(all[i-1].Finished) {
			t.Errorf("task %d died at %v, before task %d (%v): not oldest first", i, in.Finished, i-1, all[i-1].Finished)
		}
	}
	if string(all[1].Payload) != "p0" || all[1].Key != "dead-0" {
		t.Errorf("task %s listed with payload %q, key %q; want p0, dead-0", all[1].ID, all[1].Payload, all[1].Key)
	}

	for _, size := range []int{1, 2, 3, 5} {
		var paged []string
		after := ""
		for range 10 {
			page := e.listDead(t, after, size)
			if len(page) == 0 {
				break
			}
			paged = append(paged, infoIDs(page)...)
			after = page[len(page)-1].ID
		}
		if fmt.Sprint(paged) != fmt.Sprint(order) {
			t.Errorf("pages of %d = %v, want %v", size, paged, order)
		}
		if got := e.listDead(t, after, size); len(got) != 0 {
			t.Errorf("after the last dead task, ListDead(%d) = %v", size, infoIDs(got))
		}
	}
	if got := infoIDs(e.listDead(t, ids[0], 2)); fmt.Sprint(got) != fmt.Sprint(order[2:4]) {
		t.Errorf("ListDead(after %s, 2) = %v, want %v", ids[0], got, order[2:4])
	}
	e.wantState(t, waiting, queue.Queued)
	e.wantState(t, ids[5], queue.Succeeded)
	if s := stats(t, e); s.Dead != 5 || s.Succeeded != 1 || s.Depth != 1 {
		t.Errorf("Stats = %+v, want 5 dead, 1 succeeded, 1 waiting", s)
	}
}

// ListDead refuses a page size out of bounds and a cursor that names no
// task or one that was never dead, saying which.
func testListDeadArguments(t *testing.T, e *env) {
	for _, n := range []int{0, -1, queue.MaxList + 1} {
		if _, err := e.q.ListDead(e.ctx, "", n); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("ListDead(%d) = %v, want ErrInvalid", n, err)
		}
	}
	if got := e.listDead(t, "", queue.MaxList); len(got) != 0 {
		t.Errorf("ListDead on an empty queue = %v", infoIDs(got))
	}
	if _, err := e.q.ListDead(e.ctx, "no-such-task", 1); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("ListDead after an unknown ID = %v, want ErrNotFound", err)
	}
	queued := e.enqueue(t, queue.Task{})[0].ID
	_, err := e.q.ListDead(e.ctx, queued, 1)
	if !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), queued) {
		t.Errorf("ListDead after a task never dead = %v, want ErrInvalid naming %s", err, queued)
	}
}

// A revived task lives again under its ID: queued with its attempts from
// zero, its key, payload, cost, priority, max attempts, deadline and last
// outcome kept, leased again as attempt 1, and able to die again after a
// whole life of attempts. A receipt of its earlier life stays refused.
func testRevive(t *testing.T, e *env) {
	t0 := e.clock.Now()
	task := queue.Task{Key: "k-revive", Payload: []byte("again"), Cost: 2.5, Priority: 4, Deadline: t0.Add(100 * e.u), MaxAttempts: 2}
	id := e.enqueue(t, task)[0].ID
	first := e.lease(t, 1, 10*e.u)
	if err := e.q.Retry(e.ctx, first[0].Receipt, queue.Retry{Reason: "503 Service Unavailable"}); err != nil {
		t.Fatal(err)
	}
	second := e.lease(t, 1, 10*e.u)
	if len(second) != 1 || second[0].Attempt != 2 {
		t.Fatalf("second lease = %+v, want attempt 2", second)
	}
	if err := e.q.DeadLetter(e.ctx, second[0].Receipt, "400 Bad Request"); err != nil {
		t.Fatal(err)
	}
	dead := e.wantState(t, id, queue.Dead)

	e.revive(t, id, time.Time{})
	info := e.wantState(t, id, queue.Queued)
	if info.Attempts != 0 || !info.Finished.IsZero() || info.Key != task.Key || string(info.Payload) != "again" || info.Cost != 2.5 ||
		info.Priority != 4 || info.MaxAttempts != 2 || info.Outcome != "400 Bad Request" {
		t.Errorf("revived: Get = %+v, want queued, 0 attempts, not finished, the task and its last outcome kept", info)
	}
	e.sameInstant(t, "revived Deadline", info.Deadline, task.Deadline)
	e.sameInstant(t, "revived Enqueued", info.Enqueued, dead.Enqueued)
	if got := e.listDead(t, "", 10); len(got) != 0 {
		t.Errorf("a revived task is still listed dead: %v", infoIDs(got))
	}
	if err := e.q.Ack(e.ctx, second[0].Receipt, nil); !errors.Is(err, queue.ErrLeaseLost) {
		t.Errorf("Ack with the receipt of the earlier life = %v, want ErrLeaseLost", err)
	}
	if got := e.enqueue(t, queue.Task{Key: "k-revive", Payload: []byte("again")})[0]; !got.Duplicate || got.ID != id {
		t.Errorf("the key of a revived task: Enqueue = %+v, want Duplicate of %s", got, id)
	}

	// The new life: attempt 1, then 2, then dead again.
	for attempt := 1; attempt <= 2; attempt++ {
		got := e.lease(t, 10, 10*e.u)
		if len(got) != 1 || got[0].ID != id || got[0].Attempt != attempt {
			t.Fatalf("lease %d of the new life = %+v, want attempt %d of %s", attempt, got, attempt, id)
		}
		l := got[0]
		if attempt == 1 && (string(l.Payload) != "again" || l.Key != task.Key || l.Cost != 2.5 || l.Priority != 4 || l.MaxAttempts != 2) {
			t.Errorf("the revived task as leased = %+v, want it as enqueued", l.Task)
		}
		if attempt == 1 {
			e.sameInstant(t, "leased Deadline", l.Deadline, task.Deadline)
		}
		if err := e.q.Retry(e.ctx, l.Receipt, queue.Retry{Reason: "502 Bad Gateway"}); err != nil {
			t.Fatal(err)
		}
	}
	info = e.wantState(t, id, queue.Dead)
	if info.Attempts != 2 || !strings.Contains(info.Outcome, "502 Bad Gateway") {
		t.Errorf("after the new life's last attempt: %+v, want dead after 2 attempts with the reason", info)
	}
	if got := e.listDead(t, "", 10); len(got) != 1 || got[0].ID != id || !strings.Contains(got[0].Outcome, "502 Bad Gateway") {
		t.Fatalf("ListDead after the second death = %+v, want %s with its new reason", got, id)
	}

	// Revived for later: scheduled until then.
	t1 := e.clock.Now()
	e.revive(t, id, t1.Add(3*e.u))
	info = e.wantState(t, id, queue.Scheduled)
	e.sameInstant(t, "ReadyAt of a task revived for later", info.ReadyAt, t1.Add(3*e.u))
	e.clock.Advance(2 * e.u)
	if got := e.lease(t, 10, 10*e.u); len(got) != 0 {
		t.Fatalf("a task revived for t1+3u was leased at t1+2u")
	}
	e.clock.Advance(2 * e.u)
	got := e.lease(t, 10, 10*e.u)
	if len(got) != 1 || got[0].ID != id || got[0].Attempt != 1 {
		t.Fatalf("at t1+4u Lease = %+v, want attempt 1 of %s", got, id)
	}
	if err := e.q.Ack(e.ctx, got[0].Receipt, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if info := e.wantState(t, id, queue.Succeeded); string(info.Result) != "done" {
		t.Errorf("Result = %q, want done", info.Result)
	}
}

// Revive refuses a task that is not dead (ErrNotDead, naming it) and an
// unknown one (ErrNotFound), and changes nothing.
func testReviveRefused(t *testing.T, e *env) {
	t0 := e.clock.Now()
	ids := enqueuedIDs(e.enqueue(t,
		queue.Task{Payload: []byte("queued")}, queue.Task{Payload: []byte("scheduled"), NotBefore: t0.Add(50 * e.u)},
		queue.Task{Payload: []byte("leased"), Priority: 9}, queue.Task{Payload: []byte("succeeded"), Priority: 8},
		queue.Task{Payload: []byte("cancelled")}, queue.Task{Payload: []byte("revived"), Priority: 7}))
	leased := e.lease(t, 3, 100*e.u) // leased, succeeded, revived
	if len(leased) != 3 || leased[0].ID != ids[2] || leased[1].ID != ids[3] || leased[2].ID != ids[5] {
		t.Fatalf("Lease = %v, want the three of priority 7 to 9", payloads(leased))
	}
	if err := e.q.Ack(e.ctx, leased[1].Receipt, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Cancel(e.ctx, ids[4]); err != nil {
		t.Fatal(err)
	}
	if err := e.q.DeadLetter(e.ctx, leased[2].Receipt, "gone"); err != nil {
		t.Fatal(err)
	}
	e.revive(t, ids[5], time.Time{})
	for i, want := range []queue.State{queue.Queued, queue.Scheduled, queue.Leased, queue.Succeeded, queue.Cancelled, queue.Queued} {
		err := e.q.Revive(e.ctx, ids[i], time.Time{})
		if !errors.Is(err, queue.ErrNotDead) || !strings.Contains(err.Error(), ids[i]) {
			t.Errorf("Revive of a %v task = %v, want ErrNotDead naming %s", want, err, ids[i])
		}
		e.wantState(t, ids[i], want)
	}
	if err := e.q.Revive(e.ctx, "no-such-task", time.Time{}); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("Revive(unknown) = %v, want ErrNotFound", err)
	}
	// The leased task's holder still holds it.
	if err := e.q.Ack(e.ctx, leased[0].Receipt, nil); err != nil {
		t.Errorf("Ack after a refused Revive: %v", err)
	}
	if s := stats(t, e); s.Dead != 0 || s.Ready != 2 || s.Scheduled != 1 || s.Leased != 0 || s.Succeeded != 2 || s.Cancelled != 1 {
		t.Errorf("Stats = %+v, want 2 ready, 1 scheduled, 2 succeeded, 1 cancelled, none dead", s)
	}
}

// Revives of one task at once revive it once: one call succeeds, the
// others are told it is not dead, and it is handed out once.
func testReviveConcurrent(t *testing.T, e *env) {
	const tasks, callers = 4, 8
	ids := enqueuedIDs(e.enqueue(t, make([]queue.Task, tasks)...))
	e.dieInOrder(t, e.leaseAll(t), ids...)
	var wg sync.WaitGroup
	results := make([][]error, tasks)
	for i, id := range ids {
		results[i] = make([]error, callers)
		for c := range callers {
			wg.Go(func() { results[i][c] = e.q.Revive(e.ctx, id, time.Time{}) })
		}
	}
	wg.Wait()
	for i, errs := range results {
		revived := 0
		for _, err := range errs {
			switch {
			case err == nil:
				revived++
			case !errors.Is(err, queue.ErrNotDead):
				t.Errorf("a concurrent Revive of %s = %v, want nil or ErrNotDead", ids[i], err)
			}
		}
		if revived != 1 {
			t.Errorf("%d concurrent Revives of %s succeeded, want 1", revived, ids[i])
		}
	}
	if s := stats(t, e); s.Dead != 0 || s.Ready != tasks {
		t.Errorf("Stats = %+v, want %d ready, none dead", s, tasks)
	}
	got := e.lease(t, 10, 10*e.u)
	seen := map[string]int{}
	for _, l := range got {
		seen[l.ID]++
		if l.Attempt != 1 {
			t.Errorf("revived task %s leased as attempt %d, want 1", l.ID, l.Attempt)
		}
	}
	if len(got) != tasks || len(seen) != tasks {
		t.Errorf("Lease after the revivals = %d leases of %d tasks, want each of the %d once", len(got), len(seen), tasks)
	}
	if more := e.lease(t, 10, 10*e.u); len(more) != 0 {
		t.Errorf("a revived task was handed out twice: %v", payloads(more))
	}
}

// A dead task whose deadline has passed is not revived
// (ErrDeadlinePassed), whether it died of it or of something else first;
// nor is one asked to be ready at or after its deadline (ErrInvalid).
func testReviveDeadline(t *testing.T, e *env) {
	t0 := e.clock.Now()
	early := e.enqueue(t, queue.Task{Payload: []byte("early"), Deadline: t0.Add(4 * e.u)})[0].ID
	e.dieInOrder(t, e.leaseAll(t), early)
	late := e.enqueue(t, queue.Task{Payload: []byte("late"), Deadline: t0.Add(2 * e.u)})[0].ID

	err := e.q.Revive(e.ctx, early, t0.Add(5*e.u))
	if !errors.Is(err, queue.ErrInvalid) || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("Revive for after the deadline = %v, want ErrInvalid saying so", err)
	}
	e.wantState(t, early, queue.Dead)

	e.clock.Advance(3 * e.u) // t0+3u: late's deadline has passed
	if got := e.lease(t, 10, e.u); len(got) != 0 {
		t.Fatalf("a task past its deadline was leased: %v", payloads(got))
	}
	dead := e.listDead(t, "", 10)
	if fmt.Sprint(infoIDs(dead)) != fmt.Sprint([]string{early, late}) || dead[1].Outcome != queue.ReasonDeadline || string(dead[1].Payload) != "late" {
		t.Fatalf("ListDead = %+v, want %s, then %s dead of %q", dead, early, late, queue.ReasonDeadline)
	}
	err = e.q.Revive(e.ctx, late, time.Time{})
	if !errors.Is(err, queue.ErrDeadlinePassed) || !strings.Contains(err.Error(), late) {
		t.Errorf("Revive of a task dead of its deadline = %v, want ErrDeadlinePassed naming %s", err, late)
	}
	e.clock.Advance(2 * e.u) // t0+5u: early's deadline has passed too
	if err := e.q.Revive(e.ctx, early, time.Time{}); !errors.Is(err, queue.ErrDeadlinePassed) {
		t.Errorf("Revive of a task past its deadline = %v, want ErrDeadlinePassed", err)
	}
	if got := e.listDead(t, "", 10); len(got) != 2 {
		t.Errorf("after the refusals ListDead = %v, want both still dead", infoIDs(got))
	}
	if s := stats(t, e); s.Dead != 2 || s.Depth != 0 {
		t.Errorf("Stats = %+v, want 2 dead and nothing waiting", s)
	}
}

// Stats across revivals: Dead goes down, Ready or Scheduled up.
func testReviveStats(t *testing.T, e *env) {
	ids := enqueuedIDs(e.enqueue(t, queue.Task{Payload: []byte("a")}, queue.Task{Payload: []byte("b")}, queue.Task{Payload: []byte("c")}))
	e.dieInOrder(t, e.leaseAll(t), ids...)
	if s := stats(t, e); s.Dead != 3 || s.Depth != 0 {
		t.Fatalf("Stats = %+v, want 3 dead", s)
	}
	t0 := e.clock.Now()
	e.revive(t, ids[0], time.Time{})
	e.revive(t, ids[1], t0.Add(4*e.u))
	if s := stats(t, e); s.Dead != 1 || s.Ready != 1 || s.Scheduled != 1 || s.Depth != 2 {
		t.Errorf("after two revivals Stats = %+v, want 1 dead, 1 ready, 1 scheduled", s)
	}
	e.clock.Advance(5 * e.u)
	if s := stats(t, e); s.Dead != 1 || s.Ready != 2 || s.Scheduled != 0 {
		t.Errorf("when the later one is due Stats = %+v, want 1 dead, 2 ready", s)
	}
	if got := e.lease(t, 10, 10*e.u); len(got) != 2 {
		t.Fatalf("Lease = %v, want the two revived", payloads(got))
	}
	if s := stats(t, e); s.Dead != 1 || s.Leased != 2 || s.Depth != 2 {
		t.Errorf("after the lease Stats = %+v, want 1 dead, 2 leased", s)
	}
}

// The relay's "replay all": page through the dead, reviving each task of
// a page before asking for the next after its last (revived) task. Every
// task is met once; the one Revive refuses stays dead and listed.
func testReplayAllByPages(t *testing.T, e *env) {
	t0 := e.clock.Now()
	tasks := make([]queue.Task, 7)
	tasks[5].Deadline = t0.Add(2 * e.u)
	ids := enqueuedIDs(e.enqueue(t, tasks...))
	e.dieInOrder(t, e.leaseAll(t), ids[6], ids[2], ids[5], ids[0], ids[4], ids[1], ids[3])
	e.clock.Advance(3 * e.u) // ids[5]'s deadline has passed
	met := map[string]int{}
	revived, refused := 0, 0
	after := ""
	for range 10 {
		page := e.listDead(t, after, 2)
		if len(page) == 0 {
			break
		}
		for _, in := range page {
			met[in.ID]++
			switch err := e.q.Revive(e.ctx, in.ID, time.Time{}); {
			case err == nil:
				revived++
			case errors.Is(err, queue.ErrDeadlinePassed) && in.ID == ids[5]:
				refused++
			default:
				t.Errorf("Revive(%s) = %v", in.ID, err)
			}
		}
		after = page[len(page)-1].ID
	}
	if revived != 6 || refused != 1 || len(met) != 7 {
		t.Errorf("replay: %d revived, %d refused, %d tasks met; want 6, 1, 7", revived, refused, len(met))
	}
	for id, n := range met {
		if n != 1 {
			t.Errorf("task %s met %d times", id, n)
		}
	}
	if got := e.listDead(t, "", 10); len(got) != 1 || got[0].ID != ids[5] {
		t.Errorf("after the replay ListDead = %v, want only %s", infoIDs(got), ids[5])
	}
	if s := stats(t, e); s.Dead != 1 || s.Ready != 6 {
		t.Errorf("after the replay Stats = %+v, want 6 ready, 1 dead", s)
	}
}

// The dead, their order and a revival survive a restart; a revived task
// keeps its place as a cursor across it.
func testDeadRestart(t *testing.T, e *env) {
	if e.b.Reopen == nil {
		t.Skip("SKIP: this backend cannot be reopened by the suite")
	}
	ids := enqueuedIDs(e.enqueue(t, queue.Task{Payload: []byte("a")}, queue.Task{Payload: []byte("b")}, queue.Task{Payload: []byte("c")}))
	e.dieInOrder(t, e.leaseAll(t), ids[2], ids[0], ids[1])
	e.revive(t, ids[0], time.Time{})
	e.q = e.b.Reopen(t, e.q, e.cfg)
	if got := infoIDs(e.listDead(t, "", 10)); fmt.Sprint(got) != fmt.Sprint([]string{ids[2], ids[1]}) {
		t.Fatalf("after the restart ListDead = %v, want %v", got, []string{ids[2], ids[1]})
	}
	if got := infoIDs(e.listDead(t, ids[0], 10)); fmt.Sprint(got) != fmt.Sprint([]string{ids[1]}) {
		t.Errorf("after the restart ListDead after the revived %s = %v, want %v", ids[0], got, []string{ids[1]})
	}
	e.wantState(t, ids[0], queue.Queued)
	e.revive(t, ids[1], time.Time{})
	got := e.lease(t, 10, 10*e.u)
	if len(got) != 2 || got[0].Attempt != 1 || got[1].Attempt != 1 {
		t.Fatalf("Lease after the restart = %+v, want the two revived, attempt 1", got)
	}
	if s := stats(t, e); s.Dead != 1 || s.Leased != 2 {
		t.Errorf("Stats = %+v, want 1 dead, 2 leased", s)
	}
}
