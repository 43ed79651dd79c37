package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// A store bounded to 100,000 keys, sweeping idle keys every 30 seconds.
func ExampleNew() {
	store, err := memstore.New(memstore.Options{MaxKeys: 100_000, SweepInterval: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	limit := sluice.Limit{Name: "login", Algorithm: sluice.SlidingLog, Quota: 5, Window: time.Minute}
	for range 6 {
		d, err := store.Allow(context.Background(), "alice@example.com", limit, 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	fmt.Println(store.Stats().Keys)
	// Output:
	// true 4
	// true 3
	// true 2
	// true 1
	// true 0
	// false 0
	// 1
}
