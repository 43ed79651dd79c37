package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
		return newStore(t, redisstore.Options{Client: client, TestNow: now})
	})
}
