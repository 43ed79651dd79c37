package redisscript_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// rueidis closes the connections a Cluster topology change removed
		// 5 s later, from a goroutine of its own (cluster.go, _refresh): a
		// test that ends within 5 s of a change leaves it sleeping.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		// The same for a refresh rueidis delays after a failed call (its
		// singleflight's DelayDo sleeps up to about a second, then ends).
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
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

func newStore(t testing.TB, opts redisscript.Options) *redisscript.Store {
	t.Helper()
	s, err := redisscript.New(opts)
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

// conformanceOptions are the store's options under the conformance suite:
// its clock, and a timeout long enough that a loaded machine never turns a
// slow answer into a policy decision (which would fail the tables
// spuriously); failure handling has tests of its own.
func conformanceOptions(client redisscript.Client, now func() time.Time) redisscript.Options {
	return redisscript.Options{Client: client, TestNow: now, Timeout: 5 * time.Second, Policy: sluice.FailClosed}
}
