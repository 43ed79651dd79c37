package ratelimitheader

import (
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genName draws a name: printable ASCII, or any bytes when anyBytes.
func genName(t *rapid.T, label string, anyBytes bool) string {
	b := rapid.ByteRange(0x20, 0x7e)
	if anyBytes {
		b = rapid.OneOf(b, rapid.Byte())
	}
	return string(rapid.SliceOfN(b, 0, 12).Draw(t, label))
}

// genDuration draws a duration: whole seconds, or anything in [lo, max].
func genDuration(t *rapid.T, label string, lo time.Duration) time.Duration {
	return rapid.OneOf(
		rapid.Custom(func(t *rapid.T) time.Duration {
			return time.Duration(rapid.Int64Range(0, 100_000).Draw(t, "s")) * time.Second
		}),
		rapid.Custom(func(t *rapid.T) time.Duration {
			return time.Duration(rapid.Int64Range(int64(lo), 1<<63-1).Draw(t, "ns"))
		}),
	).Draw(t, label)
}

// genKey draws a partition key: nil, empty or some bytes.
func genKey(t *rapid.T, label string) []byte {
	switch rapid.IntRange(0, 2).Draw(t, label+" kind") {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	return rapid.SliceOfN(rapid.Byte(), 1, 24).Draw(t, label)
}

// genPolicies draws up to 10 policies with distinct names and valid
// numbers; names and units are printable unless anyBytes.
func genPolicies(t *rapid.T, anyBytes bool) []Policy {
	n := rapid.IntRange(0, 10).Draw(t, "policies")
	ps := make([]Policy, 0, n)
	seen := map[string]bool{}
	for range n {
		name := genName(t, "name", anyBytes)
		if seen[name] {
			continue
		}
		seen[name] = true
		unit := rapid.SampledFrom([]string{"", "requests", "content-bytes", "concurrent-requests", "other"}).Draw(t, "unit")
		if unit == "other" {
			unit = genName(t, "unit name", anyBytes)
		}
		ps = append(ps, Policy{
			Name:         name,
			Quota:        rapid.Int64Range(0, maxInteger).Draw(t, "quota"),
			Unit:         unit,
			Window:       genDuration(t, "window", 0),
			PartitionKey: genKey(t, "pk"),
		})
	}
	return ps
}

// genLimits draws up to 10 limits with distinct names and any numbers;
// names are printable unless anyBytes.
func genLimits(t *rapid.T, anyBytes bool) []Limit {
	n := rapid.IntRange(0, 10).Draw(t, "limits")
	ls := make([]Limit, 0, n)
	seen := map[string]bool{}
	for range n {
		name := genName(t, "name", anyBytes)
		if seen[name] {
			continue
		}
		seen[name] = true
		ls = append(ls, Limit{
			Name:         name,
			Remaining:    rapid.Int64().Draw(t, "remaining"),
			Reset:        rapid.OneOf(rapid.Just(NoReset), rapid.Custom(func(t *rapid.T) time.Duration { return genDuration(t, "reset", -1<<63) })).Draw(t, "reset"),
			PartitionKey: genKey(t, "pk"),
		})
	}
	return ls
}

// Formatting then parsing gives back the values, as formatting writes them:
// durations rounded up to whole seconds (clamped to the largest
// time.Duration), Remaining clamped to 0 to 999,999,999,999,999, negative
// Resets absent.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ps := genPolicies(t, false)
		v, err := FormatPolicies(ps)
		if err != nil {
			t.Fatalf("FormatPolicies(%+v): %v", ps, err)
		}
		gotPs, err := ParsePolicies([]string{v})
		if err != nil {
			t.Fatalf("ParsePolicies(%q): %v", v, err)
		}
		var wantPs []Policy
		for _, p := range ps {
			p.Window = seconds(ceilSeconds(p.Window))
			wantPs = append(wantPs, p)
		}
		if !reflect.DeepEqual(gotPs, wantPs) {
			t.Fatalf("ParsePolicies(FormatPolicies(ps)) = %+v\nwant %+v\nfield %q", gotPs, wantPs, v)
		}

		ls := genLimits(t, false)
		v, err = FormatLimits(ls)
		if err != nil {
			t.Fatalf("FormatLimits(%+v): %v", ls, err)
		}
		gotLs, err := ParseLimits([]string{v})
		if err != nil {
			t.Fatalf("ParseLimits(%q): %v", v, err)
		}
		var wantLs []Limit
		for _, l := range ls {
			l.Remaining = clampRemaining(l.Remaining)
			if l.Reset < 0 {
				l.Reset = NoReset
			} else {
				l.Reset = seconds(ceilSeconds(l.Reset))
			}
			wantLs = append(wantLs, l)
		}
		if !reflect.DeepEqual(gotLs, wantLs) {
			t.Fatalf("ParseLimits(FormatLimits(ls)) = %+v\nwant %+v\nfield %q", gotLs, wantLs, v)
		}
	})
}

// A formatted reset is never earlier than the reset, and less than a
// second later; a positive one is never 0.
func TestFormatResetRoundsUp(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		d := time.Duration(rapid.Int64Range(0, int64(maxSeconds)*int64(time.Second)).Draw(t, "reset"))
		s := ceilSeconds(d)
		w := time.Duration(s) * time.Second
		if w < d || w-d >= time.Second || d > 0 && s == 0 {
			t.Fatalf("ceilSeconds(%v) = %d", d, s)
		}
	})
}
