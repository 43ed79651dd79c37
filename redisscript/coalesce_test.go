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
