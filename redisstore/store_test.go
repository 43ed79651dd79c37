package redisstore_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/redisstore/goredis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// rueidis closes the connections a Cluster topology change removed
		// 5 s later, from a goroutine of its own (cluster.go, _refresh): a
		// test that ends within 5 s of a change leaves it sleeping.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

func newRueidis(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newStore(t testing.TB, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The conformance suite, unchanged, against the environment's Redis.
func TestConformance(t *testing.T) {
	client := redisstore.NewRueidis(newRueidis(t, redistest.Addr(t)))
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		return newStore(t, conformanceOptions(client, now))
	})
}

// The conformance suite through a go-redis client (with go-redis's
// default retries, which the adapter turns off for its script calls).
func TestConformanceGoRedis(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { rc.Close() })
	client := goredis.New(rc)
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		return newStore(t, conformanceOptions(client, now))
	})
}

// A decision whose reply is lost runs once: the go-redis adapter's script
// calls are not retried, though the client retries (MaxRetries 3, the
// default). The control: the same client's own EvalSha runs twice.
func TestGoRedisNeverReplaysADecision(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rc := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rc.Close() })
	s := newStore(t, redisstore.Options{Client: goredis.New(rc), Timeout: time.Second})
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

// conformanceOptions are the store's options under the conformance suite:
// its clock, and a timeout long enough that a loaded machine never turns a
// slow answer into a policy decision (which would fail the tables
// spuriously); failure handling has tests of its own.
func conformanceOptions(client redisstore.Client, now func() time.Time) redisstore.Options {
	return redisstore.Options{Client: client, TestNow: now, Timeout: 5 * time.Second, Policy: redisstore.FailClosed}
}
