package ratelimitheader

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Errors. Each returned error wraps one of these and says which field or
// value is at fault.
var (
	// ErrInvalidValue is wrapped by the errors of the formatting functions
	// and Set: a value cannot be written (a name that is not printable
	// ASCII, a negative quota, ...).
	ErrInvalidValue = errors.New("ratelimitheader: invalid value")
	// ErrMalformed is wrapped by the errors of the parsers: a field is not a
	// valid Structured Field List, or a Retry-After is neither delay-seconds
	// nor an HTTP-date.
	ErrMalformed = errors.New("ratelimitheader: malformed field")
	// ErrTooLarge is wrapped by the errors of the parsers: the values of a
	// field are longer than MaxFieldSize in total.
	ErrTooLarge = errors.New("ratelimitheader: field too large")
)

const (
	// MaxFieldSize is the most bytes, all lines together, that a parser
	// reads of one field; a longer field is refused with ErrTooLarge.
	MaxFieldSize = 16 << 10
	// MaxMembers is the most policies or limits a parser returns; the
	// members after the first MaxMembers kept are dropped.
	MaxMembers = 64
	// NoReset is the Reset of a Limit or Legacy value whose reset (effective
	// window) is absent. Any negative Reset means the same.
	NoReset time.Duration = -1

	// maxInteger is the largest Integer of RFC 9651 (15 digits).
	maxInteger = 999_999_999_999_999
	// maxSeconds is the largest whole number of seconds a time.Duration
	// holds; larger values read from the wire are clamped to it.
	maxSeconds = math.MaxInt64 / int64(time.Second)
)

// Version selects the wire format of the RateLimit fields that Set writes.
// The zero value is Draft11.
type Version int

const (
	// Draft11 writes RateLimit-Policy and RateLimit as Structured Field Lists
	// of named policies (draft-ietf-httpapi-ratelimit-headers-11). The
	// default.
	Draft11 Version = iota
	// Draft06 writes the three-field form of draft -06, still widely
	// deployed: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset,
	// each one Integer about the most restrictive limit, and RateLimit-Policy
	// as a List of "quota;w=window" Items without names.
	Draft06
)

// String returns "draft-11", "draft-06" or "Version(n)".
func (v Version) String() string {
	switch v {
	case Draft11:
		return "draft-11"
	case Draft06:
		return "draft-06"
	}
	return "Version(" + strconv.Itoa(int(v)) + ")"
}

// Policy is one member of RateLimit-Policy: a quota policy of the server.
type Policy struct {
	// Name identifies the policy; a Limit with the same Name reports on it.
	// Printable ASCII (0x20–0x7E), possibly empty.
	Name string
	// Quota is the number of quota units the policy allows per Window (q).
	// 0 to 999,999,999,999,999.
	Quota int64
	// Unit is the quota unit (qu): "" means the default, "requests", and is
	// not written; the draft also defines "content-bytes" and
	// "concurrent-requests". Printable ASCII. Written as given, so
	// "requests" is written when set explicitly.
	Unit string
	// Window is the policy's time window (w), written in whole seconds
	// rounded up. Zero: absent. Never negative.
	Window time.Duration
	// PartitionKey identifies the partition of the server's capacity that
	// the policy applies to (pk). Nil: absent; a non-nil empty slice is
	// written as an empty Byte Sequence.
	PartitionKey []byte
}

// Limit is one member of RateLimit: the current service limit under a
// policy.
type Limit struct {
	// Name is the policy's name. Printable ASCII (0x20–0x7E), possibly empty.
	Name string
	// Remaining is the available quota under the policy (r), in its quota
	// units. A negative value is written as 0, one above 999,999,999,999,999
	// as that.
	Remaining int64
	// Reset is the effective window (t): the time within which the client
	// may use no more than Remaining (draft -10 and earlier: the time until
	// the quota resets). Written in whole seconds rounded up, so a positive
	// Reset is never written as 0. Negative (NoReset): absent. Note that the
	// zero Limit has Reset 0, written as t=0.
	Reset time.Duration
	// PartitionKey is as in Policy (pk). Nil: absent.
	PartitionKey []byte
}

// Set writes into h the rate-limit fields of version v for the policies ps
// and limits ls, replacing any values those fields had; it leaves other
// fields, those of the other version among them, alone. A field with
// nothing to say is not written (deleted, if present). Nothing is written
// when an error is returned: Set checks every value first, for either
// version, as FormatPolicies and FormatLimits do.
//
// Draft11 writes RateLimit-Policy (if ps is not empty) and RateLimit (if ls
// is not empty), as FormatPolicies and FormatLimits.
//
// Draft06 writes, for the most restrictive limit of ls — the one with the
// least Remaining; on a tie the one with the longest Reset; then the first —
// RateLimit-Remaining, RateLimit-Reset (unless its Reset is absent) and
// RateLimit-Limit: the Quota of the policy of ps with the limit's Name
// (omitted if there is none). RateLimit-Policy lists "quota;w=seconds" for
// every policy of ps that has a Window (-06 requires w), in order; names,
// units and partition keys do not exist in -06 and are not written.
//
// h must not be nil.
func Set(h http.Header, v Version, ps []Policy, ls []Limit) error {
	switch v {
	case Draft11:
		policy, err := FormatPolicies(ps)
		if err != nil {
			return err
		}
		limit, err := FormatLimits(ls)
		if err != nil {
			return err
		}
		setOrDel(h, "Ratelimit-Policy", policy)
		setOrDel(h, "Ratelimit", limit)
		return nil
	case Draft06:
		for i := range ps {
			if err := checkPolicy(ps, i); err != nil {
				return err
			}
		}
		for i := range ls {
			if err := checkLimit(ls, i); err != nil {
				return err
			}
		}
		setDraft06(h, ps, ls)
		return nil
	}
	return fmt.Errorf("%w: unknown Version %d (want Draft11 or Draft06)", ErrInvalidValue, int(v))
}

// setOrDel sets the field name, which must be in canonical form (no
// allocation to canonicalise it), to value, or deletes it if value is "".
func setOrDel(h http.Header, name, value string) {
	if value == "" {
		delete(h, name)
		return
	}
	h[name] = []string{value}
}

// setDraft06 writes the -06 fields; ps and ls have been checked.
func setDraft06(h http.Header, ps []Policy, ls []Limit) {
	var stack [128]byte
	buf := stack[:0]
	for _, p := range ps {
		if p.Window <= 0 {
			continue
		}
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = strconv.AppendInt(buf, p.Quota, 10)
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, ceilSeconds(p.Window), 10)
	}
	setOrDel(h, "Ratelimit-Policy", string(buf))

	limit, remaining, reset := "", "", ""
	if len(ls) > 0 {
		pick := 0
		for i, l := range ls[1:] {
			p := ls[pick]
			r, pr := clampRemaining(l.Remaining), clampRemaining(p.Remaining)
			if r < pr || r == pr && l.Reset > p.Reset {
				pick = i + 1
			}
		}
		l := ls[pick]
		for _, p := range ps {
			if p.Name == l.Name {
				limit = strconv.FormatInt(p.Quota, 10)
				break
			}
		}
		remaining = strconv.FormatInt(clampRemaining(l.Remaining), 10)
		if l.Reset >= 0 {
			reset = strconv.FormatInt(ceilSeconds(l.Reset), 10)
		}
	}
	setOrDel(h, "Ratelimit-Limit", limit)
	setOrDel(h, "Ratelimit-Remaining", remaining)
	setOrDel(h, "Ratelimit-Reset", reset)
}

// ceilSeconds is d in whole seconds, rounded up; d must not be negative.
func ceilSeconds(d time.Duration) int64 {
	s := d / time.Second
	if d%time.Second != 0 {
		s++
	}
	return int64(s)
}

// clampRemaining is r within [0, maxInteger].
func clampRemaining(r int64) int64 {
	return min(max(r, 0), maxInteger)
}
