package redisbucket_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisbucket"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// As in redisstore: rueidis closes the connections a Cluster
		// topology change removed 5 s later, from a goroutine of its own
		// (cluster.go, _refresh), which TestCluster may leave sleeping…
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		// …and delays a refresh after a failed call (its singleflight's
		// DelayDo sleeps up to about a second, then ends).
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}

// dial returns a client of its own to Redis at addr: one "process".
func dial(t testing.TB, addr string) *redisstore.Conn {
	t.Helper()
	c, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newBudget returns a Budget the test closes.
func newBudget(t testing.TB, o redisbucket.Options) *redisbucket.Budget {
	t.Helper()
	b, err := redisbucket.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// fresh returns a limit name no earlier run used: its bucket starts full.
func fresh(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if strings.ContainsRune("=# ", r) {
			return '_'
		}
		return r
	}, t.Name())
	return name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// limit is L per second with burst B.
func limit(name string, l, b float64) sluice.Limit {
	return sluice.Limit{Name: name, Quota: l, Window: time.Second, Burst: b}
}

// scriptCalls returns how many times srv ran the scripts (EVALSHA and
// EVAL, failed calls included), from INFO commandstats.
func scriptCalls(t testing.TB, srv *redistest.Server) int64 {
	t.Helper()
	out, err := srv.CLI("INFO", "commandstats")
	if err != nil {
		t.Fatalf("INFO commandstats: %v: %s", err, out)
	}
	var n int64
	for line := range strings.Lines(out) {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				v, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				n += v
			}
		}
	}
	return n
}

// lasting returns a context that ends after d, without a deadline: Waits on
// it sleep for their slice as they would without one.
func lasting(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(d, cancel)
	t.Cleanup(func() { stop.Stop(); cancel() })
	return ctx
}

// hungry spends cost at a time until ctx ends and returns the instants of
// the spends.
func hungry(ctx context.Context, b *redisbucket.Budget, cost float64) []time.Time {
	var at []time.Time
	for b.Wait(ctx, cost) == nil {
		at = append(at, time.Now())
	}
	return at
}
