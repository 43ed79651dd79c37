package ratelimitheader_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// The fields of a 429: the server writes them, a client reads them back.
func Example() {
	// Server: a request over the per-user limit, which frees up in 12.3 s.
	h := http.Header{}
	policies := []ratelimitheader.Policy{
		{Name: "per-user", Quota: 100, Window: time.Minute},
		{Name: "daily", Quota: 10_000, Window: 24 * time.Hour},
	}
	limits := []ratelimitheader.Limit{
		{Name: "per-user", Remaining: 0, Reset: 12300 * time.Millisecond},
		{Name: "daily", Remaining: 9_880, Reset: 13 * time.Hour},
	}
	if err := ratelimitheader.Set(h, ratelimitheader.Draft11, policies, limits); err != nil {
		panic(err) // a bad name or quota: a bug in the server's configuration
	}
	h.Set("Retry-After", ratelimitheader.FormatRetryAfter(12300*time.Millisecond))
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}

	// Client: what is left, and how long to wait.
	got, err := ratelimitheader.ParseLimits(h.Values("RateLimit"))
	if err != nil {
		return // a malformed field is ignored
	}
	for _, l := range got {
		fmt.Printf("%s: %d left for the next %v\n", l.Name, l.Remaining, l.Reset)
	}
	wait, _ := ratelimitheader.ParseRetryAfter(h.Get("Retry-After"), time.Now())
	fmt.Println("retry in", wait)
	// Output:
	// RateLimit-Policy: "per-user";q=100;w=60, "daily";q=10000;w=86400
	// RateLimit: "per-user";r=0;t=13, "daily";r=9880;t=46800
	// Retry-After: 13
	// per-user: 0 left for the next 13s
	// daily: 9880 left for the next 13h0m0s
	// retry in 13s
}

// The three-field form of draft -06 reports the most restrictive limit.
func ExampleSet_draft06() {
	h := http.Header{}
	err := ratelimitheader.Set(h, ratelimitheader.Draft06,
		[]ratelimitheader.Policy{
			{Name: "per-user", Quota: 100, Window: time.Minute},
			{Name: "daily", Quota: 10_000, Window: 24 * time.Hour},
		},
		[]ratelimitheader.Limit{
			{Name: "per-user", Remaining: 41, Reset: 12300 * time.Millisecond},
			{Name: "daily", Remaining: 7, Reset: 13 * time.Hour},
		})
	if err != nil {
		panic(err)
	}
	for _, k := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// RateLimit-Limit: 10000
	// RateLimit-Remaining: 7
	// RateLimit-Reset: 46800
	// RateLimit-Policy: 100;w=60, 10000;w=86400
}

// Parsing is lenient: members it cannot use are skipped, a partition key
// without its base64 padding is read, unknown parameters are ignored.
func ExampleParseLimits() {
	limits, err := ratelimitheader.ParseLimits([]string{
		`"a";r=5;t=30;pk=:dXNlcg:;acme-burst=10`,
		`"b";t=10, "c";r=-1, "d";r=2`, // b has no r, c a negative one
	})
	fmt.Println(err)
	for _, l := range limits {
		fmt.Printf("%s r=%d reset=%v pk=%q\n", l.Name, l.Remaining, l.Reset, l.PartitionKey)
	}
	// Output:
	// <nil>
	// a r=5 reset=30s pk="user"
	// d r=2 reset=-1ns pk=""
}

// A client reading the X-RateLimit-* fields, here with GitHub's Unix-time
// reset.
func ExampleParseLegacy() {
	now := time.Unix(1_700_000_000, 0)
	h := http.Header{}
	h.Set("X-RateLimit-Limit", "5000")
	h.Set("X-RateLimit-Remaining", "4999")
	h.Set("X-RateLimit-Reset", "1700003600")
	l, ok := ratelimitheader.ParseLegacy(h, now)
	fmt.Println(l.Limit, l.Remaining, l.Reset, ok)
	// Output:
	// 5000 4999 1h0m0s true
}

// A middleware's RateLimit field: the names checked once, each response's
// value appended from its decisions.
func ExampleLimitField() {
	field, err := ratelimitheader.NewLimitField([]string{"per-ip", "daily"})
	if err != nil {
		panic(err) // a bad name: a bug in the server's configuration
	}
	ds := []sluice.Decision{
		{RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Minute}, // rejected: fits again in 1.5 s
		{Allowed: true, Remaining: 9_880.5, ResetAfter: 13 * time.Hour},
	}
	var buf [128]byte
	fmt.Printf("RateLimit: %s\n", field.Append(buf[:0], ds))
	fmt.Println("Retry-After:", ratelimitheader.FormatRetryAfter(ds[0].RetryAfter))
	// Output:
	// RateLimit: "per-ip";r=0;t=2, "daily";r=9880;t=46800
	// Retry-After: 2
}
