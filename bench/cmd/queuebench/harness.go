package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// payload is every task's body: 64 bytes.
var payload = []byte(strings.Repeat("queuebench-task-", 4))

// env is what every row's run shares: the options, the temporary
// directory, and the fastest rate seen so far of each row (to size
// backlogs). Rows run one at a time; row names the one running.
type env struct {
	opts  options
	tmp   string
	rates map[string]float64
	row   string
	seq   int
}

// suite is one opened implementation: its durability in words, its rows,
// and how to release it.
type suite struct {
	name    string
	durable string
	version string // what was measured: library and server versions
	cases   []testCase
	close   func() error
}

// testCase is one row: a scenario measured one way. A nil run is a row
// that only states a note (an API the implementation lacks).
type testCase struct {
	scenario string
	label    string
	note     string
	run      func(ctx context.Context, e *env) (result, error)
}

// result is what one round of one row measured.
type result struct {
	tasks   int64         // tasks done (enqueued, or worked and acknowledged) in the window
	secs    float64       // the window's length
	p99     time.Duration // 0 when not measured
	dry     bool          // a work row's backlog ran out in the window
	backlog int           // a work row's pre-filled tasks
	errs    int64
	first   error
	cpu     cpuUse
}

func (r result) rate() float64 {
	if r.secs <= 0 {
		return 0
	}
	return float64(r.tasks) / r.secs
}

func (r result) summary() string {
	s := fmt.Sprintf("%9.0f tasks/s", r.rate())
	if r.p99 > 0 {
		s += "  p99 " + fmtDur(r.p99)
	}
	s += "  cpu " + r.cpu.String()
	if r.backlog > 0 {
		s += fmt.Sprintf("  backlog %d", r.backlog)
	}
	if r.dry {
		s += "  RAN DRY"
	}
	if r.errs > 0 {
		s += fmt.Sprintf("  %d errors, first: %v", r.errs, r.first)
	}
	return s
}

// observe keeps the fastest rate seen of the running row.
func (e *env) observe(rate float64) {
	e.rates[e.row] = max(e.rates[e.row], rate)
}

// backlog returns how many tasks to pre-fill for the running row: twice
// what the fastest rate seen of it (or guess, in tasks/s, before any)
// works off in the warm-up, the measurement and 2 s of start-up, or
// -backlog when set.
func (e *env) backlog(guess float64) int {
	if e.opts.backlog > 0 {
		return e.opts.backlog
	}
	rate := e.rates[e.row]
	if rate == 0 {
		rate = guess
	}
	span := e.opts.warmup + e.opts.duration + 2*time.Second
	return max(int(math.Ceil(2*rate*span.Seconds())), 1000)
}

// dataDir returns a new, empty directory for one row's data files.
func (e *env) dataDir() (string, error) {
	e.seq++
	dir := filepath.Join(e.tmp, fmt.Sprintf("run%d", e.seq))
	return dir, os.Mkdir(dir, 0o755)
}

// window is one round's measurement: it starts after the warm-up.
type window struct {
	from, to time.Time
}

func (e *env) window() window {
	from := time.Now().Add(e.opts.warmup)
	return window{from: from, to: from.Add(e.opts.duration)}
}

func (w window) has(t time.Time) bool { return !t.Before(w.from) && !t.After(w.to) }

// watch sleeps to the window's start, calls atFrom, sleeps to its end and
// calls atTo, and returns the CPU used between the two. Either call may
// be nil.
func (w window) watch(ctx context.Context, atFrom, atTo func() error) (cpuUse, error) {
	if err := sleepUntil(ctx, w.from); err != nil {
		return cpuUse{}, err
	}
	c0 := sampleCPU()
	if atFrom != nil {
		if err := atFrom(); err != nil {
			return cpuUse{}, err
		}
	}
	if err := sleepUntil(ctx, w.to); err != nil {
		return cpuUse{}, err
	}
	use := c0.until(sampleCPU())
	if atTo != nil {
		if err := atTo(); err != nil {
			return cpuUse{}, err
		}
	}
	return use, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// tally collects what the goroutines of a driver count.
type tally struct {
	tasks atomic.Int64
	errs  atomic.Int64
	mu    sync.Mutex
	first error
	lat   []time.Duration
}

func (t *tally) fail(err error) {
	t.errs.Add(1)
	t.mu.Lock()
	if t.first == nil {
		t.first = err
	}
	t.mu.Unlock()
}

func (t *tally) latencies(l []time.Duration) {
	t.mu.Lock()
	t.lat = append(t.lat, l...)
	t.mu.Unlock()
}

func (t *tally) result(w window, cpu cpuUse) result {
	slices.Sort(t.lat)
	return result{
		tasks: t.tasks.Load(),
		secs:  w.to.Sub(w.from).Seconds(),
		p99:   quantile(t.lat, 0.99),
		errs:  t.errs.Load(),
		first: t.first,
		cpu:   cpu,
	}
}

// putFunc enqueues n tasks in one call.
type putFunc func(ctx context.Context, n int) error

// ingest keeps g goroutines calling put with n tasks per call, back to
// back, through the warm-up and the window. It counts the tasks of calls
// that returned in the window, and the latency of calls that started and
// returned in it.
func ingest(ctx context.Context, e *env, g, n int, put putFunc) (result, error) {
	w := e.window()
	var t tally
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(w.to) {
					break
				}
				err := put(ctx, n)
				t1 := time.Now()
				if !w.has(t1) {
					continue
				}
				if err != nil {
					t.fail(err)
					continue
				}
				t.tasks.Add(int64(n))
				if !t0.Before(w.from) {
					lat = append(lat, t1.Sub(t0))
				}
			}
			t.latencies(lat)
		})
	}
	cpu, err := w.watch(ctx, nil, nil)
	wg.Wait()
	if err != nil {
		return result{}, err
	}
	return t.result(w, cpu), nil
}

// A leaser hands out up to n tasks in one call, each as the function that
// acknowledges it; it is the consumer side of a queue for [relay].
type leaser struct {
	lease func(ctx context.Context, n int) ([]func(context.Context) error, error)
	// ready returns how many tasks are ready, to tell at the window's end
	// whether the backlog ran out; nil: it ran out if every task of the
	// backlog was acknowledged by then.
	ready   func(ctx context.Context) (int64, error)
	backlog int64
}

// relay works a backlog as sluice's relay does: consumers goroutines each
// lease a slice of n tasks, acknowledge them from ackers goroutines at
// once, and lease the next slice when all are acknowledged. It counts the
// tasks acknowledged in the window, and the p99 of a task's time from its
// lease's return to its acknowledgement's return, for leases that returned
// in the window.
func relay(ctx context.Context, e *env, consumers, ackers, n int, l leaser) (result, error) {
	w := e.window()
	var t tally
	var acked atomic.Int64 // in the window or before it
	var wg sync.WaitGroup
	for range consumers {
		wg.Go(func() {
			var lat []time.Duration
			for ctx.Err() == nil && time.Now().Before(w.to) {
				acks, err := l.lease(ctx, n)
				leased := time.Now()
				if err != nil {
					if w.has(leased) {
						t.fail(fmt.Errorf("lease: %w", err))
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if len(acks) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				ack := make([]time.Duration, len(acks))
				var next atomic.Int64
				var awg sync.WaitGroup
				for range min(ackers, len(acks)) {
					awg.Go(func() {
						for i := next.Add(1) - 1; i < int64(len(acks)); i = next.Add(1) - 1 {
							err := acks[i](ctx)
							done := time.Now()
							if err == nil {
								acked.Add(1)
							}
							if !w.has(done) {
								continue
							}
							if err != nil {
								t.fail(fmt.Errorf("ack: %w", err))
								continue
							}
							t.tasks.Add(1)
							ack[i] = done.Sub(leased)
						}
					})
				}
				awg.Wait()
				if !leased.Before(w.from) {
					for _, d := range ack {
						if d > 0 {
							lat = append(lat, d)
						}
					}
				}
			}
			t.latencies(lat)
		})
	}
	ready, ackedInWindow := int64(-1), int64(0)
	cpu, err := w.watch(ctx, nil, func() (err error) {
		if l.ready == nil {
			ackedInWindow = acked.Load()
			return nil
		}
		ready, err = l.ready(ctx)
		return err
	})
	wg.Wait()
	if err != nil {
		return result{}, err
	}
	r := t.result(w, cpu)
	r.dry = ready == 0 || ready < 0 && ackedInWindow >= l.backlog
	return r, nil
}

// quantile returns the q-quantile of sorted (nearest rank), or 0 if empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}

// fill enqueues total tasks from g goroutines, n per call, before a work
// row's measurement.
func fill(ctx context.Context, total, g, n int, put putFunc) error {
	var left atomic.Int64
	left.Store(int64(total))
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for {
				k := min(int64(n), left.Add(-int64(n))+int64(n))
				if k <= 0 || ctx.Err() != nil {
					return
				}
				if err := put(ctx, int(k)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("pre-fill: %w", err)
	}
	return ctx.Err()
}
