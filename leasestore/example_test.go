package leasestore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/leasestore"
	"github.com/sluicehq/sluice/memlease"
	"github.com/sluicehq/sluice/memstore"
)

// A global limit decided in process on leases, beside a per-user limit
// that goes to Next. memlease coordinates the Holders of this process
// only; a fleet uses redislease on its Redis.
func Example() {
	next, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	defer next.Close()
	s, err := leasestore.New(leasestore.Options{
		Coordinator: memlease.New(nil),
		Next:        next,
		Limits:      []leasestore.Leased{{Name: "global", Partitions: 4, TTL: 100 * time.Millisecond}},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	global := sluice.Limit{Name: "global", Quota: 1000, Window: time.Second}
	perUser := sluice.Limit{Name: "per-user", Quota: 10, Window: time.Second}
	d, _ := s.Allow(ctx, "all", global, 1)
	fmt.Println("global, first request:", d.Allowed)
	// A round with the Coordinator, the quarantine of a new group
	// (TTL + 50 ms), and the first tokens of the partitions.
	time.Sleep(500 * time.Millisecond)
	d, _ = s.Allow(ctx, "all", global, 1)
	fmt.Println("global, after the quarantine:", d.Allowed)
	d, _ = s.Allow(ctx, "alice", perUser, 1)
	fmt.Println("per-user (Next):", d.Allowed, d.Remaining)
	// Output:
	// global, first request: false
	// global, after the quarantine: true
	// per-user (Next): true 9
}
