package ratelimitheader

import (
	"fmt"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// ParsePolicies parses the lines of a RateLimit-Policy field (draft -11;
// pass h.Values("RateLimit-Policy")) into its policies, in order.
//
// It is lenient (see the package documentation): members it cannot use
// are skipped, of members with the same name the first valid one is kept,
// and at most MaxMembers are returned. A Policy returned has Quota ≥ 0,
// Window > 0 or 0 when absent (whole seconds, clamped to the largest
// time.Duration), Unit "" when absent (meaning "requests") and PartitionKey
// nil when absent.
//
// No lines, or only blank ones, give nil and no error. The error wraps
// ErrTooLarge when the lines are longer than MaxFieldSize in total, and
// ErrMalformed when they are not a Structured Field List: the client should
// then ignore the field.
func ParsePolicies(values []string) ([]Policy, error) {
	list, err := parseList("RateLimit-Policy", values)
	if err != nil {
		return nil, err
	}
	var ps []Policy
	for _, m := range list {
		if len(ps) == MaxMembers {
			break
		}
		p, ok := policyOf(m)
		if !ok {
			continue
		}
		dup := false
		for i := range ps {
			if ps[i].Name == p.Name {
				dup = true
				break
			}
		}
		if !dup {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// ParseLimits parses the lines of a RateLimit field (draft -11; pass
// h.Values("RateLimit")) into its service limits, in order.
//
// It is lenient as ParsePolicies is. A Limit returned has Remaining ≥ 0,
// Reset ≥ 0 or NoReset when t is absent (whole seconds, clamped to the
// largest time.Duration) and PartitionKey nil when absent.
//
// No lines, or only blank ones, give nil and no error. The errors are those
// of ParsePolicies.
func ParseLimits(values []string) ([]Limit, error) {
	list, err := parseList("RateLimit", values)
	if err != nil {
		return nil, err
	}
	var ls []Limit
	for _, m := range list {
		if len(ls) == MaxMembers {
			break
		}
		l, ok := limitOf(m)
		if !ok {
			continue
		}
		dup := false
		for i := range ls {
			if ls[i].Name == l.Name {
				dup = true
				break
			}
		}
		if !dup {
			ls = append(ls, l)
		}
	}
	return ls, nil
}

// policyOf is the Policy of a member, or false when the member is not one.
func policyOf(m httpsfv.Member) (Policy, bool) {
	it, ok := m.(httpsfv.Item)
	if !ok {
		return Policy{}, false
	}
	var p Policy
	if p.Name, ok = text(it.Value); !ok {
		return Policy{}, false
	}
	q, st := count(it.Params, "q")
	if st != valid {
		return Policy{}, false
	}
	p.Quota = q
	if v, present := param(it.Params, "qu"); present {
		if p.Unit, ok = text(v); !ok {
			return Policy{}, false
		}
	}
	switch w, st := count(it.Params, "w"); {
	case st == invalid || st == valid && w == 0:
		return Policy{}, false
	case st == valid:
		p.Window = seconds(w)
	}
	if p.PartitionKey, ok = key(it.Params); !ok {
		return Policy{}, false
	}
	return p, true
}

// limitOf is the Limit of a member, or false when the member is not one.
func limitOf(m httpsfv.Member) (Limit, bool) {
	it, ok := m.(httpsfv.Item)
	if !ok {
		return Limit{}, false
	}
	var l Limit
	if l.Name, ok = text(it.Value); !ok {
		return Limit{}, false
	}
	r, st := count(it.Params, "r")
	if st != valid {
		return Limit{}, false
	}
	l.Remaining = r
	switch t, st := count(it.Params, "t"); st {
	case invalid:
		return Limit{}, false
	case valid:
		l.Reset = seconds(t)
	default:
		l.Reset = NoReset
	}
	if l.PartitionKey, ok = key(it.Params); !ok {
		return Limit{}, false
	}
	return l, true
}

// param is the value of the parameter k, if present.
func param(ps *httpsfv.Params, k string) (any, bool) {
	if ps == nil {
		return nil, false
	}
	return ps.Get(k)
}

type state int

const (
	absent state = iota
	valid
	invalid
)

// count is the parameter k as a non-negative Integer.
func count(ps *httpsfv.Params, k string) (int64, state) {
	v, present := param(ps, k)
	if !present {
		return 0, absent
	}
	n, ok := v.(int64)
	if !ok || n < 0 {
		return 0, invalid
	}
	return n, valid
}

// text is a String or Token bare item as a string.
func text(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case httpsfv.Token:
		return string(v), true
	}
	return "", false
}

// key is the pk parameter: nil when absent, false when not a Byte Sequence.
func key(ps *httpsfv.Params) ([]byte, bool) {
	v, present := param(ps, "pk")
	if !present {
		return nil, true
	}
	b, ok := v.([]byte)
	if ok && b == nil {
		b = []byte{}
	}
	return b, ok
}

// seconds is n seconds as a Duration, clamped to the largest whole-second
// Duration; n must not be negative.
func seconds(n int64) time.Duration {
	return time.Duration(min(n, maxSeconds)) * time.Second
}

// parseList parses the lines of the field named field as one List.
func parseList(field string, values []string) (httpsfv.List, error) {
	total, blank := 0, 0
	for _, v := range values {
		total += len(v)
		if strings.Trim(v, " \t") == "" {
			blank++
		}
	}
	if total > MaxFieldSize {
		return nil, fmt.Errorf("%w: %s: %d bytes in %d lines, more than the %d read", ErrTooLarge, field, total, len(values), MaxFieldSize)
	}
	if blank == len(values) {
		return nil, nil
	}
	lines := values
	if blank > 0 {
		lines = make([]string, 0, len(values)-blank)
		for _, v := range values {
			if strings.Trim(v, " \t") != "" {
				lines = append(lines, v)
			}
		}
	}
	list, err := unmarshalList(lines)
	if err == nil {
		return list, nil
	}
	if fixed, ok := repadByteSequences(strings.Join(lines, ", ")); ok {
		if list, err2 := unmarshalList([]string{fixed}); err2 == nil {
			return list, nil
		}
	}
	return nil, fmt.Errorf("%w: %s is not a Structured Field List: %w", ErrMalformed, field, err)
}

// unmarshalList is httpsfv.UnmarshalList, which must not panic on input a
// peer sent: a panic is turned into an error.
func unmarshalList(lines []string) (list httpsfv.List, err error) {
	defer func() {
		if r := recover(); r != nil {
			list, err = nil, fmt.Errorf("structured field parser panicked: %v", r)
		}
	}()
	return httpsfv.UnmarshalList(lines)
}

// repadByteSequences rewrites the Byte Sequences of the Structured Field
// value s into canonical padding: "=" padding added where it is missing, or
// excess "=" removed. RFC 9651 §4.2.7 asks parsers not to fail on missing
// padding, which httpsfv (through encoding/base64) does. It reports whether
// anything changed. Non-zero pad bits need no rewriting: encoding/base64
// accepts them unless in Strict mode, which httpsfv does not use.
//
// It tracks Strings and Display Strings so that a colon inside one is not
// taken for a Byte Sequence, and takes a colon for the start of one only
// where a bare item may start (after "=", ",", "(", a space, or at the
// start), so that the colons of Tokens are left alone.
func repadByteSequences(s string) (string, bool) {
	var b strings.Builder
	last := 0         // s[last:] is not yet copied to b
	prev := byte(',') // the byte before s[i], outside Strings
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			display := prev == '%'
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && !display {
					i++
				}
			}
			prev = '"'
			continue
		case c == ':' && (prev == '=' || prev == ',' || prev == '(' || prev == ' ' || prev == '\t'):
			end := strings.IndexByte(s[i+1:], ':')
			if end < 0 {
				i = len(s)
				continue
			}
			end += i + 1
			if fixed, ok := repad(s[i+1 : end]); ok && fixed != s[i+1:end] {
				b.WriteString(s[last : i+1])
				b.WriteString(fixed)
				last = end
			}
			i, prev = end, ':'
			continue
		}
		prev = c
	}
	if last == 0 {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), true
}

// repad is the base64 text t with canonical "=" padding, or false when t
// is not base64 (bad characters, "=" before the end, a length that no
// padding can fix).
func repad(t string) (string, bool) {
	t = strings.TrimRight(t, "=")
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/') {
			return "", false
		}
	}
	switch len(t) % 4 {
	case 1:
		return "", false
	case 2:
		return t + "==", true
	case 3:
		return t + "=", true
	}
	return t, true
}
