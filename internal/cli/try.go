package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// Bounds of what `sluice try` plays: requests, and their span in time.
const (
	maxTryRequests = 100_000
	maxTrySpan     = 100 * 365 * 24 * time.Hour
)

// tryFlags are sluice try's flags: the limit and the requests played
// against it.
type tryFlags struct {
	limit    sluice.Limit
	requests int
	every    time.Duration
	cost     float64
}

func newTryCmd() *cobra.Command {
	f := tryFlags{limit: sluice.Limit{Name: "try"}}
	cmd := &cobra.Command{
		Use:               "try [flags]",
		Short:             "play a limit against a stream of requests on a simulated clock",
		Long:              "Plays requests against one key of a limit, on a simulated clock, and prints each decision.",
		GroupID:           groupTools,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			return f.run(c.OutOrStdout())
		},
	}
	algorithms := enumNames[sluice.Algorithm]()
	fs := cmd.Flags()
	fs.TextVar(&f.limit.Algorithm, "algorithm", sluice.TokenBucket, "the limit's `ALGORITHM`: "+strings.Join(algorithms, ", "))
	fs.Float64Var(&f.limit.Quota, "quota", 2, "cost admitted per window, from 0.000001 to 4.5e9 (a whole number for sliding_log and concurrency)")
	fs.DurationVar(&f.limit.Window, "window", time.Second, "the quota's window, whole microseconds from 1µs to ten years")
	fs.Float64Var(&f.limit.Burst, "burst", 0, "bucket capacity of token_bucket, gcra and leaky_bucket (default 0: the quota; must be 0 for the others)")
	fs.Float64Var(&f.limit.DelayThreshold, "delay-threshold", 0, "queued cost that passes undelayed, from 0 to the burst: leaky_bucket only (default 0)")
	fs.IntVar(&f.requests, "requests", 10, fmt.Sprintf("how many requests to play, from 1 to %d", maxTryRequests))
	fs.DurationVar(&f.every, "every", 100*time.Millisecond, "time between two requests, from 0 (all at once) to 100 years in all")
	fs.Float64Var(&f.cost, "cost", 1, "cost of each request, from 0.000001 to 4.5e9 (a whole number for sliding_log and concurrency)")
	_ = cmd.RegisterFlagCompletionFunc("algorithm", cobra.FixedCompletions(algorithms, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// run plays the requests and prints each decision to stdout.
func (f *tryFlags) run(stdout io.Writer) error {
	if f.requests < 1 || f.requests > maxTryRequests {
		return usagef("--requests %d: must be between 1 and %d", f.requests, maxTryRequests)
	}
	if span := maxTrySpan / time.Duration(f.requests); f.every < 0 || f.every > span {
		return usagef("--every %v: must be between 0 and %v for %d requests", f.every, span, f.requests)
	}
	if err := f.limit.Validate(); err != nil {
		return usage(err) // it says "sluice: invalid limit …"
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	store, err := memstore.New(memstore.Options{Now: func() time.Time { return now }, SweepInterval: -1})
	if err != nil {
		return err
	}
	defer store.Close()

	fmt.Fprintf(stdout, "%v; %d requests of cost %v, one every %v\n\n", f.limit, f.requests, f.cost, f.every)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "t\tdecision\tremaining\tretry after\treset after\tdelay\t")
	allowed := 0
	for i := range f.requests {
		now = start.Add(time.Duration(i) * f.every)
		d, err := store.Allow(context.Background(), "key", f.limit, f.cost)
		if err != nil && !errors.Is(err, sluice.ErrCostExceedsLimit) {
			tw.Flush()
			return usage(err) // an invalid cost
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
	fmt.Fprintf(stdout, "\n%d of %d allowed\n", allowed, f.requests)
	return nil
}
