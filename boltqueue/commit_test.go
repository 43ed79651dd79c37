package boltqueue

import (
	"sync"
	"testing"
	"time"
)

// callersComingBack starts n goroutines that each submit one change as
// soon as they run, as callers answered by a commit submit their next,
// and returns a function that waits for them.
func callersComingBack(ops chan *op, n int) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { ops <- &op{} })
	}
	return wg.Wait
}

// The committer waits for the callers it answered to submit again before
// the next commit, so that callers in a loop share one commit instead of
// alternating in two halves. The control, not waiting, sees most of them
// missing: the test can tell the two apart.
func TestRejoinWaitsForTheAnsweredCallers(t *testing.T) {
	const trials, callers = 200, 32
	waited, notWaited := 0, 0
	for range trials {
		ops := make(chan *op, 1024)
		wait := callersComingBack(ops, callers)
		rejoin(ops, callers)
		if len(ops) == callers {
			waited++
		}
		wait()

		ops = make(chan *op, 1024)
		wait = callersComingBack(ops, callers)
		if len(ops) == callers {
			notWaited++
		}
		wait()
	}
	t.Logf("all %d callers back before the next commit: %d of %d trials with rejoin, %d without", callers, waited, trials, notWaited)
	if waited < trials*8/10 {
		t.Errorf("rejoin: all callers back in %d of %d trials, want at least 80%%", waited, trials)
	}
	if notWaited > trials/2 {
		t.Errorf("control: all callers back without waiting in %d of %d trials; the test cannot tell waiting from not", notWaited, trials)
	}
}

// A caller that does not come back costs a few yields, not a wait: rejoin
// returns with nothing submitted.
func TestRejoinDoesNotWaitForCallersThatDoNotComeBack(t *testing.T) {
	ops := make(chan *op, 8)
	rejoin(ops, 5)
	if len(ops) != 0 {
		t.Fatalf("%d changes appeared from nowhere", len(ops))
	}
	// More answered than the channel holds: bounded by its capacity.
	ops <- &op{}
	rejoin(ops, 100)
}

// awaitCallers on a driven clock (10 µs a reading) and scheduler: the
// number of yields it makes says how long it waited.
func yieldsUntilReturn(arrive func(yield int) bool, want int) int {
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(10 * time.Microsecond); return clock }
	waiting, yields := 0, 0
	awaitCallers(func() int { return waiting }, want, now, func() {
		yields++
		if arrive(yields) {
			waiting++
		}
	})
	return yields
}

func TestAwaitCallersBounds(t *testing.T) {
	cases := []struct {
		name       string
		arrive     func(yield int) bool
		want       int
		mostYields int
	}{
		// Every yield brings a caller: done when all are back.
		{"all come back", func(int) bool { return true }, 20, 20},
		// None comes: the stall (50 µs) ends it.
		{"none comes", func(int) bool { return false }, 20, 6},
		// One every fourth reading (40 µs, within the stall), without
		// end: only the overall bound (250 µs) ends it. Without that
		// bound this waits for all 1e6.
		{"trickle", func(y int) bool { return y%4 == 0 }, 1e6, 26},
	}
	for _, c := range cases {
		if got := yieldsUntilReturn(c.arrive, c.want); got > c.mostYields {
			t.Errorf("%s: %d yields (%v on the driven clock), want at most %d", c.name, got, time.Duration(got)*10*time.Microsecond, c.mostYields)
		}
	}
}
