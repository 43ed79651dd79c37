package redisbucket_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisbucket"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkWait spends 1 token per op from a bucket that never runs short
// (10^8 per second): slice=1 makes every Wait a round trip, so its ns/op
// is the cost of a slice; the larger slices show it spread over the
// tokens of a slice. All goroutines share one Budget (one process). The
// anchor is a decision of the per-request Redis store on the same Redis
// (one EVALSHA per op, calls in flight at once).
func BenchmarkWait(b *testing.B) {
	addr := redistest.Addr(b)
	b.Run("anchor=redisstore.Allow", func(b *testing.B) {
		store, err := redisstore.New(redisstore.Options{Client: dial(b, addr)})
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close()
		l := sluice.Limit{Name: "bench", Quota: 1e8, Window: time.Second, Burst: 1e6}
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := store.Allow(ctx, "k", l, 1); err != nil || !d.Allowed {
					b.Error(d, err)
					return
				}
			}
		})
	})
	for _, slice := range []float64{1, 10, 100} {
		b.Run("slice="+strconv.FormatFloat(slice, 'g', -1, 64), func(b *testing.B) {
			l := sluice.Limit{Name: fresh(b), Quota: 1e8, Window: time.Second, Burst: 1e6}
			budget := newBudget(b, redisbucket.Options{Client: dial(b, addr), Limit: l, Slice: slice})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := budget.Wait(ctx, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			st := budget.Stats()
			b.ReportMetric(float64(st.RoundTrips)/float64(b.N), "roundtrips/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(st.RoundTrips), "ns/roundtrip")
		})
	}
}
