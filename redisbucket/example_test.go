package redisbucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisbucket"
	"github.com/sluicehq/sluice/redisstore"
)

// Every process of a fleet runs this against the same Redis: together
// they send at most 100 requests per second (and a burst of 10, and a
// slice per process) to a partner's API. Compiled, not run: it needs a
// Redis (TestFleet runs the same).
func Example() {
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err) // bad options only: a Redis down fails the Waits
	}
	defer conn.Close()
	budget, err := redisbucket.New(redisbucket.Options{
		Client: conn,
		Limit:  sluice.Limit{Name: "partner-api", Quota: 100, Window: time.Second, Burst: 10},
		// Slice: 0, the default: L × 100 ms = 10 tokens per round trip.
	})
	if err != nil {
		panic(err)
	}
	defer budget.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for i := range 20 {
		if err := budget.Wait(ctx, 1); err != nil {
			fmt.Println("not sent:", err) // Redis down, or ctx ended: the caller decides
			return
		}
		_ = i // send request i
	}
	st := budget.Stats()
	fmt.Printf("20 sent in %d round trips; %.0f/s\n", st.RoundTrips, budget.Rate())
}
