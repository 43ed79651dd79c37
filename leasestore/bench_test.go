package leasestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/leasestore"
	"github.com/sluicehq/sluice/memlease"
	"github.com/sluicehq/sluice/memstore"
)

// global admits everything the benchmarks send: they measure the
// decision. 8 partitions of 125 M/s each.
var global = sluice.Limit{Name: "global", Quota: 1e9, Window: time.Second}

// BenchmarkAllow decides one hot key from every core: the memory store
// (the anchor, with its default coarse clock and with time.Now, which the
// Holders read) against a leased limit whose partitions this process
// holds, in the same run. The leased store's target is at least 0.9× the
// memory store's decisions per second (docs/leasestore.md):
//
//	go test -run '^$' -bench BenchmarkAllow -count 10 ./leasestore | benchstat -col /impl -
func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, l sluice.Limiter) {
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := l.Allow(ctx, "all", global, 1); err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
		})
	}
	b.Run("impl=memstore", func(b *testing.B) {
		m, err := memstore.New(memstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		run(b, m)
	})
	b.Run("impl=memstore-time.Now", func(b *testing.B) {
		m, err := memstore.New(memstore.Options{Now: time.Now})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		run(b, m)
	})
	// The Holder's Take refills every usable partition: its cost grows
	// with the partitions held (8 by default).
	for _, p := range []int{1, 8, 32} {
		leased := warmStore(b, memlease.New(nil), p) // once: a quarantine to wait out
		b.Run(fmt.Sprintf("impl=leasestore/partitions=%d", p), func(b *testing.B) { run(b, leased) })
	}

}

// warmStore returns a Store leasing global on c in partitions, its key's
// partitions held and out of quarantine.
func warmStore(b *testing.B, c lease.Coordinator, partitions int) *leasestore.Store {
	b.Helper()
	next, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := leasestore.New(leasestore.Options{Coordinator: c, Next: next,
		Limits: []leasestore.Leased{{Name: "global", TTL: time.Second, Partitions: partitions}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done; next.Close() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if d, _ := s.Allow(context.Background(), "all", global, 1); d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("no usable partition after 10 s: %+v", s.Stats())
		}
	}
	return s
}
