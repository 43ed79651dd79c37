// Package ratelimitheader formats and parses the HTTP fields that tell a
// client about rate limits: RateLimit-Policy and RateLimit, Retry-After, and
// the X-RateLimit-* fields many services still send.
//
// # Wire format
//
// The RateLimit fields follow draft-ietf-httpapi-ratelimit-headers-11
// (May 2026; the wire format is the same since -09, and -08 differs in
// allowing w=0). Both are Structured Field Lists (RFC 9651) of Items whose
// bare value is a String naming a policy:
//
//	RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;qu="requests";w=86400
//	RateLimit: "burst";r=12;t=40;pk=:dXNlci00Mg==:
//
// A policy (Policy) has a quota q (Integer, required), a quota unit qu
// (String; "requests" when absent, or "content-bytes",
// "concurrent-requests"), a window w (Integer seconds, greater than zero) and
// a partition key pk (Byte Sequence). A service limit (Limit) has the
// available quota r (Integer, required), the effective window t (Integer
// seconds: the time within which no more than r may be used) and pk. Draft
// -11 renamed r from "remaining" to "available quota" and t from "reset" to
// "effective window"; the wire format did not change, and Limit keeps the
// older names Remaining and Reset.
//
// Set can also write the three-field form of draft -06 (Draft06), which
// many servers and clients still use:
//
//	RateLimit-Limit: 100
//	RateLimit-Remaining: 12
//	RateLimit-Reset: 40
//	RateLimit-Policy: 100;w=60, 1000;w=86400
//
// # Units and rounding
//
// Every duration on the wire is a whole number of seconds. Formatting
// rounds up (the ceiling): a reset 1 ms away is written as 1, never as 0,
// so a client that waits the written time never comes back early.
// Retry-After is at least 1. A server reports a sluice.Decision with
// LimitOf and ResetOf, which every transport of sluice uses: t is when the
// key is full again, or, for a rejection, the wait Retry-After says (so
// Retry-After is never earlier than a rejecting limit's t), and absent for
// a cost that can never fit. AppendLimits and AppendPolicies write into a
// caller's buffer; LimitField writes the RateLimit field of a fixed list
// of policies (a middleware's rule) without allocating. Counts are int64; a negative Remaining is
// written as 0, and an integer above RFC 9651's largest (999,999,999,999,999)
// is clamped to it for Remaining and refused for Quota. Names and units
// must be printable ASCII (a Structured Field String); anything else is
// refused with an error wrapping ErrInvalidValue that names the field.
//
// # Leniency
//
// The parsers are for clients reading what servers send, so they accept
// what they can and skip what they cannot, as the draft asks ("Malformed
// RateLimit header fields MUST be ignored") and RFC 9651 allows:
//
//   - several field lines are one List; blank lines are ignored;
//   - unknown parameters are ignored;
//   - a member without its required parameter (q or r), with a parameter
//     of the wrong type, with a negative count or duration, with a zero
//     window or that is an Inner List is skipped, and the others are kept;
//   - a policy name may be a Token as well as a String (the working group's
//     editor's copies have used Tokens), and so may a quota unit;
//   - a partition key in non-canonical base64 (missing "=" padding,
//     non-zero pad bits) is accepted, as RFC 9651 §4.2.7 recommends;
//   - of members with the same name the first is kept;
//   - integers too large for a time.Duration of whole seconds are clamped to
//     the largest one.
//
// An error (wrapping ErrMalformed) is returned only when the field as a
// whole is not a valid Structured Field List; the client should then ignore
// the field. Work is bounded: values longer than MaxFieldSize bytes in
// total are refused (ErrTooLarge) and at most MaxMembers members are kept.
// No input makes a parser panic.
//
// Every function is safe for concurrent use.
package ratelimitheader
