package memstore_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// benchLimit admits everything the benchmarks send, so they measure the
// decision, not rejections.
var benchLimit = sluice.Limit{Name: "bench", Quota: 1e9, Window: time.Second}

func newBenchStore(b *testing.B, opts memstore.Options) *memstore.Store {
	b.Helper()
	s, err := memstore.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// One key, one goroutine, the default clock.
func BenchmarkAllowOneKey(b *testing.B) {
	s := newBenchStore(b, memstore.Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := s.Allow(ctx, "user:12345", benchLimit, 1); !d.Allowed {
			b.Fatal("rejected")
		}
	}
}

// One key, one goroutine, a clock that is not read (the cost of the store
// and the algorithm alone).
func BenchmarkAllowOneKeyFixedClock(b *testing.B) {
	t0 := time.Now()
	s := newBenchStore(b, memstore.Options{Now: func() time.Time { return t0 }})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.Allow(ctx, "user:12345", benchLimit, 1)
	}
}

// userKey writes the key of user i into buf, as a request handler would
// have it: fresh bytes, not one of a million strings built in advance
// (whose reads would be cache misses of the benchmark, not of the store).
func userKey(buf []byte, i int) string {
	b := strconv.AppendInt(append(buf[:0], "user:"...), int64(i)*7919+1000003, 10)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

const million = 1_000_000

// 1e6 keys, random access from every core.
func BenchmarkAllowParallel1e6Keys(b *testing.B) {
	s := newBenchStore(b, memstore.Options{MaxKeys: 2e6})
	ctx := context.Background()
	buf := make([]byte, 0, 32)
	for i := range million {
		s.Allow(ctx, userKey(buf, i), benchLimit, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		buf := make([]byte, 0, 32)
		for pb.Next() {
			s.Allow(ctx, userKey(buf, rng.IntN(million)), benchLimit, 1)
		}
	})
}

// Heap per key at 1e6 keys. The store keeps no key bytes (only a 128-bit
// hash), so this is all it costs.
func BenchmarkHeapPerKey(b *testing.B) {
	ctx := context.Background()
	buf := make([]byte, 0, 32)
	for b.Loop() {
		before := liveHeap()
		s := newBenchStore(b, memstore.Options{MaxKeys: 2e6, SweepInterval: -1})
		for i := range million {
			s.Allow(ctx, userKey(buf, i), benchLimit, 1)
		}
		after := liveHeap()
		b.ReportMetric(float64(after-before)/1e6, "B/key")
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

// 1e7 distinct keys through a store capped at 1e6: the live heap stays
// bounded and every key dropped is counted.
func BenchmarkTenMillionKeysCapped(b *testing.B) {
	ctx := context.Background()
	buf := make([]byte, 0, 32)
	for b.Loop() {
		before := liveHeap()
		s := newBenchStore(b, memstore.Options{MaxKeys: million, SweepInterval: -1})
		for i := range 10 * million {
			s.Allow(ctx, userKey(buf, i), benchLimit, 1)
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
