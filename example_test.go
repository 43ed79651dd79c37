package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
)

// The seed's token bucket, B=5 and r=2/s: five requests pass at once, the
// sixth is told when to retry.
func Example() {
	clock := limittest.NewClock(limittest.Epoch) // a real store would read the time itself
	store, err := memstore.New(memstore.Options{Now: clock.Now})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	limit := sluice.Limit{Name: "api", Quota: 2, Window: time.Second, Burst: 5}
	ctx := context.Background()
	for i := 1; i <= 6; i++ {
		d, _ := store.Allow(ctx, "client-42", limit, 1)
		fmt.Printf("request %d: allowed=%v remaining=%v retry-after=%v\n", i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	clock.Add(500 * time.Millisecond)
	d, _ := store.Allow(ctx, "client-42", limit, 1)
	fmt.Printf("after 0.5s: allowed=%v\n", d.Allowed)
	// Output:
	// request 1: allowed=true remaining=4 retry-after=0s
	// request 2: allowed=true remaining=3 retry-after=0s
	// request 3: allowed=true remaining=2 retry-after=0s
	// request 4: allowed=true remaining=1 retry-after=0s
	// request 5: allowed=true remaining=0 retry-after=0s
	// request 6: allowed=false remaining=0 retry-after=500ms
	// after 0.5s: allowed=true
}

// Several limits on one request, checked in their declared order: nothing
// is spent unless all allow it.
func ExampleLimiter_allowAll() {
	clock := limittest.NewClock(limittest.Epoch) // time stands still: the remaining counts are exact
	store, _ := memstore.New(memstore.Options{Now: clock.Now})
	defer store.Close()
	perIP := sluice.Limit{Name: "per-ip", Quota: 2, Window: time.Minute}
	perUser := sluice.Limit{Name: "per-user", Quota: 100, Window: time.Hour}
	reqs := []sluice.Request{
		{Key: "203.0.113.7", Limit: perIP, Cost: 1},
		{Key: "user-1", Limit: perUser, Cost: 1},
	}
	each := make([]sluice.Decision, len(reqs))
	for range 3 {
		d, _ := store.AllowAll(context.Background(), reqs, sluice.AllOrNothing, each)
		fmt.Printf("allowed=%v by=%s per-user remaining=%v\n", d.Allowed, d.Limit.Name, each[1].Remaining)
	}
	// Output:
	// allowed=true by=per-ip per-user remaining=99
	// allowed=true by=per-ip per-user remaining=98
	// allowed=false by=per-ip per-user remaining=98
}

// A concurrency limit: at most 2 in flight; a crashed holder's slot frees
// itself after the window.
func ExampleConcurrency() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	ctx := context.Background()
	slots := sluice.Limit{Name: "reports", Algorithm: sluice.Concurrency, Quota: 2, Window: 5 * time.Minute}
	a, _ := store.Allow(ctx, "tenant-9", slots, 1)
	b, _ := store.Allow(ctx, "tenant-9", slots, 1)
	c, _ := store.Allow(ctx, "tenant-9", slots, 1)
	fmt.Println(a.Allowed, b.Allowed, c.Allowed)
	store.Release(ctx, "tenant-9", slots, a.Ticket)
	d, _ := store.Allow(ctx, "tenant-9", slots, 1)
	fmt.Println(d.Allowed)
	// Output:
	// true true false
	// true
}
