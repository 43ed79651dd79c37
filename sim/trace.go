package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Request is one request of a trace: it arrives At (from the trace's
// start) and costs Cost.
type Request struct {
	At   time.Duration
	Cost float64
}

// Trace is a sequence of requests in the order they arrive (At never
// decreases).
type Trace struct {
	Name     string
	Requests []Request
}

// MaxRequests bounds a trace, built in or read from a file.
const MaxRequests = 1_000_000

// maxAt bounds a request's instant: ten years, sluice's longest window.
const maxAt = 10 * 365 * 24 * time.Hour

// Traces are the names of the built-in traces, in the order Builtin's
// documentation gives them.
var Traces = []string{"boundary", "burst-then-idle", "poisson", "on-off", "adversarial", "instances"}

// ErrUnknownTrace: a trace name that is no built-in trace.
var ErrUnknownTrace = errors.New("sim: unknown trace")

// Builtin returns the built-in trace name, shaped for the limit quota per
// window with capacity burst (the quota when 0), requests of cost each,
// spread over instances (1 or more):
//
//   - boundary: the seed's fixed-window boundary — a quota's worth at
//     00:59.9 and another at 01:00.1 of a one-minute window (at
//     window × 599/600 and × 601/600 for others).
//   - burst-then-idle: twice the capacity at 0, idle for ten windows,
//     twice the capacity again: a long idle never refills past the burst.
//   - poisson: arrivals at 1.5 × the rate for ten windows, exponential
//     gaps from a fixed seed (the same trace every run).
//   - on-off: three times the rate for one window, nothing for one, five
//     times.
//   - adversarial: idle until just before the first window ends, a full
//     capacity at once, then requests at four times the rate for a
//     window: close to the most each algorithm lets through in one window (fixed
//     and sliding windows reset or reweigh at the boundary, buckets spend
//     their burst and then the refill).
//   - instances: requests at twice instances × the rate for ten windows,
//     evenly spaced — the seed's ten local 100/s limiters against one.
func Builtin(name string, quota float64, window time.Duration, burst, cost float64, instances int) (Trace, error) {
	if burst == 0 {
		burst = quota
	}
	// Every count is checked against MaxRequests before anything is
	// built: a limit of 1e10/s must not allocate its trace first.
	tooMany := false
	per := func(n float64) int { // requests of cost in n
		f := math.Floor(n/cost + 1e-9)
		if !(f <= MaxRequests) { // NaN, or too many
			tooMany = true
			return 0
		}
		return max(1, int(f))
	}
	w := window
	var reqs []Request
	room := func(n int) bool {
		if tooMany || len(reqs)+n > MaxRequests {
			tooMany = true
			return false
		}
		return true
	}
	add := func(at time.Duration, n int) {
		if !room(n) {
			return
		}
		for range n {
			reqs = append(reqs, Request{At: at, Cost: cost})
		}
	}
	// steady adds requests at rate (cost per window) from start for span.
	steady := func(start, span time.Duration, rate float64) {
		n := per(rate * float64(span) / float64(w))
		if !room(n) {
			return
		}
		for i := range n {
			reqs = append(reqs, Request{At: start + time.Duration(float64(span)*float64(i)/float64(n)), Cost: cost})
		}
	}
	switch name {
	case "boundary":
		add(w*599/600, per(quota))
		add(w*601/600, per(quota))
	case "burst-then-idle":
		add(0, per(2*burst))
		add(10*w, per(2*burst))
	case "poisson":
		rng := rand.New(rand.NewPCG(18, 2026))
		mean := float64(w) * cost / (1.5 * quota)
		per(15 * quota) // the expected count, refused before the loop when too many
		for at := 0.0; !tooMany; {
			at += rng.ExpFloat64() * mean
			if at >= float64(10*w) {
				break
			}
			if room(1) {
				reqs = append(reqs, Request{At: time.Duration(at), Cost: cost})
			}
		}
	case "on-off":
		for i := range 5 {
			steady(time.Duration(2*i)*w, w, 3*quota)
		}
	case "adversarial":
		add(w*599/600, per(max(quota, burst)))
		steady(w, w, 4*quota)
	case "instances":
		steady(0, 10*w, 2*float64(instances)*quota)
	default:
		return Trace{}, fmt.Errorf("%w %q (want one of %s, or a CSV file's path)", ErrUnknownTrace, name, strings.Join(Traces, ", "))
	}
	if tooMany {
		return Trace{}, fmt.Errorf("sim: trace %s: more than %d requests for this limit and cost: lower the limit, or raise the cost", name, MaxRequests)
	}
	return Trace{Name: name, Requests: reqs}, nil
}

// LineError is a CSV trace's line that does not parse.
type LineError struct {
	Name    string // the trace's name (its file)
	Line    int    // from 1
	Problem string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Problem) }

// ParseCSV reads a trace of lines "seconds,cost": the instant in seconds
// from the trace's start (a decimal number, never less than the line
// before's) and the request's cost (a positive number; when the field is
// absent, cost). Blank lines and lines starting with # are skipped, and the
// first line may be the header "seconds,cost". A line that does not parse
// is a *LineError naming it; so is a trace longer than MaxRequests or
// than ten years.
func ParseCSV(r io.Reader, name string, cost float64) (Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 4096)
	var reqs []Request
	line := 0
	bad := func(format string, args ...any) error {
		return &LineError{Name: name, Line: line, Problem: fmt.Sprintf(format, args...)}
	}
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' || line == 1 && strings.EqualFold(strings.ReplaceAll(text, " ", ""), "seconds,cost") {
			continue
		}
		fields := strings.Split(text, ",")
		if len(fields) > 2 {
			return Trace{}, bad("%d fields, want seconds,cost", len(fields))
		}
		secs, err := strconv.ParseFloat(strings.TrimSpace(fields[0]), 64)
		if err != nil || math.IsNaN(secs) || secs < 0 || secs > maxAt.Seconds() {
			return Trace{}, bad("time %q: want a number of seconds from 0 to %v", quoted(fields[0]), maxAt.Seconds())
		}
		at := time.Duration(math.Round(secs * 1e9))
		if n := len(reqs); n > 0 && at < reqs[n-1].At {
			return Trace{}, bad("time %v s is before the line before's (%v s): times never decrease", secs, reqs[n-1].At.Seconds())
		}
		c := cost
		if len(fields) == 2 {
			c, err = strconv.ParseFloat(strings.TrimSpace(fields[1]), 64)
			if err != nil || !(c > 0) || math.IsInf(c, 0) {
				return Trace{}, bad("cost %q: want a positive number", quoted(fields[1]))
			}
		}
		if len(reqs) == MaxRequests {
			return Trace{}, bad("more than %d requests", MaxRequests)
		}
		reqs = append(reqs, Request{At: at, Cost: c})
	}
	if err := sc.Err(); err != nil {
		line++
		if errors.Is(err, bufio.ErrTooLong) {
			return Trace{}, bad("longer than 4096 bytes")
		}
		return Trace{}, fmt.Errorf("sim: read %s: %w", name, err)
	}
	if len(reqs) == 0 {
		return Trace{}, fmt.Errorf("sim: %s: no requests", name)
	}
	return Trace{Name: name, Requests: reqs}, nil
}

// quoted shortens a field for an error message.
func quoted(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// ParseRate reads a rate "QUOTA/UNIT": a positive quota and a unit of s,
// sec, second, min, minute, h, hour, d or day, or a Go duration ("10/min",
// "100/s", "5/30s").
func ParseRate(s string) (quota float64, window time.Duration, err error) {
	q, u, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("sim: rate %q: want QUOTA/UNIT, as 10/min or 100/s", s)
	}
	quota, err = strconv.ParseFloat(q, 64)
	if err != nil || !(quota > 0) || math.IsInf(quota, 0) {
		return 0, 0, fmt.Errorf("sim: rate %q: quota %q is not a positive number", s, q)
	}
	switch u {
	case "s", "sec", "second":
		window = time.Second
	case "min", "minute":
		window = time.Minute
	case "h", "hour":
		window = time.Hour
	case "d", "day":
		window = 24 * time.Hour
	default:
		window, err = time.ParseDuration(u)
		if err != nil || window <= 0 {
			return 0, 0, fmt.Errorf("sim: rate %q: unit %q is not s, min, h, d or a positive duration (30s, 1m30s)", s, u)
		}
	}
	return quota, window, nil
}
