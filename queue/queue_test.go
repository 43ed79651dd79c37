package queue_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/queue"
)

func TestReason(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want func(string) bool
	}{
		{"503 Service Unavailable", func(s string) bool { return s == "503 Service Unavailable" }},
		{strings.Repeat("a", queue.MaxReason), func(s string) bool { return len(s) == queue.MaxReason && !strings.HasSuffix(s, "…") }},
		{strings.Repeat("a", queue.MaxReason+1), func(s string) bool { return len(s) <= queue.MaxReason && strings.HasSuffix(s, "…") }},
		{strings.Repeat("é", queue.MaxReason), func(s string) bool { return len(s) <= queue.MaxReason && utf8.ValidString(s) }},
		{"bad \xff byte", func(s string) bool { return s == "bad \uFFFD byte" }},
	} {
		if got := queue.Reason(c.in); !c.want(got) {
			t.Errorf("Reason(%.20q…) = %.40q (%d bytes)", c.in, got, len(got))
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	l := queue.Limits{MaxPayload: 10, MaxAttempts: 5}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := queue.Check(0, queue.Task{Payload: make([]byte, 10), Priority: queue.MaxPriority, MaxAttempts: 5, NotBefore: t0, Deadline: t0.Add(time.Second)}, l); err != nil {
		t.Errorf("a task at every bound: %v", err)
	}
	err := queue.Check(3, queue.Task{MaxAttempts: 6}, l)
	var te *queue.TaskError
	if !errors.As(err, &te) || te.Index != 3 || te.Field != "max_attempts" || !errors.Is(err, queue.ErrInvalid) {
		t.Errorf("Check = %v, want task 3's max_attempts refused", err)
	}
	if err := queue.Check(0, queue.Task{NotBefore: t0, Deadline: t0}, l); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("a deadline equal to not-before: %v", err)
	}
	for _, c := range []struct {
		n   int
		vis time.Duration
		ok  bool
	}{{1, time.Millisecond, true}, {queue.MaxLease, queue.MaxVisibility, true}, {0, time.Second, false}, {1, 0, false}} {
		if err := queue.CheckLease(c.n, c.vis); (err == nil) != c.ok {
			t.Errorf("CheckLease(%d, %v) = %v", c.n, c.vis, err)
		}
	}
}

func ExampleCheck() {
	err := queue.Check(2, queue.Task{Priority: 12}, queue.Limits{MaxPayload: 1 << 20, MaxAttempts: 25})
	fmt.Println(err)
	fmt.Println(errors.Is(err, queue.ErrInvalid))
	// Output:
	// queue: task 2: priority: 12: must be from 0 to 9
	// true
}

func TestCheckList(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n  int
		ok bool
	}{{1, true}, {queue.MaxList, true}, {0, false}, {-1, false}, {queue.MaxList + 1, false}} {
		if err := queue.CheckList(c.n); (err == nil) != c.ok || err != nil && !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("CheckList(%d) = %v, want ok %v (else ErrInvalid)", c.n, err, c.ok)
		}
	}
}

func TestCheckRevive(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, c := range []struct {
		name          string
		deadline, at  time.Time
		wantReady     time.Time
		wantErr       error
		wantErrSaying string
	}{
		{"no deadline, now", time.Time{}, time.Time{}, t0, nil, ""},
		{"no deadline, later", time.Time{}, at(time.Hour), at(time.Hour), nil, ""},
		{"no deadline, in the past", time.Time{}, at(-time.Hour), t0, nil, ""},
		{"before the deadline", at(time.Hour), at(time.Minute), at(time.Minute), nil, ""},
		{"now, deadline ahead", at(time.Nanosecond), time.Time{}, t0, nil, ""},
		{"deadline now", t0, time.Time{}, time.Time{}, queue.ErrDeadlinePassed, "deadline 2026-01-01T00:00:00Z is not after now"},
		{"deadline past", at(-time.Second), at(time.Hour), time.Time{}, queue.ErrDeadlinePassed, "deadline"},
		{"ready at the deadline", at(time.Hour), at(time.Hour), time.Time{}, queue.ErrInvalid, "not before its deadline"},
		{"ready after the deadline", at(time.Hour), at(2 * time.Hour), time.Time{}, queue.ErrInvalid, "not before its deadline"},
	} {
		got, err := queue.CheckRevive("t1", c.deadline, t0, c.at)
		switch {
		case c.wantErr == nil && (err != nil || !got.Equal(c.wantReady)):
			t.Errorf("%s: CheckRevive = %v, %v; want %v", c.name, got, err, c.wantReady)
		case c.wantErr != nil && (!errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.wantErrSaying) || !strings.Contains(err.Error(), "t1")):
			t.Errorf("%s: CheckRevive = %v, want %v saying %q and naming the task", c.name, err, c.wantErr, c.wantErrSaying)
		}
	}
}
