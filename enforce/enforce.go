// Package enforce is the core that the enforcement middleware of every
// transport (httplimit for HTTP, grpclimit for gRPC) decides with: a rule
// compiled once (its limits, static costs, mode, failure policy and shadow
// flag, checked; its RateLimit-Policy field formatted), the keys a client
// is counted under (built the same way by every transport, so that one
// limit counts a client once across HTTP and gRPC), one decision per
// request classified into an Outcome, the concurrency slots given back when
// a request does not run or has finished, and the Observer that metrics
// and the heaviest-tenants view listen through.
//
// A transport reads its request (headers, metadata, peer), fills a Request
// with the key and cost of each of the rule's quotas, calls
// CompiledRule.Decide, and writes what the Verdict says (a 429 and its
// fields, RESOURCE_EXHAUSTED and its metadata); the rest is here.
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
	// OnError policy (sluice.FailOpen or sluice.FailClosed) let the request
	// through or refused it.
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
