// Package sluice is the contract of the sluice rate limiter: the limits a
// request is measured against, the decision it gets, and the Limiter every
// store implements.
//
// A Limit says how much cost a key may spend: a quota per window, a burst,
// and the algorithm that enforces them. A Limiter decides, for a key and a
// cost, whether the cost may be spent now; the answer is a Decision value
// (being limited is not an error). Several limits can apply to one request
// (per IP, per user, global): AllowAll evaluates them in their declared
// order as one decision.
//
// Stores: memstore (in process, the embedded default) and, for a fleet,
// redisstore. limittest is the conformance suite every store passes.
//
// This package imports only the standard library.
package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limiter decides whether work may spend a limited resource now.
//
// Implementations are safe for concurrent use. A decision on a key is atomic:
// two callers racing for the last tokens of a key never both get them.
type Limiter interface {
	// Allow decides whether cost may be spent on key under limit now and, if
	// it may, spends it.
	//
	// A rejection is a Decision with Allowed false, not an error. Errors
	// report bad input (wrapping ErrInvalidLimit, ErrInvalidCost,
	// ErrInvalidKey) or a store failure. When cost can never fit (it exceeds
	// the limit's capacity), Allow returns a rejected Decision whose
	// RetryAfter is Never together with an error wrapping
	// ErrCostExceedsLimit, so a caller that only checks the error still
	// refuses the request.
	Allow(ctx context.Context, key string, limit Limit, cost float64) (Decision, error)

	// AllowAll decides several requests (limits) as one, in their declared
	// order, under mode. The returned Decision is the combined one: allowed
	// only if every request is allowed; when rejected it is the rejecting
	// decision with the longest RetryAfter (the first one on a tie); when
	// allowed it is the decision with the least Remaining (the first on a tie)
	// with Delay the longest of all delays.
	//
	// If each is not nil it must have len(reqs) elements; each[i] receives
	// the decision of reqs[i]. A Concurrency limit's Ticket is only reported
	// there, so each must not be nil when reqs hold a Concurrency limit.
	// Two requests with the same limit name and key are an error.
	AllowAll(ctx context.Context, reqs []Request, mode Mode, each []Decision) (Decision, error)

	// Release gives back the slots that an allowed decision on a Concurrency
	// limit holds, identified by the decision's Ticket. Releasing a ticket
	// that is not held (already released, or expired after the limit's
	// Window) does nothing and returns nil.
	Release(ctx context.Context, key string, limit Limit, ticket uint64) error
}

// Charger is a Limiter that can also charge a cost known only after the
// work ran — the tokens an answer used, the bytes it sent. Charge spends
// cost on key under limit whatever the limit holds, running the key into
// debt, at most one capacity below empty (the excess is forgiven); later
// requests wait the debt out. Its Decision is allowed, with Remaining 0
// while in debt and ResetAfter the time until the key is full again. A
// cost above the capacity is charged too (up to the debt's floor), never
// refused.
//
// TokenBucket, GCRA, FixedWindow and SlidingWindow limits can be charged.
// The others, and limits too large to carry a debt in exact arithmetic,
// are refused with an error wrapping ErrInvalidRequest, and nothing is
// spent. Bad input is refused as by Allow.
type Charger interface {
	Limiter
	Charge(ctx context.Context, key string, limit Limit, cost float64) (Decision, error)
}

// Inspector is a Limiter an operator can look into (memstore and
// redisstore are). Peek reports a key's state under a limit as it is —
// what remains and when it is full again — spending nothing; Reset forgets
// it, so that the key starts full. Bad input is refused as by Allow.
type Inspector interface {
	Limiter
	Peek(ctx context.Context, key string, limit Limit) (State, error)
	Reset(ctx context.Context, key string, limit Limit) error
}

// State is a key's state under a limit, as Peek reports it.
type State struct {
	// Remaining is what a request could spend now (for Concurrency: the
	// free slots); the limit's capacity for a key never seen or full.
	Remaining float64
	// ResetAfter is how long until the key is full again; 0 when it is.
	ResetAfter time.Duration
}

// Request is one limit that applies to a request: key spends cost under Limit.
type Request struct {
	Key   string
	Limit Limit
	Cost  float64
}

// Mode says what several limits of one request consume when some reject it.
type Mode uint8

const (
	// AllOrNothing, the default, consumes nothing unless every limit allows
	// the request.
	AllOrNothing Mode = iota
	// RejectionsCount charges every limit that allows its part even when
	// another limit rejects the request, so a client that keeps hammering a
	// rejecting limit also drains the others. For abusive clients.
	RejectionsCount
)

// String returns "all_or_nothing" or "rejections_count".
func (m Mode) String() string {
	switch m {
	case AllOrNothing:
		return "all_or_nothing"
	case RejectionsCount:
		return "rejections_count"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Errors reported by every Limiter. They are wrapped with details (which
// field, which value, why); test for them with errors.Is.
var (
	// ErrInvalidLimit: a Limit fails Validate.
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrInvalidCost: a cost is not a positive finite number of the limit's
	// resolution (one millionth; whole units for SlidingLog and Concurrency).
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrInvalidKey: a key is empty or longer than MaxKeyLen.
	ErrInvalidKey = errors.New("sluice: invalid key")
	// ErrInvalidRequest: a multi-limit request is malformed (an unknown Mode,
	// a duplicated limit and key, an each slice of the wrong length).
	ErrInvalidRequest = errors.New("sluice: invalid request")
	// ErrCostExceedsLimit: the cost is larger than the limit's capacity, so
	// it would never be allowed; the Decision says RetryAfter == Never.
	ErrCostExceedsLimit = errors.New("sluice: cost exceeds the limit's capacity")
)

// ValidateRequests checks what every Limiter checks of an AllowAll call
// before it looks at any limit or state: a known mode, at least one
// request, each nil or of len(reqs), and each present when a request is a
// Concurrency limit (whose ticket is only reported there). Limits, keys,
// costs and duplicates are the store's to check.
func ValidateRequests(reqs []Request, mode Mode, each []Decision) error {
	switch {
	case mode != AllOrNothing && mode != RejectionsCount:
		return fmt.Errorf("%w: unknown mode %d", ErrInvalidRequest, mode)
	case each != nil && len(each) != len(reqs):
		return fmt.Errorf("%w: %d decisions for %d requests", ErrInvalidRequest, len(each), len(reqs))
	case len(reqs) == 0:
		return fmt.Errorf("%w: no requests", ErrInvalidRequest)
	}
	if each == nil {
		for i, q := range reqs {
			if q.Limit.Algorithm == Concurrency {
				return fmt.Errorf("%w: request %d is a concurrency limit: pass each to receive its ticket", ErrInvalidRequest, i)
			}
		}
	}
	return nil
}

// ValidateRelease checks that limit, whose slots a Release frees, is a
// Concurrency limit.
func ValidateRelease(limit Limit) error {
	if limit.Algorithm != Concurrency {
		return fmt.Errorf("%w: Release is for concurrency limits, %q is a %v", ErrInvalidRequest, limit.Name, limit.Algorithm)
	}
	return nil
}

// MaxKeyLen is the longest key, in bytes, a Limiter accepts.
const MaxKeyLen = 1024

// ValidateKey reports whether key is acceptable to a Limiter: not empty and
// at most MaxKeyLen bytes. The error does not repeat the key, which may be an
// identity.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: the key is %d bytes, more than MaxKeyLen (%d)", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}
