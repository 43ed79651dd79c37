package ratelimitheader

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"
)

// The parsers never panic; what they return holds the documented
// invariants; and it formats back to a field that parses to the same
// values (parsing is a projection).

func FuzzParseLimits(f *testing.F) {
	for _, s := range [][2]string{
		{`"default";r=50;t=30`, ``},
		{`"default";r=999;pk=:dHJpYWwxMjEzMjM=:`, `"b";r=0`},
		{`"a";r=1;pk=:cHsdsRa894:, t:YQ;r=2`, `"x:YQ:";note=%"x\";r=1;pk=:YQ:`},
		{`"a";r=-1;t=-1, "a";r=3;t=999999999999999`, `("a" "b");r=1, ?1;r=2, 5;r=3, :YQ==:;r=4`},
		{`"a";acme=5;r=1.5;r=2;flag;t=0`, `"a";r=1,`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ls, err := ParseLimits([]string{a, b})
		if err != nil {
			if ls != nil || !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("ParseLimits(%q, %q) = %+v, %v", a, b, ls, err)
			}
			return
		}
		if len(ls) > MaxMembers {
			t.Fatalf("%d limits, more than MaxMembers", len(ls))
		}
		seen := map[string]bool{}
		for _, l := range ls {
			if l.Remaining < 0 || l.Remaining > maxInteger || l.Reset != NoReset && (l.Reset < 0 || l.Reset%time.Second != 0) || seen[l.Name] {
				t.Fatalf("ParseLimits(%q, %q) gave %+v", a, b, l)
			}
			seen[l.Name] = true
		}
		v, err := FormatLimits(ls)
		if err != nil {
			t.Fatalf("FormatLimits(ParseLimits(%q, %q) = %+v): %v", a, b, ls, err)
		}
		again, err := ParseLimits([]string{v})
		if err != nil || !reflect.DeepEqual(again, ls) {
			t.Fatalf("ParseLimits(%q, %q) = %+v, formatted %q, parsed again %+v, %v", a, b, ls, v, again, err)
		}
	})
}

func FuzzParsePolicies(f *testing.F) {
	for _, s := range [][2]string{
		{`"burst";q=100;w=60,"daily";q=1000;w=86400`, ``},
		{`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`, `"peruser";q=100;w=60;pk=:cHsdsRa894==:`},
		{`"a";q=1;w=0, "b";q=-1, "c";q=1;qu=1, d;q=2;qu=requests`, `"sliding";q=100;w=60;burst=1000`},
		{`100;w=60, 1000;w=3600`, `"a";q=999999999999999;w=999999999999999;pk=:YQ:`},
		{`"a";q=1;pk=:Y:`, `%"a\";q=1`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ps, err := ParsePolicies([]string{a, b})
		if err != nil {
			if ps != nil || !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("ParsePolicies(%q, %q) = %+v, %v", a, b, ps, err)
			}
			return
		}
		if len(ps) > MaxMembers {
			t.Fatalf("%d policies, more than MaxMembers", len(ps))
		}
		seen := map[string]bool{}
		for _, p := range ps {
			if p.Quota < 0 || p.Quota > maxInteger || p.Window < 0 || p.Window%time.Second != 0 || seen[p.Name] {
				t.Fatalf("ParsePolicies(%q, %q) gave %+v", a, b, p)
			}
			seen[p.Name] = true
		}
		v, err := FormatPolicies(ps)
		if err != nil {
			t.Fatalf("FormatPolicies(ParsePolicies(%q, %q) = %+v): %v", a, b, ps, err)
		}
		again, err := ParsePolicies([]string{v})
		if err != nil || !reflect.DeepEqual(again, ps) {
			t.Fatalf("ParsePolicies(%q, %q) = %+v, formatted %q, parsed again %+v, %v", a, b, ps, v, again, err)
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{
		"120", "007", "0", "-1", "1.5", "", "99999999999999999999999",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
	} {
		f.Add(s, int64(784111777), int64(0))
	}
	f.Fuzz(func(t *testing.T, v string, sec, nsec int64) {
		now := time.Unix(sec, nsec)
		d, err := ParseRetryAfter(v, now)
		if err != nil {
			if d != 0 || !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v", v, d, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q, %v) = %v, negative", v, now, d)
		}
		// What parses as delay-seconds formats back to itself (for 1 and up,
		// without leading zeros).
		if n, ok := digits(v); ok && n >= 1 && n < maxSeconds && v[0] != '0' {
			if got := FormatRetryAfter(d); got != v {
				t.Fatalf("FormatRetryAfter(ParseRetryAfter(%q)) = %q", v, got)
			}
		}
	})
}

func FuzzParseLegacy(f *testing.F) {
	f.Add("100", "42", "60", int64(1_700_000_000))
	f.Add("5000, 60", "4999", "1700000060", int64(1_700_000_000))
	f.Add("x", "-1, 3", "1700000002.75", int64(1_700_000_000))
	f.Add("99999999999999999999", "0", "99999999999999999999.9", int64(-1))
	f.Add("", "", "1000000000.", int64(0))
	f.Fuzz(func(t *testing.T, limit, remaining, reset string, sec int64) {
		h := http.Header{}
		h.Add("X-RateLimit-Limit", limit)
		h.Add("X-RateLimit-Remaining", remaining)
		h.Add("X-RateLimit-Reset", reset)
		l, ok := ParseLegacy(h, time.Unix(sec, 0))
		if l.Limit < -1 || l.Remaining < 0 || l.Reset < 0 && l.Reset != NoReset || !ok && l.Remaining != 0 {
			t.Fatalf("ParseLegacy(%q, %q, %q) = %+v, %v", limit, remaining, reset, l, ok)
		}
	})
}
