package redisstore_test

import (
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

// The conformance suite through a go-redis client.
func TestConformanceGoRedis(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	client, err := goredis.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		return newStore(t, redisstore.Options{Client: client, TestNow: now})
	})
}

func TestGoRedisRefusesRetries(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // default MaxRetries: 3
	t.Cleanup(func() { rc.Close() })
	if _, err := goredis.New(rc); err == nil || !strings.Contains(err.Error(), "MaxRetries") {
		t.Fatalf("goredis.New of a retrying client: %v; want an error naming MaxRetries", err)
	}
}
