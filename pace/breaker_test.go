package pace

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// A breakerStep is one instant of a timeline.
type breakerStep struct {
	at time.Duration // since the timeline began
	// do is "allow" (Allow, keeping done for later), "success", "failure" or
	// "ignored" (done with that Result on the oldest kept request), or "ok",
	// "fail" or "ign" (Allow, then done at once with that Result).
	do    string
	err   string       // the error Allow must return; "" when it must allow
	state BreakerState // State after the step
}

// runBreaker plays steps on a Breaker of o in a synctest bubble and checks its
// Stats at the end.
func runBreaker(t *testing.T, o BreakerOptions, steps []breakerStep, want BreakerStats) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		b, err := NewBreaker(o)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var kept []func(Result)
		results := map[string]Result{
			"success": Success, "failure": Failure, "ignored": Ignored,
			"ok": Success, "fail": Failure, "ign": Ignored,
		}
		for i, s := range steps {
			time.Sleep(time.Until(start.Add(s.at)))
			switch s.do {
			case "success", "failure", "ignored":
				if len(kept) == 0 {
					t.Fatalf("step %d at %v: %s with no request kept", i, s.at, s.do)
				}
				kept[0](results[s.do])
				kept = kept[1:]
			default:
				done, err := b.Allow()
				got := ""
				if err != nil {
					got = err.Error()
					if !errors.Is(err, ErrOpen) {
						t.Errorf("step %d at %v: %v does not wrap ErrOpen", i, s.at, err)
					}
				}
				if got != s.err || (err == nil) != (done != nil) {
					t.Fatalf("step %d at %v: %s: Allow = (done %v, %q), want %q", i, s.at, s.do, done != nil, got, s.err)
				}
				if done == nil {
					break
				}
				if s.do == "allow" {
					kept = append(kept, done)
				} else {
					done(results[s.do])
				}
			}
			if got := b.State(); got != s.state {
				t.Fatalf("step %d at %v: %s: state %v, want %v", i, s.at, s.do, got, s.state)
			}
		}
		if got := b.Stats(); got != want {
			t.Errorf("stats %+v, want %+v", got, want)
		}
	})
}

// breakerBusy is Allow's error in half-open with the one probe in flight.
const breakerBusy = "pace: circuit open: half-open, next probe when one of 1 in flight is done"

func TestBreakerTimelines(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name  string
		o     BreakerOptions
		steps []breakerStep
		want  BreakerStats
	}{{
		name: "opens after exactly Failures failures",
		o:    BreakerOptions{Failures: 3},
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 1 * s, do: "fail", state: BreakerOpen},
			{at: 1 * s, do: "ok", err: "pace: circuit open: next probe in 10s", state: BreakerOpen},
			{at: 4 * s, do: "ok", err: "pace: circuit open: next probe in 7s", state: BreakerOpen},
		},
		want: BreakerStats{State: BreakerOpen, Opens: 1, Rejected: 2, ConsecutiveFailures: 3},
	}, {
		name: "the default opens after 5",
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerOpen},
		},
		want: BreakerStats{State: BreakerOpen, Opens: 1, ConsecutiveFailures: 5},
	}, {
		name: "a success resets the count",
		o:    BreakerOptions{Failures: 2},
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "ok", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "ok", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerOpen},
		},
		want: BreakerStats{State: BreakerOpen, Opens: 1, ConsecutiveFailures: 2},
	}, {
		name: "ignored does not count nor reset",
		o:    BreakerOptions{Failures: 2},
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "ign", state: BreakerClosed},
			{at: 0, do: "ign", state: BreakerClosed},
			{at: 0, do: "ign", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerOpen},
		},
		want: BreakerStats{State: BreakerOpen, Opens: 1, ConsecutiveFailures: 2},
	}, {
		name: "half-open after OpenFor, not a microsecond before",
		o:    BreakerOptions{Failures: 1, OpenFor: 5 * s},
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerOpen},
			{at: 5*s - time.Microsecond, do: "ok", err: "pace: circuit open: next probe in 1ms", state: BreakerOpen},
			{at: 5 * s, do: "allow", state: BreakerHalfOpen},
			{at: 5 * s, do: "ok", err: breakerBusy, state: BreakerHalfOpen}, // Probes 1: the slot is taken
			{at: 6 * s, do: "success", state: BreakerClosed},
			{at: 6 * s, do: "ok", state: BreakerClosed},
		},
		want: BreakerStats{State: BreakerClosed, Opens: 1, Rejected: 2},
	}, {
		name: "a probe failure reopens for a fresh OpenFor",
		o:    BreakerOptions{Failures: 1, OpenFor: 5 * s},
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerOpen},
			{at: 7 * s, do: "allow", state: BreakerHalfOpen},
			{at: 8 * s, do: "failure", state: BreakerOpen},
			{at: 8 * s, do: "ok", err: "pace: circuit open: next probe in 5s", state: BreakerOpen},
			{at: 13*s - time.Microsecond, do: "ok", err: "pace: circuit open: next probe in 1ms", state: BreakerOpen},
			{at: 13 * s, do: "ok", state: BreakerClosed},
		},
		want: BreakerStats{State: BreakerClosed, Opens: 2, Rejected: 2},
	}, {
		name: "an ignored probe frees its slot and counts nothing",
		o:    BreakerOptions{Failures: 1, OpenFor: 5 * s},
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerOpen},
			{at: 5 * s, do: "allow", state: BreakerHalfOpen},
			{at: 5 * s, do: "ok", err: breakerBusy, state: BreakerHalfOpen},
			{at: 6 * s, do: "ignored", state: BreakerHalfOpen},
			{at: 6 * s, do: "ign", state: BreakerHalfOpen},
			{at: 6 * s, do: "ok", state: BreakerClosed},
		},
		want: BreakerStats{State: BreakerClosed, Opens: 1, Rejected: 1},
	}, {
		name: "Probes 3: three at once, three successes close it",
		o:    BreakerOptions{Failures: 1, OpenFor: 5 * s, Probes: 3},
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerOpen},
			{at: 5 * s, do: "allow", state: BreakerHalfOpen},
			{at: 5 * s, do: "allow", state: BreakerHalfOpen},
			{at: 5 * s, do: "allow", state: BreakerHalfOpen},
			{at: 5 * s, do: "ok", err: "pace: circuit open: half-open, next probe when one of 3 in flight is done", state: BreakerHalfOpen},
			{at: 6 * s, do: "success", state: BreakerHalfOpen},
			{at: 6 * s, do: "success", state: BreakerHalfOpen},
			{at: 6 * s, do: "ok", state: BreakerClosed},      // the third success, with a probe still in flight
			{at: 6 * s, do: "failure", state: BreakerClosed}, // stale: allowed while half-open
		},
		want: BreakerStats{State: BreakerClosed, Opens: 1, Rejected: 1},
	}, {
		name: "Probes 3: a failure after two successes reopens",
		o:    BreakerOptions{Failures: 1, OpenFor: 5 * s, Probes: 3},
		steps: []breakerStep{
			{at: 0, do: "fail", state: BreakerOpen},
			{at: 5 * s, do: "ok", state: BreakerHalfOpen},
			{at: 5 * s, do: "ok", state: BreakerHalfOpen},
			{at: 5 * s, do: "fail", state: BreakerOpen},
			{at: 10 * s, do: "ok", state: BreakerHalfOpen}, // the successes before reopening do not count
			{at: 10 * s, do: "ok", state: BreakerHalfOpen},
			{at: 10 * s, do: "ok", state: BreakerClosed},
		},
		want: BreakerStats{State: BreakerClosed, Opens: 2},
	}, {
		name: "stale results while open do nothing",
		o:    BreakerOptions{Failures: 2, OpenFor: 5 * s},
		steps: []breakerStep{
			{at: 0, do: "allow", state: BreakerClosed},
			{at: 0, do: "allow", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerOpen},
			{at: 1 * s, do: "success", state: BreakerOpen},
			{at: 1 * s, do: "failure", state: BreakerOpen},
			{at: 1 * s, do: "ok", err: "pace: circuit open: next probe in 4s", state: BreakerOpen},
		},
		want: BreakerStats{State: BreakerOpen, Opens: 1, Rejected: 1, ConsecutiveFailures: 2},
	}, {
		name: "stale results while half-open take no probe slot",
		o:    BreakerOptions{Failures: 1, OpenFor: 5 * s},
		steps: []breakerStep{
			{at: 0, do: "allow", state: BreakerClosed},
			{at: 0, do: "allow", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerOpen},
			{at: 5 * s, do: "allow", state: BreakerHalfOpen},   // the probe
			{at: 6 * s, do: "success", state: BreakerHalfOpen}, // stale: does not close
			{at: 6 * s, do: "ok", err: breakerBusy, state: BreakerHalfOpen},
			{at: 6 * s, do: "failure", state: BreakerHalfOpen}, // stale: does not reopen
			{at: 6 * s, do: "ok", err: breakerBusy, state: BreakerHalfOpen},
			{at: 7 * s, do: "success", state: BreakerClosed}, // the probe
		},
		want: BreakerStats{State: BreakerClosed, Opens: 1, Rejected: 2},
	}, {
		name: "stale results from an earlier closed state do not count",
		o:    BreakerOptions{Failures: 1, OpenFor: 5 * s},
		steps: []breakerStep{
			{at: 0, do: "allow", state: BreakerClosed},
			{at: 0, do: "fail", state: BreakerOpen},
			{at: 5 * s, do: "ok", state: BreakerClosed},
			{at: 6 * s, do: "failure", state: BreakerClosed},
		},
		want: BreakerStats{State: BreakerClosed, Opens: 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runBreaker(t, tt.o, tt.steps, tt.want)
		})
	}
}

func TestBreakerDoneTwice(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, err := NewBreaker(BreakerOptions{Failures: 2, OpenFor: time.Second, Probes: 2})
		if err != nil {
			t.Fatal(err)
		}
		done, _ := b.Allow()
		done(Failure)
		done(Failure)
		if got := b.Stats(); got.State != BreakerClosed || got.ConsecutiveFailures != 1 {
			t.Fatalf("one failure reported twice: %+v, want closed with 1 failure", got)
		}
		done, _ = b.Allow()
		done(Failure)
		time.Sleep(time.Second)
		p1, err1 := b.Allow()
		p2, err2 := b.Allow()
		if err1 != nil || err2 != nil {
			t.Fatalf("half-open with Probes 2: %v, %v", err1, err2)
		}
		p1(Success)
		p1(Success)
		p1(Failure)
		if got := b.State(); got != BreakerHalfOpen {
			t.Fatalf("one probe's success reported twice: %v, want half_open", got)
		}
		if _, err := b.Allow(); err != nil {
			t.Fatalf("the finished probe's slot is not free: %v", err)
		}
		p2(Success)
		if got := b.State(); got != BreakerClosed {
			t.Fatalf("after two probe successes: %v, want closed", got)
		}
	})
}

func TestBreakerConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const probes = 3
	synctest.Test(t, func(t *testing.T) {
		b, err := NewBreaker(BreakerOptions{Failures: 4, OpenFor: 10 * time.Millisecond, Probes: probes})
		if err != nil {
			t.Fatal(err)
		}
		var allowed, refused atomic.Uint64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 0))
				for range 300 {
					done, err := b.Allow()
					if err != nil {
						if !errors.Is(err, ErrOpen) {
							t.Errorf("Allow: %v does not wrap ErrOpen", err)
						}
						refused.Add(1)
					} else {
						allowed.Add(1)
						time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
						done(Result(r.IntN(3)))
						done(Failure) // a no-op
					}
					_, _ = b.State(), b.Stats()
					time.Sleep(time.Duration(r.IntN(2)) * time.Millisecond)
				}
			})
		}
		wg.Wait()
		st := b.Stats()
		if st.Rejected != refused.Load() || allowed.Load()+refused.Load() != 64*300 {
			t.Fatalf("stats %+v: %d allowed, %d refused", st, allowed.Load(), refused.Load())
		}
		if st.Opens == 0 || st.Rejected == 0 {
			t.Fatalf("stats %+v: want it opened and refused", st)
		}
		// Every request is done: no probe slot may be left taken.
		for b.State() != BreakerOpen {
			done, err := b.Allow()
			if err != nil {
				t.Fatalf("after the storm, in %v: %v", b.State(), err)
			}
			done(Failure)
		}
		time.Sleep(10 * time.Millisecond)
		var dones []func(Result)
		for i := range probes {
			done, err := b.Allow()
			if err != nil {
				t.Fatalf("probe %d after the storm: %v", i, err)
			}
			dones = append(dones, done)
		}
		if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
			t.Fatalf("probe %d after the storm: %v, want ErrOpen", probes, err)
		}
		for _, done := range dones {
			done(Success)
		}
		if st := b.Stats(); st.State != BreakerClosed || st.ConsecutiveFailures != 0 {
			t.Fatalf("after %d probe successes: %+v, want closed", probes, st)
		}
	})
}

func TestNewBreakerInvalid(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		o    BreakerOptions
		want string
	}{
		{BreakerOptions{Failures: -1}, "pace: invalid options: Failures -1 is negative"},
		{BreakerOptions{OpenFor: -time.Second}, "pace: invalid options: OpenFor -1s is negative"},
		{BreakerOptions{Probes: -2}, "pace: invalid options: Probes -2 is negative"},
	} {
		b, err := NewBreaker(tt.o)
		if b != nil || !errors.Is(err, ErrInvalidOptions) || err.Error() != tt.want {
			t.Errorf("NewBreaker(%+v) = %v, %v; want %q", tt.o, b, err, tt.want)
		}
	}
}

func TestBreakerStateString(t *testing.T) {
	t.Parallel()
	var got []string
	for _, s := range []BreakerState{BreakerClosed, BreakerOpen, BreakerHalfOpen, 7} {
		got = append(got, s.String())
	}
	if want := "closed open half_open BreakerState(7)"; strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", strings.Join(got, " "), want)
	}
}

func ExampleBreaker() {
	b, err := NewBreaker(BreakerOptions{Failures: 2, OpenFor: time.Minute})
	if err != nil {
		panic(err)
	}
	send := func(status int) {
		done, err := b.Allow()
		if err != nil {
			fmt.Println("not sent:", errors.Is(err, ErrOpen))
			return
		}
		switch {
		case status >= 500:
			done(Failure)
		case status >= 400:
			done(Ignored) // the request's fault, not the target's
		default:
			done(Success)
		}
		fmt.Println(status, b.State())
	}
	send(200)
	send(503)
	send(404)
	send(502)
	send(200)
	fmt.Printf("%+v\n", b.Stats())
	// Output:
	// 200 closed
	// 503 closed
	// 404 closed
	// 502 open
	// not sent: true
	// {State:open Opens:1 Rejected:1 ConsecutiveFailures:2}
}
