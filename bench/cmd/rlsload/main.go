// Command rlsload is a closed-loop load generator for rate-limit decision
// services on loopback: Envoy's RLS v3 (ShouldRateLimit) and gubernator's
// V1 GetRateLimits, both over gRPC in clear text or, with -ca, over TLS
// (with -cert and -key, mTLS).
//
// c workers each keep one call in flight for -warmup (not recorded) and then
// for -d; workers share one grpc.ClientConn, one HTTP/2 connection, per 16.
// Each call carries -batch descriptors whose values are drawn uniformly from
// -keys distinct values.
// It prints one line:
//
//	impl c keys batch calls/s decisions/s p50 p99 errors over% cores
//
// where decisions/s counts the descriptors of successful calls, p50 and p99
// are exact quantiles of every recorded call's latency (errors included),
// over% is the share of decisions that came back OVER_LIMIT, and the last
// column is the CPU, in cores, that the server (-pid: its processes, with its
// store's if given), rlsload and every other
// process used during the measurement: on a shared machine, a point with
// "others" well above 0 was disturbed.
//
//	rlsload -addr 127.0.0.1:8081 -c 64 -keys 10000 -d 10s
//	rlsload -proto gubernator -addr 127.0.0.1:1051 -c 64 -batch 16
//	rlsload -addr 127.0.0.1:8081 -ca ca.pem -cert client.pem -key client-key.pem
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
}

// options are the parsed flags.
type options struct {
	addr       string
	proto      string
	impl       string
	c          int
	d          time.Duration
	warmup     time.Duration
	wait       time.Duration
	keys       int
	batch      int
	domain     string
	descriptor []string
	limit      int64
	header     bool
	minOver    float64
	pids       []int
	ca         string
	serverName string
	cert       string
	key        string
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("rlsload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8081", "server `host:port` (gRPC; clear text unless -ca)")
	fs.StringVar(&o.proto, "proto", "rls", "`protocol`: rls (Envoy RLS v3 ShouldRateLimit) or gubernator (V1 GetRateLimits)")
	fs.StringVar(&o.impl, "impl", "", "label for the impl column (default: the protocol)")
	fs.IntVar(&o.c, "c", 16, "concurrent workers, each with one call in flight")
	fs.DurationVar(&o.d, "d", 10*time.Second, "measured duration")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unrecorded load before the measurement")
	fs.DurationVar(&o.wait, "wait", 10*time.Second, "how long to retry the first call while the server starts")
	fs.IntVar(&o.keys, "keys", 1, "distinct descriptor values, drawn uniformly")
	fs.IntVar(&o.batch, "batch", 1, "descriptors per call")
	fs.StringVar(&o.domain, "domain", "sluicebench", "RLS domain; gubernator's limit name")
	desc := fs.String("descriptor", "key", "comma-separated descriptor entry `keys`; every entry of a descriptor gets the same value")
	fs.Int64Var(&o.limit, "limit", 4_000_000_000, "gubernator only: limit per key per minute (RLS limits live in the server's config)")
	fs.BoolVar(&o.header, "header", false, "print the column header first")
	pids := fs.String("pid", "", "comma-separated `pids` of the server (and its store), to report their CPU use (Linux)")
	fs.Float64Var(&o.minOver, "min-over", 0, "fail unless at least this `percent` of decisions were OVER_LIMIT (a check that the server counts)")
	fs.StringVar(&o.ca, "ca", "", "speak TLS, verifying the server's certificate against the CAs of this PEM `file` (default: clear text)")
	fs.StringVar(&o.serverName, "server-name", "", "the `name` the server's certificate must hold (default: the host of -addr)")
	fs.StringVar(&o.cert, "cert", "", "a client certificate's PEM `file`, for a server that asks for one (mTLS; needs -ca)")
	fs.StringVar(&o.key, "key", "", "the PEM `file` of -cert's key")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.descriptor = strings.Split(*desc, ",")
	for p := range strings.SplitSeq(*pids, ",") {
		if p == "" || p == "0" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return o, fmt.Errorf("-pid %q: want comma-separated process ids", *pids)
		}
		o.pids = append(o.pids, n)
	}
	if o.impl == "" {
		o.impl = o.proto
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.proto != "rls" && o.proto != "gubernator":
		return o, fmt.Errorf("-proto %q: want rls or gubernator", o.proto)
	case o.c < 1 || o.keys < 1 || o.batch < 1 || o.d <= 0 || o.warmup < 0:
		return o, errors.New("-c, -keys, -batch and -d must be positive, -warmup not negative")
	case slices.Contains(o.descriptor, ""):
		return o, fmt.Errorf("-descriptor %q has an empty key", *desc)
	}
	return o, checkTLSFlags(o)
}

// caller makes one call of batch descriptors with the given key indexes and
// returns how many decisions came back, and how many of them were over the limit.
// A caller is used by one worker at a time.
type caller interface {
	call(ctx context.Context, keys []int) (decisions, over int, err error)
}

// newCaller returns a constructor of per-worker callers for o.proto.
func newCaller(o options) func(cc *grpc.ClientConn) caller {
	if o.proto == "gubernator" {
		g := newGuberKeys(o)
		return func(cc *grpc.ClientConn) caller { return g.caller(cc) }
	}
	r := newRLSKeys(o)
	return func(cc *grpc.ClientConn) caller { return r.caller(cc) }
}

// result is what one worker recorded.
type result struct {
	lat       []time.Duration
	calls     int
	errs      int
	decisions int
	over      int
	firstErr  error
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parse(args, os.Stderr)
	if err != nil {
		return err
	}
	creds, err := transportCredentials(o)
	if err != nil {
		return err
	}
	// Connections: ceil(c/16) ClientConns (1 at c ≤ 16, 4 at c = 64), each
	// one HTTP/2 connection to the one address (pick_first), its TCP and TLS
	// handshakes done once, by waitReady, before the warm-up; every call
	// after that, warm-up and measurement, is a stream on one of them. The
	// server closes none (sluice: only after minutes idle), so a TLS point
	// measures TLS's steady cost, records and their encryption, and no
	// handshake.
	nconn := (o.c + 15) / 16
	conns := make([]*grpc.ClientConn, nconn)
	for i := range conns {
		cc, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return fmt.Errorf("dial %s: %w", o.addr, err)
		}
		defer cc.Close()
		conns[i] = cc
	}
	mk := newCaller(o)
	for _, cc := range conns {
		if err := waitReady(ctx, mk(cc), o); err != nil {
			return err
		}
	}

	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.d)
	results := make([]result, o.c)
	var wg sync.WaitGroup
	for w := range o.c {
		wg.Go(func() {
			results[w] = work(ctx, mk(conns[w%nconn]), o, uint64(w), measureFrom, end)
		})
	}
	time.Sleep(time.Until(measureFrom))
	cpu0, cpuErr := sampleCPU(o.pids)
	wg.Wait()
	elapsed := time.Since(measureFrom)
	if err := ctx.Err(); err != nil {
		return err
	}
	cpu := "-"
	if cpuErr == nil {
		var cpu1 cpuSample
		if cpu1, cpuErr = sampleCPU(o.pids); cpuErr == nil {
			cpu = cores(cpu0, cpu1, len(o.pids) > 0, elapsed.Seconds())
		}
	}
	if cpuErr != nil {
		fmt.Fprintln(os.Stderr, "rlsload: no CPU figures:", cpuErr)
	}

	var total result
	for _, r := range results {
		total.lat = append(total.lat, r.lat...)
		total.calls += r.calls
		total.errs += r.errs
		total.decisions += r.decisions
		total.over += r.over
		if total.firstErr == nil {
			total.firstErr = r.firstErr
		}
	}
	slices.Sort(total.lat)
	secs := elapsed.Seconds()
	overPct := 0.0
	if total.decisions > 0 {
		overPct = 100 * float64(total.over) / float64(total.decisions)
	}
	if o.header {
		fmt.Fprintf(stdout, "%-15s %3s %6s %5s %10s %12s %9s %9s %7s %6s  %s\n",
			"impl", "c", "keys", "batch", "calls/s", "decisions/s", "p50", "p99", "errors", "over%", "cores srv/load/others")
	}
	fmt.Fprintf(stdout, "%-15s %3d %6d %5d %10.0f %12.0f %9s %9s %7d %6.2f  %s\n",
		o.impl, o.c, o.keys, o.batch,
		float64(total.calls-total.errs)/secs, float64(total.decisions)/secs,
		fmtDur(quantile(total.lat, 0.50)), fmtDur(quantile(total.lat, 0.99)),
		total.errs, overPct, cpu)
	if total.firstErr != nil {
		fmt.Fprintf(os.Stderr, "rlsload: %s: %d of %d calls failed; first: %v\n", o.impl, total.errs, total.calls, total.firstErr)
	}
	if total.calls == 0 {
		return errors.New("no call completed")
	}
	if overPct < o.minOver {
		return fmt.Errorf("%s: %.2f%% of decisions over the limit, want at least %.2f%%: the server does not count these descriptors", o.impl, overPct, o.minOver)
	}
	return nil
}

// waitReady retries one call until it succeeds or o.wait passes; a failed
// TLS handshake ends it at once.
func waitReady(ctx context.Context, c caller, o options) error {
	deadline := time.Now().Add(o.wait)
	keys := make([]int, o.batch)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _, err := c.call(cctx, keys)
		cancel()
		if err == nil {
			return nil
		}
		if notHealing(err) {
			return fmt.Errorf("%s at %s: %w%s", o.proto, o.addr, err, tlsHint(o, err))
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("%s at %s not ready after %v: %w%s", o.proto, o.addr, o.wait, err, tlsHint(o, err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// work keeps one call in flight until end, recording the calls that start at
// or after measureFrom.
func work(ctx context.Context, c caller, o options, seed uint64, measureFrom, end time.Time) result {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	keys := make([]int, o.batch)
	r := result{lat: make([]time.Duration, 0, 1<<14)}
	for ctx.Err() == nil {
		for i := range keys {
			keys[i] = rng.IntN(o.keys)
		}
		t0 := time.Now()
		if !t0.Before(end) {
			break
		}
		d, over, err := c.call(ctx, keys)
		if t0.Before(measureFrom) {
			continue
		}
		r.lat = append(r.lat, time.Since(t0))
		r.calls++
		if err != nil {
			r.errs++
			if r.firstErr == nil {
				r.firstErr = err
			}
			continue
		}
		r.decisions += d
		r.over += over
	}
	return r
}

// quantile returns the q-quantile of sorted (nearest rank), or 0 if empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Millisecond-time.Microsecond/2:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}
