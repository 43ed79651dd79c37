package redisbucket_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisbucket"
	"github.com/sluicehq/sluice/redisstore"
)

// The figures of the tests: L per second, burst B, the default slice
// (L × 100 ms = 10 tokens), T of hungry spending.
const (
	rateL  = 100.0
	burstB = 10.0
	sliceS = 10.0
	spendT = 2 * time.Second
	// clockSlack allows for Redis's clock and this process's to drift
	// apart during a run, in tokens (NTP slews at most 500 ppm: 0.1 token
	// over 2 s at 100/s).
	clockSlack = 0.5
	// leastShare is the share of B + L×T that hungry processes must get.
	// The slice is the whole burst here, so a process that wakes late
	// finds the bucket full and loses the refill meanwhile: a loaded
	// machine (-race, parallel tests) costs a few ms per slice, 3-8%; a
	// process that asked a slice time late would lose half.
	leastShare = 0.85
)

// One process, always short of tokens, on a Redis of its own (so that
// INFO commandstats counts its calls only): it admits at most what the
// bucket grants, and takes the tokens a slice per round trip.
func TestOneProcess(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	b := newBudget(t, redisbucket.Options{Client: dial(t, srv.Addr()), Limit: limit(fresh(t), rateL, burstB)})
	before := scriptCalls(t, srv)

	start := time.Now()
	admitted := float64(len(hungry(lasting(t, spendT), b, 1)))
	elapsed := time.Since(start).Seconds()

	st := b.Stats()
	calls := scriptCalls(t, srv) - before
	// The bucket starts full and the process holds nothing: it admits at
	// most B + L×T, tighter than the documented B + L×T + Slice.
	bound := burstB + rateL*elapsed
	t.Logf("admitted %v in %.3f s (bound B+L×T = %.1f, documented B+L×T+Slice = %.1f); %d round trips (Redis counted %d): %d slices, %d denials, %d waits; %.2f round trips per slice of %v",
		admitted, elapsed, bound, bound+sliceS, st.RoundTrips, calls, st.Slices, st.Denials, st.Waits, float64(st.RoundTrips)/(admitted/sliceS), sliceS)
	if admitted > bound+clockSlack {
		t.Errorf("admitted %v > B + L×T = %.1f", admitted, bound)
	}
	if admitted < leastShare*bound {
		t.Errorf("admitted %v < %v × (B + L×T) = %.1f: the process left the bucket unused", admitted, leastShare, leastShare*bound)
	}
	if st.Admitted != admitted || math.Abs(st.Held-(st.Granted-st.Admitted)) > 1e-9 || st.Held >= sliceS {
		t.Errorf("Stats %+v after admitting %v", st, admitted)
	}
	if calls != st.RoundTrips {
		t.Errorf("Stats.RoundTrips = %d, Redis ran %d script calls", st.RoundTrips, calls)
	}
	// A slice per round trip, and the EVAL after a NOSCRIPT (this Redis
	// is new); a slice may come a round trip's refill short (the process
	// asks a moment early rather than late): 5% of them.
	if most := math.Ceil(st.Granted/sliceS*1.05) + 1; float64(st.RoundTrips) > most {
		t.Errorf("%d round trips for %v tokens granted: want at most %v (one per slice of %v, 5%%, and the EVAL)", st.RoundTrips, st.Granted, most, sliceS)
	}
	if st.Failures != 0 {
		t.Errorf("%d failures", st.Failures)
	}
}

// Four processes (Budgets on clients of their own, two goroutines each)
// share one bucket, all short of tokens: together they admit about what
// the bucket grants and never more than the bound, in total and in every
// 1 s window.
func TestFleet(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	const processes, goroutines = 4, 2
	name := fresh(t)
	budgets := make([]*redisbucket.Budget, processes)
	for i := range budgets {
		budgets[i] = newBudget(t, redisbucket.Options{Client: dial(t, addr), Limit: limit(name, rateL, burstB)})
	}

	start := time.Now()
	ctx := lasting(t, spendT)
	var (
		mu  sync.Mutex
		all []time.Time
		wg  sync.WaitGroup
	)
	for _, b := range budgets {
		for range goroutines {
			wg.Go(func() {
				at := hungry(ctx, b, 1)
				mu.Lock()
				all = append(all, at...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()

	admitted := float64(len(all))
	cold := burstB + rateL*elapsed                     // the bucket's own bound: no process held tokens at the start
	documented := cold + processes*sliceS              // B + L×T + N×Slice
	windowBound := rateL*1 + burstB + processes*sliceS // in any 1 s
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	busiest := 0
	for i, j := 0, 0; j < len(all); j++ {
		for all[j].Sub(all[i]) >= time.Second {
			i++
		}
		busiest = max(busiest, j-i+1)
	}
	var roundTrips, slicesTaken, denials int64
	var rates float64
	for i, b := range budgets {
		st := b.Stats()
		roundTrips, slicesTaken, denials = roundTrips+st.RoundTrips, slicesTaken+st.Slices, denials+st.Denials
		rates += b.Rate()
		t.Logf("process %d: %+v, Rate %.1f/s", i, st, b.Rate())
		if st.Failures != 0 {
			t.Errorf("process %d: %d failures", i, st.Failures)
		}
	}
	t.Logf("admitted %v in %.3f s: B+L×T = %.1f, B+L×T+N×Slice = %.1f; busiest 1 s window %d (bound %v); %d round trips: %d slices, %d denials, %.2f round trips per slice of %v; Rates add up to %.1f/s",
		admitted, elapsed, cold, documented, busiest, windowBound, roundTrips, slicesTaken, denials, float64(roundTrips)/(admitted/sliceS), sliceS, rates)
	if admitted > documented {
		t.Errorf("admitted %v > B + L×T + N×Slice = %.1f", admitted, documented)
	}
	if admitted > cold+clockSlack {
		t.Errorf("admitted %v > B + L×T = %.1f from a full bucket and empty processes", admitted, cold)
	}
	if admitted < leastShare*cold {
		t.Errorf("admitted %v < %v × (B + L×T) = %.1f: the fleet left the bucket unused", admitted, leastShare, leastShare*cold)
	}
	if float64(busiest) > windowBound {
		t.Errorf("%d admitted within 1 s > L + B + N×Slice = %v", busiest, windowBound)
	}
	if rates < 0.7*rateL || rates > 1.3*rateL {
		t.Errorf("the processes' Rates add up to %.1f/s, want about L = %v/s", rates, rateL)
	}
}

// A process holds at most a slice, however many goroutines wait: the
// extra burst of the bound is Slice per process. Here a process took a
// slice of 4 and spent 1; a second process then finds the bucket holding
// the rest, B − 4, and no more.
func TestHeldIsAtMostASlice(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	name := fresh(t)
	slow := limit(name, 0.001, burstB) // refills nothing during the test
	a := newBudget(t, redisbucket.Options{Client: dial(t, addr), Limit: slow, Slice: 4})
	ctx := context.Background()
	if err := a.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Granted != 4 || st.Held != 3 || st.RoundTrips > 2 {
		t.Fatalf("first process: %+v, want 4 granted, 3 held", st)
	}
	b := newBudget(t, redisbucket.Options{Client: dial(t, addr), Limit: slow, Slice: burstB})
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := b.Wait(short, burstB-4); err != nil {
		t.Fatalf("second process: Wait(B − 4): %v", err)
	}
	if err := b.Wait(short, 0.1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second process: Wait(0.1) on an empty bucket: %v, want a deadline error", err)
	}
}

// A Wait whose deadline comes before the bucket refills its cost fails at
// once, not at the deadline: other processes only ever take.
func TestDeadlineBeforeRefillFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := newBudget(t, redisbucket.Options{Client: dial(t, redistest.Addr(t)), Limit: limit(fresh(t), 1, 1)})
	if err := b.Wait(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.Wait(ctx, 1)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 250*time.Millisecond {
		t.Fatalf("Wait(1) with 0.5 s to go, 1 s before a token: %v after %v; want a deadline error at once", err, took)
	}
	if st := b.Stats(); st.Admitted != 1 || st.Waits != 0 {
		t.Fatalf("%+v: want 1 admitted, no sleep", st)
	}
}

// Processes that share a name with another configuration share its
// bucket: a changed limit finds the tokens left (converted exactly into
// its own units), not a fresh burst.
func TestChangedLimitKeepsTheLevel(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	name := fresh(t)
	before := limit(name, 1, burstB) // 1 per second: a token's a millionth per µs
	a := newBudget(t, redisbucket.Options{Client: dial(t, addr), Limit: before, Slice: 4})
	ctx := context.Background()
	if err := a.Wait(ctx, 4); err != nil {
		t.Fatal(err)
	}
	after := before
	after.Quota, after.Window = 3, 7*time.Second // other scaled units: 7 per atom
	b := newBudget(t, redisbucket.Options{Client: dial(t, addr), Limit: after, Slice: 6})
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := b.Wait(short, 6); err != nil {
		t.Fatalf("Wait(6) on the 6 tokens left: %v", err)
	}
	if err := b.Wait(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait(1) on the bucket emptied: %v, want a deadline error", err)
	}
}

// On a Redis Cluster, each bucket's one key lives in the hash slot of its
// name (its hash tag): Budgets of names spread over the nodes take and
// refuse as on a single node.
func TestCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		b := newBudget(t, redisbucket.Options{Client: conn, Limit: limit(fresh(t)+name, 0.001, 10), Slice: 5})
		for range 2 {
			if err := b.Wait(ctx, 5); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := b.Wait(short, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: Wait on the emptied bucket: %v, want a deadline error", name, err)
		}
		if st := b.Stats(); st.Slices != 2 || st.Failures != 0 {
			t.Fatalf("%s: %+v, want 2 slices", name, st)
		}
	}
}
