// Package sim replays traces of requests through sluice's algorithms on a
// virtual clock, with the library's own code (a memstore whose clock is
// the trace's), and measures what each one lets through: the figures of
// `sluice sim` and of docs/algorithms.md.
//
// Everything is deterministic: the same trace and Config give the same
// Result, to the request. The package imports only the standard library,
// sluice and memstore; sim/simplot draws a Result.
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// Config is what a trace is replayed against.
type Config struct {
	// Algorithms to replay, in the table's order; Concurrency is refused
	// (it holds slots, it has no rate). Default: all the others.
	Algorithms []sluice.Algorithm
	// Quota per Window is the limit's rate (required).
	Quota  float64
	Window time.Duration
	// Burst is the capacity of token_bucket, gcra and leaky_bucket;
	// default 0, the quota. The other algorithms have none.
	Burst float64
	// Instances, when more than 1, also replays each algorithm on that
	// many local limiters, each with the whole limit, request i going to
	// instance i mod Instances — against the one shared limiter. Default 1.
	Instances int
}

// Run is one algorithm's replay of a trace.
type Run struct {
	Algorithm sluice.Algorithm
	// Local is 0 for the one shared limiter, N for the sum of N local ones.
	Local int
	// Offered, Admitted and Rejected count requests.
	Offered, Admitted, Rejected int
	// MaxInWindow is the most cost admitted in any span of one window
	// (half open), counting a delayed request when its delay ends.
	MaxInWindow float64
	// MaxDelay is the longest delay an admitted request was told to wait
	// (leaky_bucket only).
	MaxDelay time.Duration
	// Differ counts the requests decided unlike the exact sliding log (one
	// shared limit); -1 when there is no reference (fractional costs or
	// quota, or a quota above sluice.MaxEntries).
	Differ int
	// Allowed[i] is the decision on the trace's request i.
	Allowed []bool
	// Remaining[k] is what the shared limiter had left at Result.Samples[k]
	// (sluice.Inspector's Peek); nil for local runs.
	Remaining []float64
}

// Name is the run's name in the table: the algorithm, "×N local" for local
// limiters.
func (r *Run) Name() string {
	if r.Local > 0 {
		return fmt.Sprintf("%v ×%d local", r.Algorithm, r.Local)
	}
	return r.Algorithm.String()
}

// Result is a trace replayed through every algorithm of a Config.
type Result struct {
	Trace  Trace
	Config Config // with its defaults filled in
	// Span is the replay's length: the last request's instant plus a window.
	Span time.Duration
	// Bin is the width of the plots' time bins; Samples are the instants
	// at which Run.Remaining was read (every Bin from 0 through Span).
	Bin     time.Duration
	Samples []time.Duration
	Runs    []Run
}

// maxBins bounds the plots' resolution.
const maxBins = 500

// Replay replays trace through each algorithm of c. Errors name the
// algorithm and the request (a cost an algorithm refuses: a fractional one
// for sliding_log) or the limit's field that is wrong; a cost above an
// algorithm's capacity is not an error, it is rejected.
func Replay(trace Trace, c Config) (*Result, error) {
	if len(c.Algorithms) == 0 {
		for a := range sluice.Concurrency {
			c.Algorithms = append(c.Algorithms, a)
		}
	}
	if c.Instances == 0 {
		c.Instances = 1
	}
	if c.Instances < 1 || c.Instances > 10_000 {
		return nil, fmt.Errorf("sim: %d instances: want 1 to 10000", c.Instances)
	}
	if len(trace.Requests) == 0 {
		return nil, fmt.Errorf("sim: trace %s has no requests", trace.Name)
	}
	for _, a := range c.Algorithms {
		if a == sluice.Concurrency {
			return nil, fmt.Errorf("sim: %v holds slots, it has no rate to simulate", a)
		}
		if err := c.limit(a).Validate(); err != nil {
			return nil, fmt.Errorf("sim: %v: %w", a, err)
		}
	}
	r := &Result{Trace: trace, Config: c, Span: trace.Requests[len(trace.Requests)-1].At + c.Window}
	r.Bin = max(c.Window/10, time.Microsecond)
	if r.Span/r.Bin > maxBins {
		r.Bin = (r.Span + maxBins - 1) / maxBins
	}
	for at := time.Duration(0); at <= r.Span; at += r.Bin {
		r.Samples = append(r.Samples, at)
	}

	var ref []bool
	if wholeCosts(trace) && c.Quota == math.Trunc(c.Quota) && c.Quota <= sluice.MaxEntries {
		log, err := r.replay(sluice.SlidingLog, 1)
		if err != nil {
			return nil, err
		}
		ref = log.Allowed
	}
	for _, a := range c.Algorithms {
		locals := []int{1}
		if c.Instances > 1 {
			locals = append(locals, c.Instances)
		}
		for _, n := range locals {
			run, err := r.replay(a, n)
			if err != nil {
				return nil, err
			}
			run.Differ = -1
			if ref != nil {
				run.Differ = 0
				for i, ok := range run.Allowed {
					if ok != ref[i] {
						run.Differ++
					}
				}
			}
			r.Runs = append(r.Runs, *run)
		}
	}
	return r, nil
}

// limit is c's limit under algorithm a.
func (c Config) limit(a sluice.Algorithm) sluice.Limit {
	l := sluice.Limit{Name: "sim", Algorithm: a, Quota: c.Quota, Window: c.Window}
	if l.HasBurst() {
		l.Burst = c.Burst
	}
	return l
}

func wholeCosts(t Trace) bool {
	for _, q := range t.Requests {
		if q.Cost != math.Trunc(q.Cost) {
			return false
		}
	}
	return true
}

// epoch is the virtual clock's start: 2026-01-01 UTC, moved back to a
// multiple of the window since the Unix epoch so that fixed windows start
// with the trace.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// replay runs the trace through algorithm a on local limiters (1: the one
// shared limiter).
func (r *Result) replay(a sluice.Algorithm, local int) (*Run, error) {
	c := r.Config
	limit := c.limit(a)
	w := c.Window.Microseconds()
	start := time.UnixMicro(epoch.UnixMicro() - epoch.UnixMicro()%w).UTC()
	now := start
	store, err := memstore.New(memstore.Options{Now: func() time.Time { return now }, SweepInterval: -1, MaxKeys: max(local, 16)})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	var inspector sluice.Inspector = store
	ctx := context.Background()
	keys := make([]string, local)
	for i := range keys {
		keys[i] = fmt.Sprintf("instance-%d", i)
	}

	run := &Run{Algorithm: a, Offered: len(r.Trace.Requests), Allowed: make([]bool, len(r.Trace.Requests))}
	if local > 1 {
		run.Local = local
	}
	var served []Request // admitted requests at the instant they are served
	k := 0               // the next sample
	peekUntil := func(at time.Duration) error {
		for ; local == 1 && k < len(r.Samples) && r.Samples[k] <= at; k++ {
			now = start.Add(r.Samples[k])
			s, err := inspector.Peek(ctx, keys[0], limit)
			if err != nil {
				return fmt.Errorf("sim: %v: peek at %v: %w", a, r.Samples[k], err)
			}
			run.Remaining = append(run.Remaining, s.Remaining)
		}
		return nil
	}
	for i, q := range r.Trace.Requests {
		if err := peekUntil(q.At); err != nil {
			return nil, err
		}
		now = start.Add(q.At)
		d, err := store.Allow(ctx, keys[i%local], limit, q.Cost)
		if err != nil && !errors.Is(err, sluice.ErrCostExceedsLimit) {
			return nil, fmt.Errorf("sim: %v: request %d (at %v, cost %v): %w", a, i+1, q.At, q.Cost, err)
		}
		if !d.Allowed {
			run.Rejected++
			continue
		}
		run.Allowed[i] = true
		run.Admitted++
		run.MaxDelay = max(run.MaxDelay, d.Delay)
		served = append(served, Request{At: q.At + d.Delay, Cost: q.Cost})
	}
	if err := peekUntil(r.Span); err != nil {
		return nil, err
	}
	run.MaxInWindow = maxInWindow(served, c.Window)
	return run, nil
}

// maxInWindow is the most cost of reqs in any half-open span of length w.
func maxInWindow(reqs []Request, w time.Duration) float64 {
	slices.SortStableFunc(reqs, func(a, b Request) int { return int(a.At - b.At) })
	best, sum, j := 0.0, 0.0, 0
	for _, q := range reqs {
		sum += q.Cost
		for reqs[j].At <= q.At-w {
			sum -= reqs[j].Cost
			j++
		}
		best = max(best, sum)
	}
	return math.Round(best*1e6) / 1e6
}

// Bins counts, per time bin of the Result, the requests run admitted and
// rejected (by arrival).
func (r *Result) Bins(run *Run) (admitted, rejected []float64) {
	admitted = make([]float64, len(r.Samples))
	rejected = make([]float64, len(r.Samples))
	for i, q := range r.Trace.Requests {
		b := min(int(q.At/r.Bin), len(r.Samples)-1)
		if run.Allowed[i] {
			admitted[b]++
		} else {
			rejected[b]++
		}
	}
	return admitted, rejected
}

// WriteTable writes the result as a table: a line on the trace and limit,
// then one row per run.
func (r *Result) WriteTable(w io.Writer) error {
	c := r.Config
	l := c.limit(sluice.TokenBucket)
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d requests in %v; limit %v per %v, burst %v (token_bucket, gcra, leaky_bucket)",
		r.Trace.Name, len(r.Trace.Requests), r.Trace.Requests[len(r.Trace.Requests)-1].At.Round(time.Millisecond), c.Quota, c.Window, l.Capacity())
	if c.Instances > 1 {
		fmt.Fprintf(&b, "; %d instances", c.Instances)
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algorithm\toffered\tadmitted\trejected\tmost in a window\tmax delay\tunlike sliding log\t")
	for i := range r.Runs {
		run := &r.Runs[i]
		differ := "-"
		if run.Differ >= 0 {
			differ = fmt.Sprint(run.Differ)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\t%v\t%s\t\n", run.Name(), run.Offered, run.Admitted, run.Rejected, run.MaxInWindow, run.MaxDelay.Round(time.Millisecond), differ)
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}
