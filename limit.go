package sluice

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/units"
)

// Algorithm selects how a Limit is enforced. The zero value is TokenBucket.
type Algorithm uint8

const (
	// TokenBucket: a bucket of Burst tokens refilled at Quota per Window; a
	// cost is admitted when the bucket holds at least that much, and taken
	// from it. Burst is an instant burst: Burst 5 admits 5 at once, not 5
	// per second. Admitted cost over any interval T is at most
	// Burst + Quota/Window × T.
	TokenBucket Algorithm = iota
	// GCRA (generic cell rate algorithm) makes the same decisions as
	// TokenBucket with one timestamp of state. It tolerates a clock that
	// steps back: an earlier now only looks like less capacity.
	GCRA
	// FixedWindow counts cost per window aligned to the Unix epoch
	// ([k×Window, (k+1)×Window)) and admits at most Quota per window. Its
	// documented weakness: up to 2×Quota may pass in a short span around a
	// window boundary.
	FixedWindow
	// SlidingLog remembers the time of every admitted cost and admits at most
	// Quota in every span of length Window, exactly. Memory grows with the
	// quota: Quota and costs are whole units, Quota at most MaxEntries.
	SlidingLog
	// SlidingWindow (sliding window counter) weighs the previous fixed
	// window's count by the part of it still inside a sliding Window:
	// estimate = previous × (1 − elapsed/Window) + current. It never admits
	// more than Quota per fixed window, so never more than FixedWindow would.
	SlidingWindow
	// LeakyBucket is a queue of capacity Burst drained at Quota per Window,
	// like nginx's limit_req: a request is admitted if it fits in the queue
	// and told to wait (Decision.Delay) until the work queued ahead of it
	// beyond DelayThreshold has drained. nginx's "rate=r burst=b delay=d" is
	// {Quota: r, Window: time.Second, Burst: b+1, DelayThreshold: d}; its
	// "nodelay" is DelayThreshold = b.
	LeakyBucket
	// Concurrency holds at most Quota slots at once (a semaphore). An allowed
	// decision holds cost slots until Release or until Window has passed, so
	// a crashed holder's slots come back. Quota and costs are whole units,
	// Quota at most MaxEntries.
	Concurrency

	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	SlidingWindow: "sliding_window",
	LeakyBucket:   "leaky_bucket",
	Concurrency:   "concurrency",
}

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// MarshalText returns the algorithm's name; an unknown algorithm is an error.
func (a Algorithm) MarshalText() ([]byte, error) {
	if a >= numAlgorithms {
		return nil, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, a)
	}
	return []byte(algorithmNames[a]), nil
}

// UnmarshalText parses an algorithm name as String returns it.
func (a *Algorithm) UnmarshalText(text []byte) error {
	for i, name := range algorithmNames {
		if string(text) == name {
			*a = Algorithm(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown algorithm %q (want one of %s)", ErrInvalidLimit, truncate(string(text), 32), strings.Join(algorithmNames[:], ", "))
}

// Limit is a rate limit: how much cost a key may spend per Window.
//
// Costs, quotas and bursts are in cost units (a request, a token, a byte, a
// weight) with a resolution of one millionth. The zero Limit is invalid: a
// Limit needs at least a Name, a Quota and a Window. Limits are values; they
// are safe to copy and to share between goroutines.
type Limit struct {
	// Name identifies the limit: a key's state belongs to the limit's Name
	// and its parameters, and the Name is the policy name in RateLimit
	// headers and metrics. 1 to MaxNameLen bytes of letters, digits and
	// "_-.:/". Required.
	Name string

	// Algorithm enforcing the limit. Default TokenBucket.
	Algorithm Algorithm

	// Quota is the cost admitted per Window: the refill of a TokenBucket,
	// GCRA or LeakyBucket, the count of a window, the slots of Concurrency.
	// Required; a positive finite number of at most about 4.5e9.
	Quota float64

	// Window is the period of Quota; for Concurrency, how long a slot is
	// held at most before it frees itself. Required: a whole number of
	// microseconds (the resolution of every store's clock), at most
	// MaxWindow.
	Window time.Duration

	// Burst is the capacity of a TokenBucket, GCRA or LeakyBucket: the most
	// cost admitted at once. Zero means Quota. Must be zero for the other
	// algorithms.
	Burst float64

	// DelayThreshold is, for a LeakyBucket only, how much queued cost passes
	// without delay (nginx's delay=). Zero, the default, delays all queued
	// work. At most Burst.
	DelayThreshold float64
}

// MaxNameLen is the longest Limit.Name, in bytes.
const MaxNameLen = 128

// MaxWindow is the longest Window: ten years.
const MaxWindow = 10 * 365 * 24 * time.Hour

// MaxEntries is the largest Quota of a SlidingLog or Concurrency limit,
// which keep one entry per admitted time or holder.
const MaxEntries = 10_000

// Capacity returns the most cost the limit admits at once: the Burst of a
// TokenBucket, GCRA or LeakyBucket (Quota when Burst is zero), otherwise
// the Quota.
func (l Limit) Capacity() float64 {
	if l.HasBurst() && l.Burst != 0 {
		return l.Burst
	}
	return l.Quota
}

// HasBurst reports whether the algorithm has a Burst (TokenBucket, GCRA,
// LeakyBucket).
func (l Limit) HasBurst() bool {
	return l.Algorithm == TokenBucket || l.Algorithm == GCRA || l.Algorithm == LeakyBucket
}

// WholeUnits reports whether the algorithm counts whole cost units only
// (SlidingLog and Concurrency).
func (l Limit) WholeUnits() bool {
	return l.Algorithm == SlidingLog || l.Algorithm == Concurrency
}

// String describes the limit, as in `api: token_bucket 100 per 1m0s, burst 20`.
func (l Limit) String() string {
	s := fmt.Sprintf("%s: %v %v per %v", l.Name, l.Algorithm, l.Quota, l.Window)
	if l.Burst != 0 {
		s += fmt.Sprintf(", burst %v", l.Burst)
	}
	if l.DelayThreshold != 0 {
		s += fmt.Sprintf(", delay threshold %v", l.DelayThreshold)
	}
	return s
}

// Validate reports whether the limit is usable; the error wraps
// ErrInvalidLimit and names the field, its value and the rule it breaks.
func (l Limit) Validate() error {
	if err := validateName(l.Name); err != nil {
		return err
	}
	bad := func(field string, value any, rule string) error {
		return &LimitError{Limit: l.Name, Field: field, Value: value, Rule: rule}
	}
	if l.Algorithm >= numAlgorithms {
		return bad("algorithm", int(l.Algorithm), "unknown algorithm")
	}
	quota, ok := units.FromCost(l.Quota)
	if !ok {
		return bad("quota", l.Quota, "must be a positive finite number between 0.000001 and 4.5e9")
	}
	if l.Window <= 0 || l.Window > MaxWindow || l.Window%time.Microsecond != 0 {
		return bad("window", l.Window, "must be a whole number of microseconds, from 1µs to ten years")
	}
	if l.WholeUnits() && (l.Quota != math.Trunc(l.Quota) || l.Quota > MaxEntries) {
		return bad("quota", l.Quota, fmt.Sprintf("%v counts whole units: must be a whole number up to %d", l.Algorithm, MaxEntries))
	}
	if !l.HasBurst() {
		if l.Burst != 0 {
			return bad("burst", l.Burst, fmt.Sprintf("%v has no burst: must be 0", l.Algorithm))
		}
		if l.DelayThreshold != 0 {
			return bad("delay threshold", l.DelayThreshold, "only a leaky_bucket has one: must be 0")
		}
		return nil
	}
	burst := quota
	if l.Burst != 0 {
		if burst, ok = units.FromCost(l.Burst); !ok {
			return bad("burst", l.Burst, "must be 0 (meaning quota) or a positive finite number between 0.000001 and 4.5e9")
		}
	}
	rate := units.NewRate(quota, int64(l.Window/time.Microsecond))
	if _, ok := rate.Scale(burst); !ok || rate.PerMicro > units.MaxScaled {
		return bad("burst", l.Capacity(), fmt.Sprintf("too large for exact arithmetic with window %v and quota %v (burst × window / gcd(quota, window) must stay below 2^52 millionths·µs): round the quota (a multiple of 10 often suffices) or shorten the window", l.Window, l.Quota))
	}
	if l.Algorithm != LeakyBucket && l.DelayThreshold != 0 {
		return bad("delay threshold", l.DelayThreshold, "only a leaky_bucket has one: must be 0")
	}
	if l.DelayThreshold < 0 || l.DelayThreshold > l.Capacity() || math.IsNaN(l.DelayThreshold) {
		return bad("delay threshold", l.DelayThreshold, fmt.Sprintf("must be between 0 and the burst (%v)", l.Capacity()))
	}
	return nil
}

// LimitError is what Limit.Validate returns for a limit whose name is
// valid but a field is not: which field, the value it has and the rule it
// breaks, so that a configuration loader can point at the field in its own
// file. It wraps ErrInvalidLimit.
type LimitError struct {
	Limit string // the limit's name
	// Field is "algorithm", "quota", "window", "burst" or "delay
	// threshold".
	Field string
	Value any    // the field's value
	Rule  string // what the value must be
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v %q: %s %v: %s", ErrInvalidLimit, e.Limit, e.Field, e.Value, e.Rule)
}

// Unwrap returns ErrInvalidLimit.
func (e *LimitError) Unwrap() error { return ErrInvalidLimit }

func validateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: name is empty: every limit needs a name (it keys the limit's state and names its policy)", ErrInvalidLimit)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: name %q… is %d bytes, more than MaxNameLen (%d)", ErrInvalidLimit, name[:32], len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':' || c == '/') {
			return fmt.Errorf("%w: name %q: byte %d (%q) is not a letter, digit or one of _-.:/", ErrInvalidLimit, truncate(name, 32), i, c)
		}
	}
	return nil
}

// truncate bounds a caller's string quoted in an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
