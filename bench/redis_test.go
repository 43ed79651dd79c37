package bench

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/redisstore/goredis"
)

func redisAddr(b *testing.B) string {
	addr := os.Getenv("SLUICE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		b.Skipf("SKIPPED: no Redis at %s: %v", addr, err)
	}
	return addr
}

// tenK are the 10,000 keys the Redis benchmarks draw from.
var tenK = func() []string {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}()

// parallel64 runs op from 64 goroutines, b.N times in all, and reports
// decisions per second, the p50 and p99 latency, and the CPU Redis spent
// per decision (its used_cpu_user + used_cpu_sys, from INFO, over the run).
func parallel64(b *testing.B, op func(key string) error) {
	cpu0 := redisCPU(b)
	b.SetParallelism(max(1, 64/runtimeProcs()))
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			t0 := time.Now()
			if err := op(tenK[rng.IntN(len(tenK))]); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric((redisCPU(b)-cpu0)*1e6/float64(b.N), "redis-cpu-µs/decision")
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// Token bucket decisions on Redis, 64 goroutines, 10k keys: sluice's
// redisstore (rueidis, auto-pipelining) against go-redis/redis_rate.
func BenchmarkRedis(b *testing.B) {
	addr := redisAddr(b)
	ctx := context.Background()
	for _, c := range []struct {
		impl string
		o    redisscript.CoalesceOptions
	}{{"sluice", redisscript.CoalesceOptions{}}, {"sluice-uncoalesced", redisscript.CoalesceOptions{Off: true}}} {
		b.Run("impl="+c.impl, func(b *testing.B) { storeParallel64(b, sluiceOnRedis(b, addr, c.o)) })
	}
	// The go-redis adapter, on the pool redis_rate has: coalescing is the
	// store's, above the driver.
	b.Run("impl=sluice-goredis", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true})
		defer rdb.Close()
		s, err := redisstore.New(redisstore.Options{Client: goredis.New(rdb), Timeout: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		storeParallel64(b, s)
	})
	b.Run("impl=redis_rate", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
		defer rdb.Close()
		l := redis_rate.NewLimiter(rdb)
		limit := redis_rate.PerSecond(1e9)
		parallel64(b, func(key string) error {
			_, err := l.Allow(ctx, key, limit)
			return err
		})
	})
}

// capture records one script call of the store.
type capture struct {
	redisstore.Client
	mu       sync.Mutex
	sha, key string
	args     []string
}

func (c *capture) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	c.mu.Lock()
	c.sha, c.key, c.args = sha, keys[0], append([]string(nil), args...)
	c.mu.Unlock()
	return c.Client.EvalSHA(ctx, sha, keys, args)
}

// The ceiling: redis-benchmark, 64 clients pipelining 16 calls each, runs
// the very script call a sluice decision makes (captured from the store),
// on 10k random keys. Its rate is what Redis itself can do on this
// machine; no client does better.
func BenchmarkRedisCeiling(b *testing.B) {
	addr := redisAddr(b)
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		b.Skip("SKIPPED: redis-benchmark is not installed")
	}
	ctx := context.Background()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	c := &capture{Client: redisstore.NewRueidis(rc)}
	s, err := redisstore.New(redisstore.Options{Client: c})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Allow(ctx, "user:1", sluice.Limit{Name: "bench", Quota: 1e9, Window: time.Second}, 1); err != nil {
		b.Fatal(err)
	}
	host, port, _ := strings.Cut(addr, ":")
	key := strings.Replace(c.key, "{6:user:1}", "{user:__rand_int__}", 1)
	for b.Loop() {
		args := append([]string{"-h", host, "-p", port, "-c", "64", "-P", "16", "-n", "2000000", "-r", "10000", "-q",
			"EVALSHA", c.sha, "1", key}, c.args...)
		out, err := exec.Command("redis-benchmark", args...).CombinedOutput()
		if err != nil {
			b.Fatalf("redis-benchmark: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`([0-9.]+) requests per second`).FindAllSubmatch(out, -1)
		if len(m) == 0 {
			b.Fatalf("redis-benchmark said: %s", out)
		}
		rps, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
		b.ReportMetric(rps, "decisions/s")
	}
}

// sluiceOnRedis is sluice's Redis store on rueidis (auto-pipelining),
// coalescing as o says.
func sluiceOnRedis(b *testing.B, addr string, o redisscript.CoalesceOptions) *redisstore.Store {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.Close)
	s, err := redisstore.New(redisstore.Options{Client: redisstore.NewRueidis(rc), Timeout: 5 * time.Second, Coalesce: o})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// One caller at a time (c = 1): the latency of a decision on an unloaded
// path, coalescing on and off, and redis_rate's.
func BenchmarkRedisAlone(b *testing.B) {
	addr := redisAddr(b)
	ctx := context.Background()
	limit := sluice.Limit{Name: "bench", Quota: 1e9, Window: time.Second}
	for _, c := range []struct {
		impl string
		o    redisscript.CoalesceOptions
	}{{"sluice", redisscript.CoalesceOptions{}}, {"sluice-uncoalesced", redisscript.CoalesceOptions{Off: true}}} {
		b.Run("impl="+c.impl, func(b *testing.B) {
			s := sluiceOnRedis(b, addr, c.o)
			i := 0
			for b.Loop() {
				i++
				if _, err := s.Allow(ctx, tenK[i%len(tenK)], limit, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("impl=redis_rate", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		l := redis_rate.NewLimiter(rdb)
		i := 0
		for b.Loop() {
			i++
			if _, err := l.Allow(ctx, tenK[i%len(tenK)], redis_rate.PerSecond(1e9)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// redisCPU is the CPU time the benchmark's Redis has used, in seconds.
func redisCPU(b *testing.B) float64 {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr(b)})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for line := range strings.Lines(info) {
		for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu: %q: %v", line, err)
				}
				total += x
			}
		}
	}
	return total
}

// storeParallel64 runs parallel64 on s's Allow and reports the decisions
// each script call carried.
func storeParallel64(b *testing.B, s *redisstore.Store) {
	limit := sluice.Limit{Name: "bench", Quota: 1e9, Window: time.Second}
	parallel64(b, func(key string) error {
		_, err := s.Allow(context.Background(), key, limit, 1)
		return err
	})
	st := s.Stats()
	b.ReportMetric(float64(st.Batched+st.Calls-st.Batches)/float64(max(st.Calls, 1)), "decisions/call")
}
