// Package enforce holds what the enforcement middleware of every transport
// (httplimit for HTTP, grpclimit for gRPC) shares: the outcome of a
// request's rule, the policy on a limiter that fails, and the Observer that
// metrics and the heaviest-tenants view listen through.
package enforce

import (
	"strconv"
	"time"
)

// Outcome is what a rule decided for one request.
type Outcome uint8

const (
	// Allowed: every limit of the rule allowed the request.
	Allowed Outcome = iota
	// Rejected: a limit rejected it; the client was told to retry later
	// (or, when its cost can never fit, not to).
	Rejected
	// ShadowRejected: a limit rejected it, but the rule is in shadow mode:
	// the request went through and only this outcome records it.
	ShadowRejected
	// Failed: the limiter returned an error (not a rejection); the rule's
	// OnError policy let the request through or refused it.
	Failed
	// Invalid: the request's cost could not be taken (negative, not a
	// number, finer than a limit's resolution, a malformed declaration):
	// the request was refused as the client's error (400,
	// INVALID_ARGUMENT), nothing spent.
	Invalid
)

// String returns "allowed", "rejected", "shadow_rejected", "failed" or
// "invalid".
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Rejected:
		return "rejected"
	case ShadowRejected:
		return "shadow_rejected"
	case Failed:
		return "failed"
	case Invalid:
		return "invalid"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Outcomes lists every Outcome, for metrics that pre-create their series.
var Outcomes = []Outcome{Allowed, Rejected, ShadowRejected, Failed, Invalid}

// OnError is what a rule does when its limiter fails with an error — a
// reply it cannot read, a caller's context ended — rather than a decision.
// (A store's own outage policy, redisstore.Policy, answers first: only what
// it returns as an error reaches OnError.)
type OnError uint8

const (
	// FailOpen lets the request through (the default: availability first).
	FailOpen OnError = iota
	// FailClosed refuses it: 503 Service Unavailable over HTTP,
	// UNAVAILABLE over gRPC, with a retry hint of one second.
	FailClosed
)

// String returns "fail_open" or "fail_closed".
func (p OnError) String() string {
	if p == FailClosed {
		return "fail_closed"
	}
	return "fail_open"
}

// Event is one decision, as an Observer hears it.
type Event struct {
	Rule    string        // the rule's name
	Outcome Outcome       //
	Latency time.Duration // the limiter call's
	// Tenant labels the request's first key for the heaviest-tenants view:
	// a per-process pseudonym (a keyed hash, never the raw key) unless the
	// transport's TenantLabel option supplies a readable one.
	Tenant string
	Cost   float64 // the first limit's cost
	Err    error   // the limiter's error when Outcome is Failed
}

// Observer hears every decision. It is called on the request path, so it
// must be fast and safe for concurrent use.
type Observer interface {
	Observe(Event)
}
