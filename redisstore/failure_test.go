package redisstore_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Each limit's policy decides while Redis is down; the breaker opens after
// BreakerFailures failures and then no call is made; nothing is an error.
func TestPoliciesAndBreaker(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := &counting{Client: redisstore.NewRueidis(newRueidis(t, srv.Addr()))}
	// Connected, the script loaded, by a patient store first: the 30 ms
	// below are for Redis's answer, not a loaded machine's first connection.
	if _, err := newStore(t, redisstore.Options{Client: c.Client, Timeout: 5 * time.Second}).Allow(ctx, "warm", sluice.Limit{Name: "warm", Quota: 1, Window: time.Hour}, 1); err != nil {
		t.Fatal(err)
	}
	open := sluice.Limit{Name: "open", Quota: 10, Window: time.Hour}
	closed := sluice.Limit{Name: "closed", Quota: 10, Window: time.Hour}
	local := sluice.Limit{Name: "local", Quota: 10, Window: time.Hour}
	s := newStore(t, redisstore.Options{
		Client: c, Timeout: 30 * time.Millisecond, BreakerCooldown: time.Hour, Instances: 2,
		Policy: sluice.FailOpen, Policies: map[string]sluice.FailurePolicy{"closed": sluice.FailClosed, "local": sluice.FailLocal},
	})
	if d, err := s.Allow(ctx, "k", closed, 1); err != nil || !d.Allowed {
		t.Fatalf("Redis up: %+v, %v", d, err)
	}
	srv.Kill()
	if d, err := s.Allow(ctx, "k", open, 1); err != nil || !d.Allowed {
		t.Fatalf("fail_open: %+v, %v", d, err)
	}
	if d, err := s.Allow(ctx, "k", closed, 1); err != nil || d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("fail_closed: %+v, %v", d, err)
	}
	// fail_local at 10/2: five pass locally, the sixth does not.
	for i := range 6 {
		d, err := s.Allow(ctx, "k", local, 1)
		if err != nil || d.Allowed != (i < 5) {
			t.Fatalf("fail_local call %d: %+v, %v", i, d, err)
		}
	}
	st := s.Stats()
	if !st.BreakerOpen || st.BreakerOpens != 1 || st.Failures != 3 || st.FailOpen != 1 || st.FailClosed != 1 || st.FailLocal != 6 {
		t.Fatalf("Stats = %+v; want the breaker open after 3 failures and 1/1/6 policy decisions", st)
	}
	calls := c.calls.Load()
	for range 100 {
		s.Allow(ctx, "k", closed, 1)
	}
	if c.calls.Load() != calls {
		t.Fatalf("%d calls to Redis while the breaker was open", c.calls.Load()-calls)
	}
}

// The outage: 2000 decisions/s while Redis is blackholed, then killed,
// then back (empty: its scripts flushed), then its scripts flushed again.
// What it must do, in every run: no error ever reaches the caller; the
// policy answers while Redis is away, the breaker opens and its decisions
// do not wait for Redis; Redis decides again after its return and after
// SCRIPT FLUSH (NOSCRIPT answered by EVAL); no key is left without a TTL.
// How fast, under `make fault` (SLUICE_FAULT=1: the figures, on a
// quiet machine): every decision within the timeout + 10 ms, p99 ≤ 1 ms
// with the breaker open, Redis deciding again within 1 s of its return and
// every decision Redis's from 100 ms after the flush. In the -race suite,
// on a loaded machine, only loose sanity bounds: the timeout + 1 s, a
// median under half the timeout, Redis back before the flush, nine
// decisions in ten Redis's after it.
func TestOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 5-second fault run")
	}
	strict := os.Getenv("SLUICE_FAULT") != "" // make fault: the figures of the issue
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	const timeout = 50 * time.Millisecond
	// One call in flight: while Redis does not answer, the decisions that
	// come meanwhile queue, and go in batches (coalescing, the default).
	s := newStore(t, redisstore.Options{
		Client: redisstore.NewRueidis(newRueidis(t, proxy.Addr())), Timeout: timeout,
		Policy: sluice.FailClosed, BreakerCooldown: 200 * time.Millisecond,
		Coalesce: redisstore.CoalesceOptions{InFlight: 1},
	})
	// Redis answers allowed (the quotas are never reached); the policy
	// answers rejected: every decision says who made it. One call in ten
	// goes to a limit of another algorithm, with an hour's window, so that
	// states of every kind are left for the TTL check.
	limit := sluice.Limit{Name: "outage", Quota: 1e9, Window: time.Second}
	var others []sluice.Limit
	for alg := sluice.GCRA; alg <= sluice.Concurrency; alg++ {
		others = append(others, sluice.Limit{Name: "outage-" + alg.String(), Algorithm: alg, Quota: sluice.MaxEntries, Window: time.Hour})
	}

	type sample struct {
		at      time.Time
		latency time.Duration
		redis   bool
		err     error
	}
	var mu sync.Mutex
	var samples []sample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 { // 4 × 500/s
		wg.Go(func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				l := limit
				if i%10 == 9 {
					l = others[(i/10)%len(others)]
				}
				start := time.Now()
				d, err := s.Allow(ctx, "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i%50), l, 1)
				mu.Lock()
				samples = append(samples, sample{start, time.Since(start), d.Allowed, err})
				mu.Unlock()
			}
		})
	}
	phase := func(d time.Duration) (from time.Time) {
		from = time.Now()
		time.Sleep(d)
		return from
	}
	phase(500 * time.Millisecond)
	proxy.Blackhole(true)
	outageStart := s.Stats()
	blackholed := phase(1500 * time.Millisecond)
	srv.Kill()
	killed := phase(time.Second)
	outageEnd := s.Stats()
	srv.Start()
	proxy.Blackhole(false)
	back := phase(1500 * time.Millisecond)
	if out, err := srv.CLI("SCRIPT", "FLUSH"); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v %s", err, out)
	}
	flushed := phase(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	between := func(from, to time.Time) []sample {
		var out []sample
		for _, x := range samples {
			if !x.at.Before(from) && x.at.Before(to) {
				out = append(out, x)
			}
		}
		return out
	}
	for _, x := range samples {
		if x.err != nil {
			t.Fatalf("an error reached the caller at +%v: %v", x.at.Sub(samples[0].at), x.err)
		}
	}
	// The bounds of the run (see the test's doc).
	type bounds struct {
		slack      time.Duration // beyond the timeout, for any decision
		openQ      int           // the percentile of the breaker-open latencies bounded
		open       time.Duration // their bound; also what tells them from decisions that waited for Redis
		resume     time.Duration // Redis deciding again after its return
		afterFlush int           // the percentage of Redis decisions from 100 ms after SCRIPT FLUSH
	}
	b := bounds{slack: time.Second, openQ: 50, open: timeout / 2, resume: flushed.Sub(back), afterFlush: 90}
	if strict {
		b = bounds{slack: 10 * time.Millisecond, openQ: 99, open: time.Millisecond, resume: time.Second, afterFlush: 100}
	}
	worst := time.Duration(0)
	var openLat []time.Duration
	breakerOpenAt := time.Time{}
	for _, x := range between(blackholed, back) {
		worst = max(worst, x.latency)
		if x.redis {
			continue
		}
		if breakerOpenAt.IsZero() && x.latency < b.open {
			breakerOpenAt = x.at
		}
		if !breakerOpenAt.IsZero() {
			openLat = append(openLat, x.latency)
		}
	}
	if worst > timeout+b.slack {
		t.Errorf("a decision during the outage took %v, more than the timeout %v + %v", worst, timeout, b.slack)
	}
	if len(openLat) == 0 || s.Stats().BreakerOpens == 0 {
		t.Fatalf("no decision answered by the policy in under %v while Redis was away (%d decisions then, worst %v; %d breaker openings): the breaker never opened",
			b.open, len(between(blackholed, back)), worst, s.Stats().BreakerOpens)
	}
	slices.Sort(openLat)
	p99 := openLat[len(openLat)*99/100]
	if q := openLat[len(openLat)*b.openQ/100]; q > b.open {
		t.Errorf("p%d decision with the breaker open: %v, want ≤ %v", b.openQ, q, b.open)
	}
	// Back: the first Redis-backed decision after the restart.
	resumed := time.Duration(-1)
	for _, x := range between(back, flushed) {
		if x.redis {
			resumed = x.at.Sub(back)
			break
		}
	}
	if resumed < 0 || resumed > b.resume {
		t.Errorf("Redis-backed decisions resumed %v after Redis returned, want within %v", resumed, b.resume)
	}
	afterFlush := between(flushed.Add(100*time.Millisecond), time.Now())
	redisAfterFlush := 0
	for _, x := range afterFlush {
		if x.redis {
			redisAfterFlush++
		} else if strict {
			t.Fatalf("after SCRIPT FLUSH a decision at +%v was not Redis's", x.at.Sub(flushed))
		}
	}
	if outageEnd.Batched == outageStart.Batched {
		t.Errorf("no batch was sent while Redis was away (%d decisions coalesced in all): the outage did not test batches", s.Stats().Batched)
	}
	if len(afterFlush) == 0 || redisAfterFlush*100 < len(afterFlush)*b.afterFlush || s.Stats().NoScript == 0 {
		t.Errorf("after SCRIPT FLUSH: %d of %d decisions Redis's, want %d %%; %d NOSCRIPT answered by EVAL, want some",
			redisAfterFlush, len(afterFlush), b.afterFlush, s.Stats().NoScript)
	}
	st := s.Stats()
	t.Logf("%d decisions; while blackholed or killed: worst %v, p99 with the breaker open %v (%d decisions); resumed %v after Redis returned; %d NOSCRIPT answered by EVAL; stats %+v",
		len(samples), worst, p99, len(openLat), resumed, st.NoScript, st)
	_ = killed

	// No key without a TTL.
	out, err := srv.CLI("--scan")
	if err != nil {
		t.Fatal(err)
	}
	keys := strings.Fields(out)
	if len(keys) == 0 {
		t.Fatal("no key to check")
	}
	for _, k := range keys {
		// -1: no expiry; -2: expired since the scan, which is fine.
		if ttl, _ := srv.CLI("PTTL", k); strings.TrimSpace(ttl) == "-1" {
			t.Fatalf("key %q has no TTL", k)
		}
	}
	t.Logf("%d keys, each with a TTL", len(keys))
}
