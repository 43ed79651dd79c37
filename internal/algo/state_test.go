package algo

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// epoch is 2026-01-01T00:00:00Z in Unix microseconds, aligned to every
// window used here.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

const (
	ms = time.Millisecond
	s1 = time.Second
)

var algorithms = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.LeakyBucket, sluice.Concurrency}

func limitFor(alg sluice.Algorithm, quota float64, w time.Duration) sluice.Limit {
	return sluice.Limit{Name: "t", Algorithm: alg, Quota: quota, Window: w}
}

// Time moving backwards is an error for the token bucket and for the
// algorithms that remember when they were last called; GCRA and Concurrency
// answer it conservatively instead.
func TestClockBackwards(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l := limitFor(alg, 5, s1)
			p, _ := Compile(l)
			s := NewState(alg)
			s.Init(p, epoch)
			if _, err := s.Step(p, Call{Now: epoch + (2 * s1).Microseconds(), Cost: 1e6, Ticket: 1}, true); err != nil {
				t.Fatal(err)
			}
			d, err := s.Step(p, Call{Now: epoch + (s1).Microseconds(), Cost: 1e6, Ticket: 2}, true)
			tolerant := alg == sluice.GCRA || alg == sluice.Concurrency
			if tolerant {
				if err != nil {
					t.Fatalf("err = %v, want a decision", err)
				}
				if s.Floor() != minInstant {
					t.Errorf("Floor = %d, want minInstant", s.Floor())
				}
				return
			}
			if !errors.Is(err, ErrClockBackwards) || d.Allowed() {
				t.Fatalf("(allowed, err) = (%v, %v), want (false, ErrClockBackwards)", d.Allowed(), err)
			}
			if s.Floor() != epoch+(2*s1).Microseconds() && s.Floor() != windowStart(epoch+(2*s1).Microseconds(), s1.Microseconds()) {
				t.Errorf("Floor = %d, want the last instant or its window", s.Floor())
			}
		})
	}
}

func TestConcurrencyExpiryAndRelease(t *testing.T) {
	t.Parallel()
	l := limitFor(sluice.Concurrency, 2, 10*s1)
	p, _ := Compile(l)
	s := new(Concurrency)
	s.Init(p, epoch)
	step := func(at time.Duration, ticket uint64) Result {
		d, err := s.Step(p, Call{Now: epoch + (at).Microseconds(), Cost: 1e6, Ticket: ticket}, true)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := step(0, 1); !d.Allowed() || d.Remaining() != 1e6 || d.ResetAfter() != 10*s1 {
		t.Fatalf("first: %+v", d)
	}
	if d := step(2*s1, 2); !d.Allowed() || d.Remaining() != 0 || d.ResetAfter() != 10*s1 {
		t.Fatalf("second: %+v", d)
	}
	if d := step(3*s1, 3); d.Allowed() || d.RetryAfter() != 7*s1 || d.ResetAfter() != 9*s1 {
		t.Fatalf("third, full: %+v", d)
	}
	if !s.Release(2) || s.Release(2) {
		t.Fatal("Release(2) twice: want true then false")
	}
	if d := step(3*s1, 4); !d.Allowed() || d.Remaining() != 0 {
		t.Fatalf("after release: %+v", d)
	}
	// Ticket 1 expires at 10 s: a crashed holder's slot comes back.
	if d := step(10*s1, 5); !d.Allowed() || d.Remaining() != 0 || d.ResetAfter() != 10*s1 {
		t.Fatalf("after expiry: %+v", d)
	}
	if s.Release(1) {
		t.Fatal("Release of an expired ticket reported a hold")
	}
}
