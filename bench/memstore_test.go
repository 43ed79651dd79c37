package bench

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// everything admits all the benchmarks send: they measure the decision.
var everything = sluice.Limit{Name: "bench", Quota: 1e9, Window: time.Second}

func newMemstore(b *testing.B, opts memstore.Options) *memstore.Store {
	b.Helper()
	s, err := memstore.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// One key, one goroutine: sluice's memstore against x/time/rate's Limiter,
// each with its default clock, and each at a fixed instant (the decision
// alone: x/time/rate's AllowN(t) against a store whose Now is constant).
func BenchmarkOneKey(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=xtimerate/clock=now", func(b *testing.B) {
		l := rate.NewLimiter(1e9, 1e9)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
	b.Run("impl=sluice/clock=now", func(b *testing.B) {
		s := newMemstore(b, memstore.Options{})
		b.ReportAllocs()
		for b.Loop() {
			s.Allow(ctx, "user:12345", everything, 1)
		}
	})
	b.Run("impl=sluice/clock=monotonic", func(b *testing.B) {
		s := newMemstore(b, memstore.Options{ClockResolution: -1})
		b.ReportAllocs()
		for b.Loop() {
			s.Allow(ctx, "user:12345", everything, 1)
		}
	})
	b.Run("impl=sluice/clock=time.Now", func(b *testing.B) {
		s := newMemstore(b, memstore.Options{Now: time.Now})
		b.ReportAllocs()
		for b.Loop() {
			s.Allow(ctx, "user:12345", everything, 1)
		}
	})
	t0 := time.Now()
	b.Run("impl=xtimerate/clock=fixed", func(b *testing.B) {
		l := rate.NewLimiter(1e9, 1e9)
		b.ReportAllocs()
		for b.Loop() {
			l.AllowN(t0, 1)
		}
	})
	b.Run("impl=sluice/clock=fixed", func(b *testing.B) {
		s := newMemstore(b, memstore.Options{Now: func() time.Time { return t0 }})
		b.ReportAllocs()
		for b.Loop() {
			s.Allow(ctx, "user:12345", everything, 1)
		}
	})
}

// userKey writes the key of user i into buf, as a request handler has it:
// fresh bytes, not one of a million strings built in advance (reading those
// would add two cache misses of the benchmark's own to every call).
func userKey(buf []byte, i int) string {
	b := strconv.AppendInt(append(buf[:0], "user:"...), int64(i)*7919+1000003, 10)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

const million = 1_000_000

// 1e6 keys, random access, from every core: sluice's memstore against
// go-limiter's memorystore, both holding the same keys.
func BenchmarkManyKeys(b *testing.B) {
	ctx := context.Background()
	fill := func(take func(string)) {
		buf := make([]byte, 0, 32)
		for i := range million {
			take(userKey(buf, i))
		}
	}
	random := func(b *testing.B, take func(string)) {
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
			buf := make([]byte, 0, 32)
			for pb.Next() {
				take(userKey(buf, rng.IntN(million)))
			}
		})
	}
	b.Run("impl=sluice/keys=1e6", func(b *testing.B) {
		s := newMemstore(b, memstore.Options{MaxKeys: 2e6})
		fill(func(k string) { s.Allow(ctx, k, everything, 1) })
		random(b, func(k string) { s.Allow(ctx, k, everything, 1) })
	})
	b.Run("impl=golimiter/keys=1e6", func(b *testing.B) {
		s, err := memorystore.New(&memorystore.Config{Tokens: 1e9, Interval: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(ctx) })
		// go-limiter keeps the key it is given: give it its own copy.
		fill(func(k string) { s.Take(ctx, strings.Clone(k)) })
		random(b, func(k string) { s.Take(ctx, k) })
	})
}

// Heap per key at 1e6 keys. The store keeps no key bytes (only a 128-bit
// hash), so this is all a key costs.
func BenchmarkHeapPerKey(b *testing.B) {
	ctx := context.Background()
	buf := make([]byte, 0, 32)
	for b.Loop() {
		before := liveHeap()
		s := newMemstore(b, memstore.Options{MaxKeys: 2 * million, SweepInterval: -1})
		for i := range million {
			s.Allow(ctx, userKey(buf, i), everything, 1)
		}
		after := liveHeap()
		b.ReportMetric(float64(after-before)/million, "B/key")
		runtime.KeepAlive(s)
	}
}

// 1e7 distinct keys through a store capped at 1e6: the live heap stays
// bounded and every key dropped is counted.
func BenchmarkTenMillionKeysCapped(b *testing.B) {
	ctx := context.Background()
	buf := make([]byte, 0, 32)
	for b.Loop() {
		before := liveHeap()
		s := newMemstore(b, memstore.Options{MaxKeys: million, SweepInterval: -1})
		for i := range 10 * million {
			s.Allow(ctx, userKey(buf, i), everything, 1)
		}
		after := liveHeap()
		st := s.Stats()
		b.ReportMetric(float64(after-before)/(1<<20), "live-MiB")
		b.ReportMetric(float64(st.Keys), "keys")
		b.ReportMetric(float64(st.Evictions+st.Expired), "dropped")
		if st.Evictions+st.Expired != uint64(10*million-st.Keys) {
			b.Fatalf("dropped %d, want %d", st.Evictions+st.Expired, 10*million-st.Keys)
		}
		runtime.KeepAlive(s)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
