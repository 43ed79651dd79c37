package pace

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrOpen: the breaker is open; the request was not sent.
var ErrOpen = errors.New("pace: circuit open")

// BreakerOptions configures a Breaker. The zero BreakerOptions opens after 5
// consecutive failures for 10 s, then lets 1 probe through at a time.
type BreakerOptions struct {
	// Failures is how many consecutive failures open the breaker.
	// Default 5; negative is an error.
	Failures int
	// OpenFor is how long the breaker stays open before it lets probes
	// through (half-open). Default 10 s; negative is an error.
	OpenFor time.Duration
	// Probes is, in half-open, both the most requests let through at once and
	// how many consecutive successes close the breaker; any failure reopens
	// it for OpenFor again. Default 1; negative is an error.
	Probes int
}

// BreakerState is the state of a Breaker.
type BreakerState int

// The states of a Breaker.
const (
	BreakerClosed   BreakerState = iota // requests go through; failures are counted
	BreakerOpen                         // requests are refused with ErrOpen
	BreakerHalfOpen                     // up to Probes requests at once test the target
)

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// Result is what one request says about the target's health.
type Result int

// The results of a request. Any other value counts as Ignored.
const (
	Success Result = iota // the target answered well
	Failure               // the target failed: a 5xx, a timeout
	// Ignored says nothing about the target (the request was canceled before
	// an answer, or got a 4xx): it frees a half-open probe slot and changes no
	// count.
	Ignored
)

// BreakerStats are a Breaker's counters.
type BreakerStats struct {
	State    BreakerState // as State reports it
	Opens    uint64       // times the breaker opened
	Rejected uint64       // times Allow refused a request
	// ConsecutiveFailures is the run of failures since the last success; it
	// is 0 again when the breaker closes.
	ConsecutiveFailures int
}

// A Breaker is a circuit breaker for a failing target. Closed, it counts
// consecutive failures and opens when they reach Failures. Open, it refuses
// every request for OpenFor, then turns half-open: it lets up to Probes
// requests through at once, closes after Probes consecutive successes and
// reopens for OpenFor at the first failure.
//
// Each request's Result counts only in the state it was allowed in: the answer
// of a request allowed before the breaker last changed state is ignored.
//
// Time is time.Now, so tests drive a Breaker with testing/synctest. A Breaker
// starts no goroutine. It is safe for concurrent use. Create one with
// NewBreaker.
type Breaker struct {
	failures int
	openFor  time.Duration
	probes   int

	mu        sync.Mutex // guards everything below
	state     BreakerState
	gen       uint64    // counts state changes; a done of an older gen is stale
	until     time.Time // while open: when it turns half-open
	fails     int       // consecutive failures
	inFlight  int       // while half-open: probes not yet done
	successes int       // while half-open: consecutive probe successes
	opens     uint64
	rejected  uint64
}

// NewBreaker validates o and returns a closed Breaker. Errors wrap
// ErrInvalidOptions and name the field.
func NewBreaker(o BreakerOptions) (*Breaker, error) {
	switch {
	case o.Failures < 0:
		return nil, fmt.Errorf("%w: Failures %d is negative", ErrInvalidOptions, o.Failures)
	case o.OpenFor < 0:
		return nil, fmt.Errorf("%w: OpenFor %v is negative", ErrInvalidOptions, o.OpenFor)
	case o.Probes < 0:
		return nil, fmt.Errorf("%w: Probes %d is negative", ErrInvalidOptions, o.Probes)
	}
	b := &Breaker{failures: o.Failures, openFor: o.OpenFor, probes: o.Probes}
	if b.failures == 0 {
		b.failures = 5
	}
	if b.openFor == 0 {
		b.openFor = 10 * time.Second
	}
	if b.probes == 0 {
		b.probes = 1
	}
	return b, nil
}

// Allow asks to send one request. When it may, done must be called exactly
// once with the request's Result; later calls do nothing. When the breaker is
// open, or half-open with every probe slot taken, done is nil and the error
// wraps ErrOpen and says how long until the next probe (rounded up to the
// millisecond).
func (b *Breaker) Allow() (done func(Result), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.advanceLocked(now)
	switch {
	case b.state == BreakerOpen:
		b.rejected++
		wait := b.until.Sub(now)
		wait = (wait + time.Millisecond - 1).Truncate(time.Millisecond)
		return nil, fmt.Errorf("%w: next probe in %v", ErrOpen, wait)
	case b.state == BreakerHalfOpen && b.inFlight >= b.probes:
		b.rejected++
		return nil, fmt.Errorf("%w: half-open, next probe when one of %d in flight is done", ErrOpen, b.inFlight)
	case b.state == BreakerHalfOpen:
		b.inFlight++
	}
	gen, called := b.gen, false
	return func(r Result) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if called {
			return
		}
		called = true
		b.doneLocked(gen, r)
	}, nil
}

// doneLocked records the result of a request allowed in generation gen.
func (b *Breaker) doneLocked(gen uint64, r Result) {
	if gen != b.gen {
		return // stale: allowed in an earlier state
	}
	if b.state == BreakerHalfOpen {
		b.inFlight--
	}
	switch r {
	case Success:
		b.fails = 0
		if b.state == BreakerHalfOpen {
			if b.successes++; b.successes >= b.probes {
				b.setLocked(BreakerClosed)
			}
		}
	case Failure:
		b.fails++
		if b.state == BreakerHalfOpen || b.fails >= b.failures {
			b.opens++
			b.until = time.Now().Add(b.openFor)
			b.setLocked(BreakerOpen)
		}
	}
}

// advanceLocked turns an open breaker half-open once OpenFor has passed.
func (b *Breaker) advanceLocked(now time.Time) {
	if b.state == BreakerOpen && !now.Before(b.until) {
		b.setLocked(BreakerHalfOpen)
	}
}

func (b *Breaker) setLocked(s BreakerState) {
	b.state = s
	b.gen++
	b.inFlight, b.successes = 0, 0
	if s == BreakerClosed {
		b.fails = 0
	}
}

// State returns the breaker's state now: an open breaker whose OpenFor has
// passed is half-open.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(time.Now())
	return b.state
}

// Stats returns the breaker's counters now.
func (b *Breaker) Stats() BreakerStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(time.Now())
	return BreakerStats{State: b.state, Opens: b.opens, Rejected: b.rejected, ConsecutiveFailures: b.fails}
}
