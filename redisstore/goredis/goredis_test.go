package goredis_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/drivertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore/goredis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func newStore(t testing.TB, opts redisscript.Options) *redisscript.Store {
	t.Helper()
	s, err := redisscript.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newClient(t testing.TB, opts *redis.Options) *redis.Client {
	t.Helper()
	rc := redis.NewClient(opts)
	t.Cleanup(func() { rc.Close() })
	return rc
}

// conformanceOptions are the store's options under the conformance suite:
// its clock, and a timeout long enough that a loaded machine never turns a
// slow answer into a policy decision.
func conformanceOptions(client redisscript.Client, now func() time.Time) redisscript.Options {
	return redisscript.Options{Client: client, TestNow: now, Timeout: 5 * time.Second, Policy: sluice.FailClosed}
}

// The conformance suite through a go-redis client (with go-redis's
// default retries, which the adapter turns off for its script calls).
func TestConformance(t *testing.T) {
	client := goredis.New(newClient(t, &redis.Options{Addr: redistest.Addr(t)}))
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		return newStore(t, conformanceOptions(client, now))
	})
}

// The conformance suite through a go-redis ClusterClient on a 3-master
// Cluster the test starts: its multi-limit requests span hash slots (the
// compensated path).
func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	nodes := redistest.StartCluster(t, 3)
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()}})
	t.Cleanup(func() { rc.Close() })
	client := goredis.New(rc)
	if !client.Cluster() {
		t.Fatal("the adapter does not see a cluster")
	}
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		return newStore(t, conformanceOptions(client, now))
	})
}

// The driver contract, on a single node, a Ring (not a Cluster: one
// shard's keys on one node) and a Cluster.
func TestDriverContract(t *testing.T) {
	addr := redistest.Addr(t)
	t.Run("Client", func(t *testing.T) {
		drivertest.Run(t, goredis.New(newClient(t, &redis.Options{Addr: addr})), false)
	})
	t.Run("Ring", func(t *testing.T) {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": addr}})
		t.Cleanup(func() { ring.Close() })
		drivertest.Run(t, goredis.New(ring), false)
	})
	t.Run("ClusterClient", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Redis Cluster")
		}
		nodes := redistest.StartCluster(t, 3)
		rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()}})
		t.Cleanup(func() { rc.Close() })
		drivertest.Run(t, goredis.New(rc), true)
	})
}

// A decision whose reply is lost runs once: the go-redis adapter's script
// calls are not retried, though the client retries (MaxRetries 3, the
// default). The control: the same client's own EvalSha runs twice.
func TestNeverReplaysADecision(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rc := newClient(t, &redis.Options{Addr: proxy.Addr()})
	s := newStore(t, redisscript.Options{Client: goredis.New(rc), Timeout: time.Second})
	limit := sluice.Limit{Name: "replay", Quota: 10, Window: time.Hour}
	if d, err := s.Allow(ctx, "k", limit, 1); err != nil || !d.Allowed {
		t.Fatalf("first call: %+v, %v", d, err)
	}
	// evalshas runs f with the next reply cut and returns how many times
	// Redis ran EVALSHA meanwhile.
	evalshas := func(f func()) int {
		if _, err := srv.CLI("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		// A connection in the pool, so that the cut reply is f's, not a
		// new connection's handshake.
		if err := rc.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		proxy.CutNextReply()
		f()
		out, err := srv.CLI("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(out) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				return n
			}
		}
		return 0
	}
	if n := evalshas(func() { s.Allow(ctx, "k", limit, 1) }); n != 1 {
		t.Fatalf("the store's call ran %d times; want once", n)
	}
	sha, err := srv.CLI("SCRIPT", "LOAD", "return 1")
	if err != nil {
		t.Fatal(err)
	}
	if n := evalshas(func() { rc.EvalSha(ctx, strings.TrimSpace(sha), []string{"k"}) }); n != 2 {
		t.Fatalf("control: the client's own EvalSha ran %d times; want twice (the retry)", n)
	}
}

// With ContextTimeoutEnabled (as the package's doc says to set it), the
// store's Timeout bounds a call to a Redis that stops answering: the
// policy decides, and the breaker opens. The control: without it,
// go-redis waits for its own ReadTimeout, far beyond the store's.
func TestTimeoutBoundsACall(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	for _, c := range []struct {
		name    string
		enabled bool
	}{{"ContextTimeoutEnabled", true}, {"control: disabled", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			proxy := redistest.StartProxy(t, srv.Addr())
			rc := newClient(t, &redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: c.enabled, ReadTimeout: 2 * time.Second})
			s := newStore(t, redisscript.Options{Client: goredis.New(rc), Timeout: timeout, Policy: sluice.FailClosed, BreakerFailures: 1})
			limit := sluice.Limit{Name: "timeout", Quota: 10, Window: time.Hour}
			if d, err := s.Allow(ctx, "k", limit, 1); err != nil || !d.Allowed {
				t.Fatalf("Redis up: %+v, %v", d, err)
			}
			proxy.Blackhole(true)
			defer proxy.Blackhole(false)
			start := time.Now()
			d, err := s.Allow(ctx, "k", limit, 1)
			took := time.Since(start)
			if err != nil || d.Allowed || d.RetryAfter != time.Second {
				t.Fatalf("Redis blackholed: %+v, %v; want fail_closed's rejection", d, err)
			}
			// Loose bounds, both ways: the call ends near the store's
			// timeout (well under go-redis's ReadTimeout of 2 s) only
			// when the context reaches the socket.
			if bounded := took < time.Second; bounded != c.enabled {
				t.Fatalf("a blackholed call took %v: bounded by the store's %v = %v, want %v", took, timeout, bounded, c.enabled)
			}
			if st := s.Stats(); st.Failures != 1 || !st.BreakerOpen {
				t.Fatalf("Stats %+v; want one failure and the breaker open", st)
			}
		})
	}
}

// A go-redis client on Sentinel, with Redis's and the Sentinels'
// passwords — the options the package doc maps from sluice's: the store
// decides on the master (a quota of 2 from Redis), follows a failover, and
// a wrong password is an error Ping reports with WRONGPASS, which the
// example stops on.
func TestSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel setup")
	}
	t.Parallel()
	const password, sentinelPassword = "goredis-redis-pass-1a", "goredis-sentinel-pass-2b"
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: password, SentinelPassword: sentinelPassword})
	opts := func(pw string) *redis.FailoverOptions {
		return &redis.FailoverOptions{MasterName: s.Name(), SentinelAddrs: s.Addrs(), SentinelPassword: sentinelPassword,
			Password: pw, DialTimeout: time.Second, ContextTimeoutEnabled: true}
	}
	wrong := redis.NewFailoverClient(opts("not-the-password"))
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); !redis.HasErrorPrefix(err, "WRONGPASS") {
		t.Fatalf("Ping with a wrong password: %v; want WRONGPASS", err)
	}
	rc := redis.NewFailoverClient(opts(password))
	defer rc.Close()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	store := newStore(t, redisscript.Options{Client: goredis.New(rc), Policy: sluice.FailClosed, Timeout: 500 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond})
	limit := sluice.Limit{Name: "goredis-sentinel", Quota: 2, Window: time.Hour}
	key := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range 3 {
		if d, err := store.Allow(ctx, key, limit, 1); err != nil || d.Allowed != (i < 2) {
			t.Fatalf("call %d: %+v, %v; want exactly 2 allowed", i, d, err)
		}
	}
	s.Failover()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		d, err := store.Allow(ctx, key+"-after-"+strconv.Itoa(i), limit, 1)
		if err == nil && d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision on Redis 10 s after the failover: %+v, %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cutting is a Client that cuts the reply to the first batch of coalesced
// decisions (ARGV[3] "b") it forwards, at the proxy, and counts the batches.
type cutting struct {
	redisscript.Client
	proxy   *redistest.Proxy
	batches atomic.Int32
	hold    chan struct{} // the first call waits for it: the others queue
	held    atomic.Bool
}

func (c *cutting) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if args[2] == "b" && c.batches.Add(1) == 1 {
		c.proxy.CutNextReply()
	} else if c.held.CompareAndSwap(false, true) {
		<-c.hold
	}
	return c.Client.EvalSHA(ctx, sha, keys, args)
}

// A batch whose reply is lost ran once in Redis and is never sent again
// (go-redis retries a call whose connection failed; the adapter's script
// calls are not): each of its decisions is decided by its policy.
func TestLostBatchIsNotReplayed(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	c := &cutting{Client: goredis.New(newClient(t, &redis.Options{Addr: proxy.Addr()})), proxy: proxy, hold: make(chan struct{})}
	s := newStore(t, redisscript.Options{Client: c, Timeout: time.Second, Policy: sluice.FailClosed,
		Coalesce: redisscript.CoalesceOptions{InFlight: 1}})
	limit := sluice.Limit{Name: "lost", Quota: 100, Window: time.Hour}
	c.held.Store(true)                                        // not the warming call
	if _, err := s.Allow(ctx, "warm", limit, 1); err != nil { // loads the script, connects
		t.Fatal(err)
	}
	c.held.Store(false)
	if _, err := srv.CLI("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	const n = 6
	decisions := make([]sluice.Decision, n)
	var wg sync.WaitGroup
	wg.Go(func() { decisions[0], _ = s.Allow(ctx, "k", limit, 1) }) // in flight, held
	for !c.held.Load() {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < n; i++ {
		wg.Go(func() {
			var err error
			if decisions[i], err = s.Allow(ctx, "k", limit, 1); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // all queued behind the first
	close(c.hold)
	wg.Wait()
	out, err := srv.CLI("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	evalshas := 0
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			evalshas, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		}
	}
	st := s.Stats()
	if c.batches.Load() != 1 || st.Batched != n-1 || evalshas != 2 {
		t.Fatalf("%d batches (%d decisions), Redis ran %d EVALSHA; want 1 batch of %d and 2 calls (the first, the batch once)", c.batches.Load(), st.Batched, evalshas, n-1)
	}
	if !decisions[0].Allowed {
		t.Errorf("the first decision: %+v, want Redis's allow", decisions[0])
	}
	for i, d := range decisions[1:] {
		if d.Allowed || st.FailClosed != n-1 {
			t.Errorf("decision %d of the lost batch: %+v (%d decided closed); want the policy's rejection", i+1, d, st.FailClosed)
		}
	}
	// Redis spent the batch once: 1 + 5 of 100.
	if d, err := s.Allow(ctx, "k", limit, 1); err != nil || d.Remaining < 93 || d.Remaining >= 93.5 {
		t.Errorf("after: %+v, %v; want 93 left (the batch spent once)", d, err)
	}
}
