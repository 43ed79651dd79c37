package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// Bounds of what `sluice try` plays: requests, and their span in time.
const (
	maxTryRequests = 100_000
	maxTrySpan     = 100 * 365 * 24 * time.Hour
)

func runTry(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("try", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		limit    = sluice.Limit{Name: "try"}
		requests = fs.Int("requests", 10, "how many requests to play (at most 100000)")
		every    = fs.Duration("every", 100*time.Millisecond, "time between two requests (0: all at once)")
		cost     = fs.Float64("cost", 1, "cost of each request")
	)
	fs.TextVar(&limit.Algorithm, "algorithm", sluice.TokenBucket, "token_bucket, gcra, fixed_window, sliding_log, sliding_window, leaky_bucket or concurrency")
	fs.Float64Var(&limit.Quota, "quota", 2, "cost admitted per window")
	fs.DurationVar(&limit.Window, "window", time.Second, "the quota's window")
	fs.Float64Var(&limit.Burst, "burst", 0, "bucket capacity (token_bucket, gcra, leaky_bucket; 0: the quota)")
	fs.Float64Var(&limit.DelayThreshold, "delay-threshold", 0, "queued cost that passes undelayed (leaky_bucket)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice try [flags]\n\nPlays requests against one key of a limit, on a simulated clock, and prints each decision.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice try: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *requests < 1 || *requests > maxTryRequests {
		fmt.Fprintf(stderr, "sluice try: -requests %d: must be between 1 and %d\n", *requests, maxTryRequests)
		return exitUsage
	}
	if *every < 0 || *every > maxTrySpan/time.Duration(*requests) {
		fmt.Fprintf(stderr, "sluice try: -every %v: must be between 0 and %v for %d requests\n", *every, maxTrySpan/time.Duration(*requests), *requests)
		return exitUsage
	}
	if err := limit.Validate(); err != nil {
		fmt.Fprintln(stderr, err) // it says "sluice: invalid limit …"
		return exitUsage
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	store, err := memstore.New(memstore.Options{Now: func() time.Time { return now }, SweepInterval: -1})
	if err != nil {
		fmt.Fprintf(stderr, "sluice try: %v\n", err)
		return exitError
	}
	defer store.Close()

	fmt.Fprintf(stdout, "%v; %d requests of cost %v, one every %v\n\n", limit, *requests, *cost, *every)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "t\tdecision\tremaining\tretry after\treset after\tdelay\t")
	allowed := 0
	for i := range *requests {
		now = start.Add(time.Duration(i) * *every)
		d, err := store.Allow(context.Background(), "key", limit, *cost)
		if err != nil && !errors.Is(err, sluice.ErrCostExceedsLimit) {
			tw.Flush()
			fmt.Fprintf(stderr, "sluice try: %v\n", err)
			return exitUsage
		}
		verdict, retry := "allow", "-"
		switch {
		case d.Never():
			verdict, retry = "reject", "never"
		case !d.Allowed:
			verdict, retry = "reject", d.RetryAfter.String()
		default:
			allowed++
		}
		fmt.Fprintf(tw, "%v\t%s\t%v\t%s\t%v\t%v\t\n", now.Sub(start), verdict, d.Remaining, retry, d.ResetAfter, d.Delay)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d of %d allowed\n", allowed, *requests)
	return exitOK
}
