package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/egress"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/queue"
)

// Options configure a Relay.
type Options struct {
	// Targets are the rate-limited services work is delivered to. At least
	// one; names differ.
	Targets []Target
	// Queues feed the targets. At least one; names differ; each names
	// one of Targets.
	Queues []Queue
	// Open opens the durable queue behind the relay queue name (a bbolt
	// file, a JetStream queue of that name). Required. The relay closes
	// what Open returned when it is closed.
	Open func(ctx context.Context, name string) (queue.Queue, error)
	// StateFile keeps what the relay learns and is told across restarts:
	// each target's learned rate, the paused queues, the limits set
	// through SetLimits. Empty: nothing is kept.
	StateFile string
	// Logger receives the relay's events; default slog.Default(). Failed
	// deliveries and 429s are summarised at most once per target per
	// LogEvery, never a line each.
	Logger *slog.Logger
	// LogEvery is the interval of those summaries; default 1 minute.
	LogEvery time.Duration
	// Transport, if set, sends every delivery instead of the one built
	// from each target's Allow (egress.Policy.Transport). For tests that
	// need to observe the wire; the egress checks then rest on it.
	Transport http.RoundTripper
}

// Target is a rate-limited service: one origin, its limits and how the
// relay treats its answers.
type Target struct {
	// Name identifies the target in the API, the metrics and the logs:
	// 1 to 64 letters, digits, '-' and '_'. Required.
	Name string
	// Origin is where the target lives: "https://api.example.com" (scheme,
	// host, optional port; nothing else). Required.
	Origin string
	// Limits are the target's known limits (a per-second and a per-day
	// quota, say), all respected by every release. None: the relay learns
	// the target's limit from its answers (RateLimit-Policy, RateLimit,
	// X-RateLimit-*, 429s), starting slowly. Both may hold: the learned
	// limit never raises a configured one.
	Limits []sluice.Limit
	// Slice is how finely work is released (pace.Options.Slice); default
	// pace.DefaultSlice.
	Slice time.Duration
	// MaxInFlight caps the deliveries in flight at once; default 64.
	MaxInFlight int
	// Timeout bounds one delivery, from dial to the last byte of the
	// answer kept; default 30 s.
	Timeout time.Duration
	// Retry is how failed deliveries are retried.
	Retry Retry
	// Breaker stops deliveries to a target that keeps failing.
	Breaker pace.BreakerOptions
	// Allow lists the address prefixes, refused by default (loopback,
	// private, link-local …), this target may be reached at; see package
	// egress. A target on the same host needs 127.0.0.0/8 or ::1/128.
	Allow []netip.Prefix
	// KeepHeaders are the answer's header fields kept with a succeeded
	// task (its result), besides Content-Type and Location, which always
	// are.
	KeepHeaders []string
	// KeepBody is how much of a succeeded answer's body is kept, in
	// bytes; default 16 KiB, at most the backend's result bound less
	// 4 KiB. Negative keeps none.
	KeepBody int
	// Budget, when set, is this process's share of a limit that several
	// relays spend together (HolderBudget over a lease.Holder): every task
	// waits for it after the Pacer's grant, so the fleet as a whole keeps
	// to the limit. Limits should then hold the fleet's limit (the Pacer
	// spaces the releases and learns from answers; the Budget caps the
	// share). Nil: this relay alone spends the target's limits.
	Budget Budget
}

// Retry is a target's retry policy for failed deliveries (5xx, timeouts,
// refused connections). Throttled answers (429, or 503 with Retry-After)
// are retried at the instant the target names and never spend an attempt.
type Retry struct {
	// MaxAttempts is how many deliveries of a task may fail before it is
	// dead-lettered; default 10. A task may ask for fewer or more, up to
	// the backend's bound.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the full-jitter backoff: the n-th
	// retry waits a random duration in [0, min(MaxDelay, BaseDelay×2^(n−1))].
	// Defaults 1 s and 5 min.
	BaseDelay, MaxDelay time.Duration
	// MaxRetryAfter caps the wait a Retry-After (or a RateLimit reset)
	// imposes; default 10 min.
	MaxRetryAfter time.Duration
	// RetryStatuses are the 4xx statuses retried like a 5xx; default 408
	// and 425. Every other 4xx (and a redirect that leaves the origin)
	// dead-letters the task at once: sending it again would get the same
	// answer.
	RetryStatuses []int
}

// Queue feeds one target.
type Queue struct {
	// Name identifies the queue in the API (/v1/queues/{name}), the
	// metrics and the task IDs: 1 to 64 letters, digits, '-' and '_'.
	// Required.
	Name string
	// Target is the name of the target the queue delivers to. Required.
	Target string
	// Weight is the queue's share of its target's limit when several
	// queues have work: a queue of weight 4 gets four times the releases
	// of a queue of weight 1. Default 1.
	Weight float64
	// Reserved is the share of the target's limit (0 to 1) the queue gets
	// first whenever it has work; what it does not use goes to the other
	// queues and comes back the moment it has work again. The reserved
	// shares of one target sum to at most 1. Default 0.
	Reserved float64
	// MaxBody bounds a request's body, in bytes; default, and at most,
	// what fits the backend's payload bound with the path and the headers
	// (the body is stored in base64): 744 KiB under a 1 MiB bound.
	MaxBody int
}

// Defaults of Options.
const (
	DefaultMaxInFlight   = 64
	DefaultTimeout       = 30 * time.Second
	DefaultMaxAttempts   = 10
	DefaultBaseDelay     = time.Second
	DefaultMaxDelay      = 5 * time.Minute
	DefaultMaxRetryAfter = 10 * time.Minute
	DefaultKeepBody      = 16 << 10
	DefaultLogEvery      = time.Minute
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ErrOptions is wrapped by every error of New, Validate and Reload about
// their Options.
var ErrOptions = errors.New("relay: invalid options")

// OptionsError is a refused Options: which target or queue (by its index
// in Options, -1 for the whole) and why.
type OptionsError struct {
	// Field is "targets", "queues", or "" for the whole.
	Field string
	Index int
	// Reason says what is wrong, naming the target or queue.
	Reason string
}

func (e *OptionsError) Error() string { return ErrOptions.Error() + ": " + e.Reason }

// Unwrap returns ErrOptions.
func (e *OptionsError) Unwrap() error { return ErrOptions }

func optionsError(format string, args ...any) error {
	return &OptionsError{Index: -1, Reason: fmt.Sprintf(format, args...)}
}

// at places an OptionsError at an element of Options.
func at(err error, field string, i int) error {
	var oe *OptionsError
	if errors.As(err, &oe) && oe.Field == "" {
		oe.Field, oe.Index = field, i
	}
	return err
}

// Validate checks o as New would, without opening anything: every target
// and queue, the names, the references, the reserved shares. Its errors
// are *OptionsError.
func (o Options) Validate() error {
	if len(o.Targets) == 0 || len(o.Queues) == 0 {
		return optionsError("at least one target and one queue are required")
	}
	targets := map[string]bool{}
	for i, t := range o.Targets {
		if _, _, err := checkTarget(t); err != nil {
			return at(err, "targets", i)
		}
		if targets[t.Name] {
			return at(optionsError("two targets named %q", t.Name), "targets", i)
		}
		targets[t.Name] = true
	}
	queues := map[string]bool{}
	reserved := map[string]float64{}
	for i, q := range o.Queues {
		q, err := checkQueue(q)
		if err != nil {
			return at(err, "queues", i)
		}
		switch {
		case queues[q.Name]:
			return at(optionsError("two queues named %q", q.Name), "queues", i)
		case !targets[q.Target]:
			return at(optionsError("queue %s: no target is named %q", q.Name, q.Target), "queues", i)
		}
		queues[q.Name] = true
		reserved[q.Target] += q.Reserved
		if reserved[q.Target] > 1+1e-9 {
			return at(optionsError("target %s: the reserved shares of its queues sum to %.3g, more than 1", q.Target, reserved[q.Target]), "queues", i)
		}
	}
	return nil
}

// checkTarget validates t and applies its defaults.
func checkTarget(t Target) (Target, egress.Origin, error) {
	if !nameRE.MatchString(t.Name) {
		return t, egress.Origin{}, optionsError("target %q: a name is 1 to 64 letters, digits, '-' and '_'", t.Name)
	}
	origin, err := egress.ParseOrigin(t.Origin)
	if err != nil {
		return t, egress.Origin{}, optionsError("target %s: origin: %v", t.Name, err)
	}
	if addr, err := netip.ParseAddr(origin.Host); err == nil {
		if err := (egress.Policy{Allow: t.Allow}).CheckAddr(addr); err != nil {
			return t, origin, optionsError("target %s: origin %s: %v (allow its prefix in the target's allow: if it is meant)", t.Name, origin, err)
		}
	}
	seen := map[string]bool{}
	for i, l := range t.Limits {
		if err := l.Validate(); err != nil {
			return t, origin, optionsError("target %s: limit %d: %v", t.Name, i, err)
		}
		if seen[l.Name] {
			return t, origin, optionsError("target %s: two limits named %q", t.Name, l.Name)
		}
		seen[l.Name] = true
	}
	if t.Slice < 0 {
		return t, origin, optionsError("target %s: slice %v is negative", t.Name, t.Slice)
	}
	if t.Slice == 0 {
		t.Slice = pace.DefaultSlice
	}
	switch {
	case t.MaxInFlight < 0:
		return t, origin, optionsError("target %s: max_in_flight %d is negative", t.Name, t.MaxInFlight)
	case t.MaxInFlight == 0:
		t.MaxInFlight = DefaultMaxInFlight
	}
	switch {
	case t.Timeout < 0:
		return t, origin, optionsError("target %s: timeout %v is negative", t.Name, t.Timeout)
	case t.Timeout == 0:
		t.Timeout = DefaultTimeout
	}
	r := &t.Retry
	if r.MaxAttempts < 0 || r.MaxAttempts > 1000 {
		return t, origin, optionsError("target %s: retry max_attempts %d: from 1 to 1000", t.Name, r.MaxAttempts)
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.BaseDelay < 0 || r.MaxDelay < 0 || r.MaxRetryAfter < 0 {
		return t, origin, optionsError("target %s: retry delays must not be negative", t.Name)
	}
	if r.BaseDelay == 0 {
		r.BaseDelay = DefaultBaseDelay
	}
	if r.MaxDelay == 0 {
		r.MaxDelay = DefaultMaxDelay
	}
	if r.MaxDelay < r.BaseDelay {
		return t, origin, optionsError("target %s: retry max_delay %v is shorter than base_delay %v", t.Name, r.MaxDelay, r.BaseDelay)
	}
	if r.MaxRetryAfter == 0 {
		r.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if r.RetryStatuses == nil {
		r.RetryStatuses = []int{http.StatusRequestTimeout, http.StatusTooEarly}
	}
	for _, s := range r.RetryStatuses {
		if s < 400 || s > 499 || s == http.StatusTooManyRequests {
			return t, origin, optionsError("target %s: retry_statuses: %d is not a 4xx other than 429 (5xx are always retried, 429 always waited out)", t.Name, s)
		}
	}
	for _, h := range t.KeepHeaders {
		if err := egress.CheckHeader(h); err != nil && !errors.Is(err, egress.ErrRefused) || h == "" {
			return t, origin, optionsError("target %s: keep_headers: %q is not a header name", t.Name, h)
		}
	}
	if t.KeepBody == 0 {
		t.KeepBody = DefaultKeepBody
	}
	// What the target's Pacer will be built from (a LeakyBucket or a
	// Concurrency limit is refused there): check, New and Reload agree.
	if _, err := pace.New(pace.Options{Limits: t.Limits, Slice: t.Slice, MaxInFlight: t.MaxInFlight}); err != nil {
		return t, origin, optionsError("target %s: %s", t.Name, strings.TrimPrefix(err.Error(), "pace: invalid options: "))
	}
	if _, err := pace.NewBreaker(t.Breaker); err != nil {
		return t, origin, optionsError("target %s: breaker: %v", t.Name, err)
	}
	return t, origin, nil
}

// checkQueue validates q and applies its defaults.
func checkQueue(q Queue) (Queue, error) {
	if !nameRE.MatchString(q.Name) {
		return q, optionsError("queue %q: a name is 1 to 64 letters, digits, '-' and '_'", q.Name)
	}
	if q.Target == "" {
		return q, optionsError("queue %s: target is required", q.Name)
	}
	if q.Weight < 0 || q.Weight != q.Weight || q.Weight > 1e6 {
		return q, optionsError("queue %s: weight %v: from 0 (meaning 1) to 1e6", q.Name, q.Weight)
	}
	if q.Weight == 0 {
		q.Weight = 1
	}
	if q.Reserved < 0 || q.Reserved > 1 || q.Reserved != q.Reserved {
		return q, optionsError("queue %s: reserved %v: a share from 0 to 1", q.Name, q.Reserved)
	}
	if q.MaxBody < 0 {
		return q, optionsError("queue %s: max_body %d is negative", q.Name, q.MaxBody)
	}
	return q, nil
}
