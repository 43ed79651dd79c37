package sluice

import (
	"errors"
	"fmt"
	"strconv"
)

// FailurePolicy is what a decision does when its limiter cannot decide: a
// shared store that is unreachable (redisstore answers under the limit's
// policy), or a limiter that fails with an error (the middleware's rule
// answers under its own). It is spelled the same in every configuration
// (fail_open, fail_closed, fail_local), on every flag and in every metric.
type FailurePolicy uint8

const (
	// FailOpen allows the request (the default: availability first).
	FailOpen FailurePolicy = iota
	// FailClosed refuses it: the request is not served (503 over HTTP,
	// UNAVAILABLE over gRPC, OVER_LIMIT to Envoy), with a retry hint of one
	// second where the transport has one.
	FailClosed
	// FailLocal decides it in this process, at the limit divided among the
	// fleet's instances (redisstore.Options.Instances). Only a store that
	// has a local fallback accepts it; a middleware's rule refuses it.
	FailLocal
	numFailurePolicies
)

var failurePolicyNames = [numFailurePolicies]string{
	FailOpen:   "fail_open",
	FailClosed: "fail_closed",
	FailLocal:  "fail_local",
}

// ErrUnknownFailurePolicy is wrapped by the error of a name that is not a
// FailurePolicy.
var ErrUnknownFailurePolicy = errors.New("unknown failure policy")

// String returns "fail_open", "fail_closed" or "fail_local".
func (p FailurePolicy) String() string {
	if p < numFailurePolicies {
		return failurePolicyNames[p]
	}
	return "failure_policy(" + strconv.Itoa(int(p)) + ")"
}

// Valid reports whether p is one of the three policies.
func (p FailurePolicy) Valid() bool { return p < numFailurePolicies }

// MarshalText returns the policy's name; an unknown policy is an error.
func (p FailurePolicy) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("%w %d", ErrUnknownFailurePolicy, uint8(p))
	}
	return []byte(failurePolicyNames[p]), nil
}

// UnmarshalText parses a policy's name as String returns it; anything else
// is an error that lists the three names.
func (p *FailurePolicy) UnmarshalText(text []byte) error {
	v, err := ParseFailurePolicy(string(text))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParseFailurePolicy parses "fail_open", "fail_closed" or "fail_local".
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	for i, name := range failurePolicyNames {
		if s == name {
			return FailurePolicy(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q: want fail_open, fail_closed or fail_local", ErrUnknownFailurePolicy, truncate(s, 32))
}
