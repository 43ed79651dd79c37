package enforce_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
)

// The core without a transport: a rule of two limits per API key, three
// requests decided against a store, and what a transport would answer.
func ExampleCompiledRule_Decide() {
	rule, err := enforce.Compile(enforce.Rule{
		Name: "api-key",
		Quotas: []enforce.Quota{
			{Limit: sluice.Limit{Name: "per-key", Quota: 2, Window: time.Minute}, KeyPrefix: enforce.HeaderPrefix("x-api-key")},
			{Limit: sluice.Limit{Name: "global", Quota: 1000, Window: time.Hour}, KeyPrefix: enforce.GlobalKey},
		},
		OnError: sluice.FailClosed,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("RateLimit-Policy:", rule.PolicyField)

	clock := limittest.NewClock(limittest.Epoch) // a real store reads the time itself
	store, err := memstore.New(memstore.Options{Now: clock.Now})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// What a transport finds in the request: the key and cost of each
	// quota.
	req := enforce.Request{
		Keys:  [enforce.MaxQuotas]string{enforce.BoundedKey(rule.Quotas[0].KeyPrefix, "k-123"), rule.Quotas[1].KeyPrefix},
		Costs: [enforce.MaxQuotas]float64{1, 1},
	}
	for range 3 {
		var v enforce.Verdict
		rule.Decide(context.Background(), store, &req, &v)
		fmt.Printf("%v serve=%v RateLimit: %s\n", v.Outcome, v.Serve, rule.AppendLimits(nil, v.Decisions()))
		if v.Outcome == enforce.Rejected {
			fmt.Println("retry in", v.Combined().RetryAfter)
		}
		if v.Held { // once the request has run: its concurrency slots back
			rule.Release(context.Background(), store, &req, v.Decisions())
		}
	}
	// Output:
	// RateLimit-Policy: "per-key";q=2;w=60, "global";q=1000;w=3600
	// allowed serve=true RateLimit: "per-key";r=1;t=30, "global";r=999;t=4
	// allowed serve=true RateLimit: "per-key";r=0;t=60, "global";r=998;t=8
	// rejected serve=false RateLimit: "per-key";r=0;t=30, "global";r=998;t=8
	// retry in 30s
}
