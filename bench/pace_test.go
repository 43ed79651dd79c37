package bench

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pace"
)

// The client side's cost per paced call that does not have to wait, against
// x/time/rate's Limiter.Wait: a limit the callers never reach, one Pacer
// shared by every goroutine, as one target's client shares it.
func BenchmarkPacerWait(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=sluice", func(b *testing.B) {
		p, err := pace.New(pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 1e9, Window: time.Second}}})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r, err := p.Wait(ctx, 1)
				if err != nil {
					b.Error(err)
					return
				}
				r.Done()
			}
		})
	})
	b.Run("impl=x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(1e9, 1e9)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := l.Wait(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
