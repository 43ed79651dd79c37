package ratelimitheader

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"time"
)

// FormatPolicies returns the value of a RateLimit-Policy field (draft -11)
// listing ps in order, e.g.
//
//	"burst";q=100;w=60, "daily";q=1000;qu="requests";w=86400;pk=:dXNlcg==:
//
// Parameters come in the order q, qu, w, pk; qu, w and pk only when set.
// The output is what RFC 9651 serialization gives (byte for byte).
// Empty ps gives "" (the field must then not be sent: it is a non-empty
// List).
//
// The error, wrapping ErrInvalidValue, names the first bad policy and
// field: a Name or Unit that is not printable ASCII, a Quota outside 0 to
// 999,999,999,999,999, a negative Window, or a Name used twice.
func FormatPolicies(ps []Policy) (string, error) {
	if len(ps) == 0 {
		return "", nil
	}
	var stack [192]byte
	buf, err := AppendPolicies(stack[:0], ps)
	if err != nil {
		return "", err
	}
	return string(buf), nil
}

// AppendPolicies appends the value FormatPolicies returns for ps to dst and
// returns the extended buffer; on an error (FormatPolicies' errors) it
// returns dst as it was. It allocates only to grow dst.
func AppendPolicies(dst []byte, ps []Policy) ([]byte, error) {
	buf := dst
	for i := range ps {
		p := &ps[i]
		if err := checkPolicy(ps, i); err != nil {
			return dst, err
		}
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendString(buf, p.Name)
		buf = append(buf, ";q="...)
		buf = strconv.AppendInt(buf, p.Quota, 10)
		if p.Unit != "" {
			buf = append(buf, ";qu="...)
			buf = appendString(buf, p.Unit)
		}
		if p.Window > 0 {
			buf = append(buf, ";w="...)
			buf = strconv.AppendInt(buf, ceilSeconds(p.Window), 10)
		}
		buf = appendKey(buf, p.PartitionKey)
	}
	return buf, nil
}

// FormatLimits returns the value of a RateLimit field (draft -11) listing
// ls in order, e.g.
//
//	"burst";r=12;t=40, "daily";r=880;t=3600;pk=:dXNlcg==:
//
// Parameters come in the order r, t, pk; t when Reset is not negative, pk
// when PartitionKey is not nil. Remaining is clamped to 0 to
// 999,999,999,999,999 and Reset rounded up to whole seconds. The output is
// what RFC 9651 serialization gives (byte for byte). Empty ls gives "".
//
// The error, wrapping ErrInvalidValue, names the first bad limit: a Name
// that is not printable ASCII, or used twice.
//
// It allocates once (the string) while the value fits in 128 bytes.
func FormatLimits(ls []Limit) (string, error) {
	if len(ls) == 0 {
		return "", nil
	}
	var stack [128]byte
	buf, err := AppendLimits(stack[:0], ls)
	if err != nil {
		return "", err
	}
	return string(buf), nil
}

// AppendLimits appends the value FormatLimits returns for ls to dst and
// returns the extended buffer; on an error (FormatLimits' errors) it
// returns dst as it was. It allocates only to grow dst. (LimitField writes
// the same bytes for a fixed list of names, checked once.)
func AppendLimits(dst []byte, ls []Limit) ([]byte, error) {
	buf := dst
	for i := range ls {
		l := &ls[i]
		if err := checkLimit(ls, i); err != nil {
			return dst, err
		}
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendString(buf, l.Name)
		buf = appendAvailable(buf, l.Remaining, l.Reset)
		buf = appendKey(buf, l.PartitionKey)
	}
	return buf, nil
}

// appendAvailable appends a RateLimit member's r and, unless reset is
// negative, its t: ";r=" remaining clamped, ";t=" reset in whole seconds
// rounded up. Every RateLimit member is written by it.
func appendAvailable(buf []byte, remaining int64, reset time.Duration) []byte {
	buf = append(buf, ";r="...)
	buf = strconv.AppendInt(buf, clampRemaining(remaining), 10)
	if reset >= 0 {
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, ceilSeconds(reset), 10)
	}
	return buf
}

// checkPolicy reports what is wrong with ps[i] (given ps[:i]), if anything.
func checkPolicy(ps []Policy, i int) error {
	p := &ps[i]
	if err := checkString(p.Name); err != nil {
		return fmt.Errorf("%w: policies[%d].Name %q: %w", ErrInvalidValue, i, p.Name, err)
	}
	for j := range i {
		if ps[j].Name == p.Name {
			return fmt.Errorf("%w: policies[%d].Name %q: also the name of policies[%d] (one member per policy)", ErrInvalidValue, i, p.Name, j)
		}
	}
	if p.Quota < 0 || p.Quota > maxInteger {
		return fmt.Errorf("%w: policies[%d].Quota %d (policy %q): outside 0 to 999999999999999", ErrInvalidValue, i, p.Quota, p.Name)
	}
	if err := checkString(p.Unit); err != nil {
		return fmt.Errorf("%w: policies[%d].Unit %q (policy %q): %w", ErrInvalidValue, i, p.Unit, p.Name, err)
	}
	if p.Window < 0 {
		return fmt.Errorf("%w: policies[%d].Window %v (policy %q): negative (zero means no window)", ErrInvalidValue, i, p.Window, p.Name)
	}
	return nil
}

// checkLimit reports what is wrong with ls[i] (given ls[:i]), if anything.
func checkLimit(ls []Limit, i int) error {
	l := &ls[i]
	if err := checkString(l.Name); err != nil {
		return fmt.Errorf("%w: limits[%d].Name %q: %w", ErrInvalidValue, i, l.Name, err)
	}
	for j := range i {
		if ls[j].Name == l.Name {
			return fmt.Errorf("%w: limits[%d].Name %q: also the name of limits[%d] (one member per policy)", ErrInvalidValue, i, l.Name, j)
		}
	}
	return nil
}

// errNotPrintable describes a byte that an sf-string cannot hold.
type errNotPrintable struct {
	b   byte
	off int
}

func (e errNotPrintable) Error() string {
	return fmt.Sprintf("byte %#02x at offset %d is not printable ASCII (0x20-0x7E), which a Structured Field String requires", e.b, e.off)
}

// checkString reports whether s can be an RFC 9651 String.
func checkString(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return errNotPrintable{c, i}
		}
	}
	return nil
}

// appendString appends s, which checkString accepts, as an RFC 9651 String
// (§4.1.6).
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\')
			start = i
		}
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// appendKey appends ";pk=:base64:" (RFC 9651 §4.1.8) unless k is nil.
func appendKey(buf []byte, k []byte) []byte {
	if k == nil {
		return buf
	}
	buf = append(buf, ";pk=:"...)
	buf = base64.StdEncoding.AppendEncode(buf, k)
	return append(buf, ':')
}
