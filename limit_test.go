package sluice_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestValidateAcceptsEveryAlgorithm(t *testing.T) {
	t.Parallel()
	for _, l := range []sluice.Limit{
		{Name: "tb", Quota: 100, Window: time.Minute, Burst: 20},
		{Name: "gcra", Algorithm: sluice.GCRA, Quota: 0.5, Window: time.Second},
		{Name: "fw", Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute},
		{Name: "sl", Algorithm: sluice.SlidingLog, Quota: sluice.MaxEntries, Window: time.Hour},
		{Name: "sw", Algorithm: sluice.SlidingWindow, Quota: 1e9, Window: 24 * time.Hour},
		{Name: "lb", Algorithm: sluice.LeakyBucket, Quota: 2, Window: time.Second, Burst: 3, DelayThreshold: 3},
		{Name: "cc", Algorithm: sluice.Concurrency, Quota: 8, Window: 30 * time.Second},
		{Name: "a-b_c.d:e/f", Quota: 1e-6, Window: time.Microsecond, Burst: 4e9},
	} {
		if err := l.Validate(); err != nil {
			t.Errorf("%v: %v", l, err)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	ok := sluice.Limit{Name: "n", Quota: 5, Window: time.Second}
	with := func(f func(*sluice.Limit)) sluice.Limit { l := ok; f(&l); return l }
	for _, c := range []struct {
		limit sluice.Limit
		says  string
	}{
		{with(func(l *sluice.Limit) { l.Name = "" }), "name is empty"},
		{with(func(l *sluice.Limit) { l.Name = "a b" }), `name "a b": byte 1`},
		{with(func(l *sluice.Limit) { l.Algorithm = 7 }), "algorithm 7"},
		{with(func(l *sluice.Limit) { l.Quota = math.Inf(-1) }), "quota -Inf"},
		{with(func(l *sluice.Limit) { l.Quota = 1e10 }), "quota 1e+10"},
		{with(func(l *sluice.Limit) { l.Window = 0 }), "window 0s"},
		{with(func(l *sluice.Limit) { l.Window = 1500 * time.Nanosecond }), "window 1.5µs: must be a whole number of microseconds"},
		{with(func(l *sluice.Limit) { l.Burst = math.Inf(1) }), "burst +Inf"},
		{with(func(l *sluice.Limit) { l.Algorithm, l.Burst = sluice.SlidingWindow, 1 }), "sliding_window has no burst"},
		{with(func(l *sluice.Limit) { l.Algorithm, l.Quota = sluice.Concurrency, 1.5 }), "concurrency counts whole units"},
		{with(func(l *sluice.Limit) { l.Algorithm, l.DelayThreshold = sluice.LeakyBucket, -1 }), "delay threshold -1"},
		{with(func(l *sluice.Limit) { l.DelayThreshold = 1 }), "only a leaky_bucket"},
	} {
		err := c.limit.Validate()
		if !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v; want ErrInvalidLimit saying %q", c.limit, err, c.says)
		}
	}
}

func TestCapacity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limit sluice.Limit
		want  float64
	}{
		{sluice.Limit{Quota: 10}, 10},
		{sluice.Limit{Quota: 10, Burst: 3}, 3},
		{sluice.Limit{Algorithm: sluice.LeakyBucket, Quota: 10, Burst: 30}, 30},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10}, 10},
	} {
		if got := c.limit.Capacity(); got != c.want {
			t.Errorf("%+v: Capacity() = %v, want %v", c.limit, got, c.want)
		}
	}
}

func TestAlgorithmText(t *testing.T) {
	t.Parallel()
	for a := sluice.TokenBucket; a <= sluice.Concurrency; a++ {
		text, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back sluice.Algorithm
		if err := back.UnmarshalText(text); err != nil || back != a || string(text) != a.String() {
			t.Errorf("%v: %q round-trips to %v (%v)", a, text, back, err)
		}
	}
	var a sluice.Algorithm
	if err := a.UnmarshalText([]byte("leaky")); err == nil || !strings.Contains(err.Error(), "token_bucket") {
		t.Errorf("unknown name: %v; want an error listing the names", err)
	}
	if _, err := sluice.Algorithm(42).MarshalText(); err == nil {
		t.Error("MarshalText of an unknown algorithm succeeded")
	}
}

func TestDecisionNever(t *testing.T) {
	t.Parallel()
	if !(sluice.Decision{RetryAfter: sluice.Never}).Never() || (sluice.Decision{RetryAfter: time.Second}).Never() {
		t.Fatal("Never() does not tell a never-fitting rejection from a retryable one")
	}
}

func TestValidateKey(t *testing.T) {
	t.Parallel()
	if sluice.ValidateKey("k") != nil || sluice.ValidateKey(strings.Repeat("k", sluice.MaxKeyLen)) != nil {
		t.Fatal("valid keys refused")
	}
	if err := sluice.ValidateKey(""); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
}

func FuzzAlgorithmUnmarshalText(f *testing.F) {
	for _, s := range []string{"token_bucket", "gcra", "", "concurrency\x00", strings.Repeat("x", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var a sluice.Algorithm
		if err := a.UnmarshalText([]byte(s)); err != nil {
			if len(err.Error()) > 400 {
				t.Fatalf("error of %d bytes echoes the input", len(err.Error()))
			}
			return
		}
		if a.String() != s {
			t.Fatalf("%q parsed as %v", s, a)
		}
	})
}

func FuzzLimitValidate(f *testing.F) {
	f.Add("api", uint8(0), 100.0, int64(time.Minute), 20.0, 0.0)
	f.Add("", uint8(9), math.NaN(), int64(-1), math.Inf(1), -1.0)
	f.Fuzz(func(t *testing.T, name string, alg uint8, quota float64, window int64, burst, delay float64) {
		l := sluice.Limit{Name: name, Algorithm: sluice.Algorithm(alg), Quota: quota, Window: time.Duration(window), Burst: burst, DelayThreshold: delay}
		err := l.Validate()
		if err != nil && !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Fatalf("%v is not ErrInvalidLimit", err)
		}
		if err == nil && !(l.Capacity() > 0) {
			t.Fatalf("valid %+v has capacity %v", l, l.Capacity())
		}
	})
}

// Validate's errors say which field breaks which rule, as a LimitError a
// configuration loader can point at the field with.
func TestLimitError(t *testing.T) {
	err := sluice.Limit{Name: "api", Quota: 10, Window: -time.Hour}.Validate()
	var le *sluice.LimitError
	if !errors.As(err, &le) || le.Limit != "api" || le.Field != "window" || le.Value != -time.Hour || !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Fatalf("%v: %+v", err, le)
	}
	if want := `sluice: invalid limit "api": window -1h0m0s: must be a whole number of microseconds, from 1µs to ten years`; err.Error() != want {
		t.Fatalf("%q, want %q", err, want)
	}
}
