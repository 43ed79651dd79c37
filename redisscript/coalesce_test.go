package redisscript_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
)

// The conformance suite, every decision through the batch script (alone
// or with others): the coalesced path decides as the single call does.
func TestConformanceBatched(t *testing.T) {
	client := redisstore.NewRueidis(newRueidis(t, redistest.Addr(t)))
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		s := newStore(t, conformanceOptions(client, now))
		s.BatchAlways()
		return s
	})
}

// scriptCalls is how many script calls a test-owned Redis ran.
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	out, err := srv.CLI("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(out) {
		for _, c := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(line, c); ok {
				k, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				n += k
			}
		}
	}
	return n
}

// Under load, decisions share script calls (Redis's own count of them
// shows it), and stay exact: 64 callers race for a capacity of 1000 that
// does not refill, and exactly 1000 are admitted.
func TestBatchesFormUnderLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, redisscript.Options{Client: redisstore.NewRueidis(newRueidis(t, srv.Addr())), Timeout: patient})
	limit := sluice.Limit{Name: "coalesce", Quota: 1000, Window: 1000 * time.Hour}
	before := scriptCalls(t, srv)
	const callers, each = 64, 40
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				d, err := s.Allow(context.Background(), "k", limit, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	calls := scriptCalls(t, srv) - before
	st := s.Stats()
	t.Logf("%d decisions in %d script calls (%.1f per call); %d batches carried %d", callers*each, calls, float64(callers*each)/float64(calls), st.Batches, st.Batched)
	if admitted.Load() != 1000 {
		t.Errorf("%d admitted, want exactly 1000", admitted.Load())
	}
	if calls != int(st.Calls+st.NoScript) {
		t.Errorf("Redis ran %d script calls, the store counted %d and %d NOSCRIPT answered by EVAL", calls, st.Calls, st.NoScript)
	}
	if st.Batched == 0 || calls*2 > callers*each {
		t.Errorf("%d script calls for %d decisions (%d coalesced): want batches, at least 2 decisions per call", calls, callers*each, st.Batched)
	}
}

// A lone caller's decision is one script call of its own, sent at once:
// it never goes through a batch.
func TestLoneCallerGoesAlone(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, redisscript.Options{Client: redisstore.NewRueidis(newRueidis(t, srv.Addr())), Timeout: patient})
	limit := sluice.Limit{Name: "alone", Quota: 1e6, Window: time.Second}
	if _, err := s.Allow(context.Background(), "k", limit, 1); err != nil { // loads the script
		t.Fatal(err)
	}
	before := scriptCalls(t, srv)
	for i := range 200 {
		if _, err := s.Allow(context.Background(), "k"+strconv.Itoa(i%7), limit, 1); err != nil {
			t.Fatal(err)
		}
	}
	if calls, st := scriptCalls(t, srv)-before, s.Stats(); calls != 200 || st.Batches != 0 {
		t.Errorf("200 decisions one after the other: %d script calls, %d batches; want 200 calls, none a batch", calls, st.Batches)
	}
}

// gate is a Client whose script calls wait for the gate to open (a slow
// Redis, played in front of the real one).
type gate struct {
	redisscript.Client
	open    chan struct{}
	waiting atomic.Int32
}

func (g *gate) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	g.waiting.Add(1)
	<-g.open
	return g.Client.EvalSHA(ctx, sha, keys, args)
}

// A caller whose context ends while its decision waits for a batch gets its
// own error at once; the batch goes on without it, and the others are
// answered.
func TestQueuedCallerLeaves(t *testing.T) {
	g := &gate{Client: sharedClient(t), open: make(chan struct{})}
	s := newStore(t, redisscript.Options{Client: g, Timeout: patient, Coalesce: redisscript.CoalesceOptions{InFlight: 1}})
	limit := sluice.Limit{Name: "leave", Quota: 100, Window: time.Hour}
	key := unique(t, "k")
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { _, err := s.Allow(ctx, key, limit, 1); first <- err }()
	for g.waiting.Load() == 0 {
		time.Sleep(time.Millisecond) // the first call is in flight, at the gate
	}
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { _, err := s.Allow(leaving, key, limit, 1); left <- err }()
	staying := make(chan sluice.Decision, 1)
	go func() {
		d, err := s.Allow(ctx, key, limit, 1)
		if err != nil {
			t.Error(err)
		}
		staying <- d
	}()
	time.Sleep(20 * time.Millisecond) // both queued behind the first call
	leave()
	select {
	case err := <-left:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the caller that left got %v, want its context's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller that left is still waiting")
	}
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if d := <-staying; !d.Allowed || d.Remaining < 98 || d.Remaining >= 98.5 {
		t.Errorf("the caller that stayed: %+v; want allowed with 98 left (the one that left was not sent)", d)
	}
	if st := s.Stats(); st.Batches != 1 || st.Batched != 1 {
		t.Errorf("%d batches carrying %d decisions; want 1 carrying 1", st.Batches, st.Batched)
	}
}

// AllowAll of several limits is one decision of a batch (all its keys in
// the same call) and stays all or nothing: 32 callers race AllowAll over a
// limit of 100 that does not refill and two large ones; exactly 100 are
// admitted, and every admitted call spent on all three.
func TestAllowAllRidesTheBatch(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, redisscript.Options{Client: redisstore.NewRueidis(newRueidis(t, srv.Addr())), Timeout: patient})
	small := sluice.Limit{Name: "small", Quota: 100, Window: 1000 * time.Hour}
	large := sluice.Limit{Name: "large", Quota: 1e6, Window: 1000 * time.Hour}
	other := sluice.Limit{Name: "other", Quota: 1e6, Window: 1000 * time.Hour, Algorithm: sluice.GCRA}
	before := scriptCalls(t, srv)
	const callers, each = 32, 20
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				reqs := []sluice.Request{{Key: "k", Limit: small, Cost: 1}, {Key: "k", Limit: large, Cost: 1}, {Key: "k", Limit: other, Cost: 1}}
				d, err := s.AllowAll(context.Background(), reqs, sluice.AllOrNothing, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	calls, st := scriptCalls(t, srv)-before, s.Stats()
	t.Logf("%d AllowAll of 3 limits in %d script calls; %d batches carried %d", callers*each, calls, st.Batches, st.Batched)
	if admitted.Load() != 100 {
		t.Errorf("%d admitted, want exactly 100", admitted.Load())
	}
	if st.Batched == 0 || calls*2 > callers*each {
		t.Errorf("%d script calls for %d AllowAll (%d coalesced): want batches", calls, callers*each, st.Batched)
	}
	// All or nothing: the large limits were spent exactly by the 100.
	for _, l := range []sluice.Limit{large, other} {
		if d, err := s.Peek(context.Background(), "k", l); err != nil || d.Remaining < 1e6-100 || d.Remaining >= 1e6-99 {
			t.Errorf("%s after: %+v, %v; want %v left", l.Name, d, err, 1e6-100)
		}
	}
}

// held is a Client whose first script call waits until release is
// closed: the decisions made meanwhile queue behind it.
type held struct {
	redisscript.Client
	release chan struct{}
	first   atomic.Bool
	holding atomic.Bool
}

func (h *held) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if h.first.CompareAndSwap(false, true) {
		h.holding.Store(true)
		<-h.release
	}
	return h.Client.EvalSHA(ctx, sha, keys, args)
}

// queueBehind starts a decision that holds the only call in flight, then
// runs each of fs on its own goroutine (they queue), waits until all have
// queued, releases the call and waits for fs to end.
func queueBehind(t *testing.T, s *redisscript.Store, h *held, limit sluice.Limit, fs ...func()) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = s.Allow(context.Background(), unique(t, "held"), limit, 1) })
	for !h.holding.Load() {
		time.Sleep(time.Millisecond)
	}
	for _, f := range fs {
		wg.Go(f)
	}
	time.Sleep(50 * time.Millisecond) // all queued
	close(h.release)
	wg.Wait()
}

// A decision that fails in the batch script (its key holds a list) fails
// alone, with Redis's refusal as an error; the others of its batch are
// decided and spent.
func TestBatchMemberFailsAlone(t *testing.T) {
	srv := redistest.StartServer(t)
	h := &held{Client: redisstore.NewRueidis(newRueidis(t, srv.Addr())), release: make(chan struct{})}
	s := newStore(t, redisscript.Options{Client: h, Timeout: patient, Coalesce: redisscript.CoalesceOptions{InFlight: 1}})
	limit := sluice.Limit{Name: "member", Quota: 10, Window: time.Hour}
	bad, _, err := s.StateKey(limit, "b")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := srv.CLI("LPUSH", bad, "not a state"); err != nil {
		t.Fatal(err, out)
	}
	var da, dc sluice.Decision
	var errA, errB, errC error
	queueBehind(t, s, h, limit,
		func() { da, errA = s.Allow(context.Background(), "a", limit, 1) },
		func() { _, errB = s.Allow(context.Background(), "b", limit, 1) },
		func() { dc, errC = s.Allow(context.Background(), "c", limit, 1) })
	if st := s.Stats(); st.Batches != 1 || st.Batched != 3 {
		t.Fatalf("%d batches carrying %d; want the three in one", st.Batches, st.Batched)
	}
	if errA != nil || errC != nil || !da.Allowed || !dc.Allowed || da.Remaining < 9 || da.Remaining >= 9.5 {
		t.Errorf("a: %+v, %v; c: %+v, %v; want both allowed, 9 left", da, errA, dc, errC)
	}
	var re *redisscript.ReplyError
	if !errors.As(errB, &re) || errors.Is(errB, context.DeadlineExceeded) {
		t.Errorf("b = %v; want a Redis error reply (not an outage)", errB)
	}
	if st := s.Stats(); st.FailOpen+st.FailClosed+st.FailLocal != 0 {
		t.Errorf("%+v: a policy decided; want none", st)
	}
}

// A queued decision whose Timeout ends before its batch answers is
// decided by its policy, and is never sent.
func TestQueuedPastItsTimeout(t *testing.T) {
	h := &held{Client: sharedClient(t), release: make(chan struct{})}
	s := newStore(t, redisscript.Options{Client: h, Timeout: 100 * time.Millisecond, Policy: sluice.FailClosed,
		BreakerFailures: 1000, Coalesce: redisscript.CoalesceOptions{InFlight: 1}})
	limit := sluice.Limit{Name: "late", Quota: 10, Window: time.Hour}
	var d sluice.Decision
	var err error
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = s.Allow(context.Background(), unique(t, "held"), limit, 1) })
	for !h.holding.Load() {
		time.Sleep(time.Millisecond)
	}
	wg.Go(func() { d, err = s.Allow(context.Background(), unique(t, "late"), limit, 1) })
	time.Sleep(300 * time.Millisecond) // past the queued decision's Timeout
	close(h.release)
	wg.Wait()
	// Two policy decisions: the held call's (past its own Timeout) and
	// the queued one's.
	if st := s.Stats(); err != nil || d.Allowed || st.FailClosed != 2 || st.Batched != 0 {
		t.Errorf("%+v, %v, stats %+v; want fail_closed's rejection, nothing sent in a batch", d, err, st)
	}
}

// slow is a Client whose every script call takes d more: a slow Redis.
type slow struct {
	redisscript.Client
	d time.Duration
}

func (c slow) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	time.Sleep(c.d)
	return c.Client.EvalSHA(ctx, sha, keys, args)
}

// A slow Redis is not made an outage by the queueing: each batch's call
// has the whole Timeout. Answering in 20 ms against 200, every decision is
// Redis's. Answering in 60 ms against 100, a queued decision (which waits
// for the call ahead and its own) may pass its Timeout and be decided by
// its policy, but Redis is never counted as failing and the breaker never
// opens (the negative control of a batch given only its members' earliest
// deadline, which did both).
func TestSlowRedisIsNotAnOutage(t *testing.T) {
	for _, c := range []struct {
		delay, timeout time.Duration
		policyOK       bool
	}{{20 * time.Millisecond, 200 * time.Millisecond, false}, {60 * time.Millisecond, 100 * time.Millisecond, true}} {
		t.Run(c.delay.String()+"-of-"+c.timeout.String(), func(t *testing.T) {
			s := newStore(t, redisscript.Options{Client: slow{sharedClient(t), c.delay}, Timeout: c.timeout, Policy: sluice.FailClosed})
			limit := sluice.Limit{Name: "slow", Quota: 1e6, Window: time.Second}
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for range 10 {
						if _, err := s.Allow(context.Background(), unique(t, "k"), limit, 1); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			st := s.Stats()
			if st.Failures != 0 || st.BreakerOpens != 0 || st.Batched == 0 || !c.policyOK && st.FailClosed != 0 {
				t.Errorf("%+v; want no failure counted against Redis, no breaker opening, batches%s", st, map[bool]string{false: ", every decision Redis's", true: ""}[c.policyOK])
			}
		})
	}
}
