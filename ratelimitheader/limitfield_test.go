package ratelimitheader

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
)

// A decision's t: ResetAfter rounded up when allowed; RetryAfter rounded
// up and at least 1 s when rejected, as Retry-After; none when the cost
// never fits.
func TestResetOf(t *testing.T) {
	t.Parallel()
	allowed := func(reset time.Duration) sluice.Decision { return sluice.Decision{Allowed: true, ResetAfter: reset} }
	rejected := func(retry time.Duration) sluice.Decision {
		return sluice.Decision{RetryAfter: retry, ResetAfter: time.Hour}
	}
	for _, c := range []struct {
		d    sluice.Decision
		want time.Duration
	}{
		{allowed(0), 0},
		{allowed(1), time.Second},
		{allowed(time.Second), time.Second},
		{allowed(1500 * time.Millisecond), 2 * time.Second},
		{allowed(-time.Second), 0}, // a store's nonsense is not a negative t (absent)
		{allowed(1<<63 - 1), time.Duration(maxSeconds) * time.Second},
		{rejected(0), time.Second},
		{rejected(50 * time.Millisecond), time.Second},
		{rejected(time.Second + 1), 2 * time.Second},
		{rejected(90 * time.Second), 90 * time.Second},
		{rejected(sluice.Never - 1), time.Duration(maxSeconds) * time.Second},
		{rejected(sluice.Never), NoReset},
	} {
		if got := ResetOf(c.d); got != c.want {
			t.Errorf("ResetOf(allowed %v, reset %v, retry %v) = %v, want %v", c.d.Allowed, c.d.ResetAfter, c.d.RetryAfter, got, c.want)
		}
		if c.d.Allowed || c.want < 0 {
			continue
		}
		if ra := FormatRetryAfter(c.d.RetryAfter); ra != fmt.Sprint(int64(c.want/time.Second)) && c.want < time.Duration(maxSeconds)*time.Second {
			t.Errorf("retry %v: Retry-After %s, t %v", c.d.RetryAfter, ra, c.want)
		}
	}
	l := LimitOf("x", sluice.Decision{Allowed: true, Remaining: 2.9, ResetAfter: 100 * time.Millisecond})
	if l.Name != "x" || l.Remaining != 2 || l.Reset != time.Second || l.PartitionKey != nil {
		t.Errorf("LimitOf: %+v", l)
	}
}

// genDecision draws any decision a store can return.
func genDecision(t *rapid.T) sluice.Decision {
	d := sluice.Decision{
		Allowed:    rapid.Bool().Draw(t, "allowed"),
		Remaining:  float64(rapid.Int64Range(0, 1e18).Draw(t, "remaining")) / 1e3,
		ResetAfter: genDuration(t, "reset", 0),
	}
	if !d.Allowed {
		d.RetryAfter = genDuration(t, "retry", 1)
		if rapid.IntRange(0, 4).Draw(t, "never") == 0 {
			d.RetryAfter = sluice.Never
		}
	}
	return d
}

// LimitField.Append writes, byte for byte, what AppendLimits writes of
// LimitOf each decision, after whatever dst holds.
func TestLimitFieldMatchesAppendLimits(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 10).Draw(t, "n")
		names := make([]string, n)
		ds := make([]sluice.Decision, n)
		ls := make([]Limit, n)
		for i := range n {
			names[i] = fmt.Sprintf("%s-%d", genName(t, "name", false), i)
			ds[i] = genDecision(t)
			ls[i] = LimitOf(names[i], ds[i])
		}
		f, err := NewLimitField(names)
		if err != nil {
			t.Fatal(err)
		}
		if f.Len() != n {
			t.Fatalf("Len %d, want %d", f.Len(), n)
		}
		prefix := []byte(genName(t, "prefix", true))
		want, err := AppendLimits(append([]byte(nil), prefix...), ls)
		if err != nil {
			t.Fatal(err)
		}
		got := f.Append(append([]byte(nil), prefix...), ds)
		if string(got) != string(want) {
			t.Fatalf("LimitField %q, AppendLimits %q", got, want)
		}
		if s, _ := FormatLimits(ls); s != string(want[len(prefix):]) {
			t.Fatalf("FormatLimits %q, AppendLimits %q", s, want[len(prefix):])
		}
		if extra := f.Append(nil, append(ds, sluice.Decision{Allowed: true})); string(extra) != string(want[len(prefix):]) {
			t.Fatalf("a decision beyond the policies was written: %q", extra)
		}
	})
}

// NewLimitField refuses what FormatLimits refuses; the Append functions
// give dst back untouched on an error.
func TestLimitFieldErrors(t *testing.T) {
	t.Parallel()
	for names, want := range map[string]string{
		"a\tb":  `limits[0].Name "a\tb": byte 0x09`,
		"ok,日本": `limits[1].Name "日本"`,
		"x,y,x": `limits[2].Name "x": also the name of limits[0]`,
	} {
		_, err := NewLimitField(strings.Split(names, ","))
		if !errors.Is(err, ErrInvalidValue) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an ErrInvalidValue saying %s", names, err, want)
		}
	}
	dst := []byte("kept")
	if got, err := AppendLimits(dst, []Limit{{Name: "a"}, {Name: "a"}}); err == nil || string(got) != "kept" {
		t.Errorf("AppendLimits: %q, %v", got, err)
	}
	if got, err := AppendPolicies(dst, []Policy{{Name: "a"}, {Name: "b", Quota: -1}}); err == nil || string(got) != "kept" {
		t.Errorf("AppendPolicies: %q, %v", got, err)
	}
	if got, err := AppendPolicies(dst, []Policy{{Name: "a", Quota: 1, Window: time.Second}}); err != nil || string(got) != `kept"a";q=1;w=1` {
		t.Errorf("AppendPolicies: %q, %v", got, err)
	}
	var zero LimitField
	if got := zero.Append(dst, []sluice.Decision{{}}); string(got) != "kept" || zero.Len() != 0 {
		t.Errorf("the zero LimitField wrote %q", got)
	}
}

// A middleware's fast path: appending the field of three limits to a
// buffer with room allocates nothing.
func TestLimitFieldAppendDoesNotAllocate(t *testing.T) {
	f, err := NewLimitField([]string{"per-ip", "per-user", "daily"})
	if err != nil {
		t.Fatal(err)
	}
	ds := []sluice.Decision{
		{Allowed: true, Remaining: 9, ResetAfter: 800 * time.Millisecond},
		{RetryAfter: 12300 * time.Millisecond},
		{RetryAfter: sluice.Never},
	}
	var buf [128]byte
	if n := testing.AllocsPerRun(100, func() { f.Append(buf[:0], ds) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	if got := string(f.Append(buf[:0], ds)); got != `"per-ip";r=9;t=1, "per-user";r=0;t=13, "daily";r=0` {
		t.Fatalf("%s", got)
	}
}
