package redisbucket_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisbucket"
	"github.com/sluicehq/sluice/redisscript"
)

// noCalls is a Client for options that New refuses, or costs Wait
// refuses, before any call.
type noCalls struct{ t *testing.T }

func (c noCalls) EvalSHA(context.Context, string, []string, []string) ([]int64, error) {
	c.t.Error("a call reached Redis")
	return nil, errors.New("no calls")
}

func (c noCalls) Eval(context.Context, string, []string, []string) ([]int64, error) {
	c.t.Error("a call reached Redis")
	return nil, errors.New("no calls")
}

func (noCalls) Cluster() bool { return false }

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	good := limit("api", 100, 10)
	with := func(f func(*sluice.Limit)) sluice.Limit { l := good; f(&l); return l }
	client := noCalls{t}
	for _, tc := range []struct {
		name  string
		o     redisbucket.Options
		want  string // in the error
		limit bool   // the error wraps sluice.ErrInvalidLimit
	}{
		{"no client", redisbucket.Options{Limit: good}, "Client is nil", false},
		{"empty name", redisbucket.Options{Client: client, Limit: with(func(l *sluice.Limit) { l.Name = "" })}, "name is empty", true},
		{"bad name", redisbucket.Options{Client: client, Limit: with(func(l *sluice.Limit) { l.Name = "a b" })}, "not a letter", true},
		{"no quota", redisbucket.Options{Client: client, Limit: with(func(l *sluice.Limit) { l.Quota = 0 })}, "quota", true},
		{"no window", redisbucket.Options{Client: client, Limit: with(func(l *sluice.Limit) { l.Window = 0 })}, "window", true},
		{"negative burst", redisbucket.Options{Client: client, Limit: with(func(l *sluice.Limit) { l.Burst = -1 })}, "burst", true},
		{"fixed window", redisbucket.Options{Client: client, Limit: with(func(l *sluice.Limit) { l.Algorithm, l.Burst = sluice.FixedWindow, 0 })}, "algorithm fixed_window", false},
		{"leaky bucket", redisbucket.Options{Client: client, Limit: with(func(l *sluice.Limit) { l.Algorithm = sluice.LeakyBucket })}, "algorithm leaky_bucket", false},
		{"slice above burst", redisbucket.Options{Client: client, Limit: good, Slice: 10.5}, "Slice 10.5 is more than the burst 10", false},
		{"negative slice", redisbucket.Options{Client: client, Limit: good, Slice: -1}, "Slice -1: must be a positive number", false},
		{"NaN slice", redisbucket.Options{Client: client, Limit: good, Slice: math.NaN()}, "Slice NaN", false},
		{"infinite slice", redisbucket.Options{Client: client, Limit: good, Slice: math.Inf(1)}, "Slice +Inf", false},
		{"tiny slice", redisbucket.Options{Client: client, Limit: good, Slice: 1e-9}, "less than a millionth", false},
		{"negative timeout", redisbucket.Options{Client: client, Limit: good, Timeout: -time.Second}, "Timeout -1s is negative", false},
		{"brace in prefix", redisbucket.Options{Client: client, Limit: good, Prefix: "a{b"}, "contains a brace", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := redisbucket.New(tc.o)
			if err == nil {
				b.Close()
				t.Fatal("New accepted the options")
			}
			if !errors.Is(err, redisbucket.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want ErrInvalid saying %q", err, tc.want)
			}
			if got := errors.Is(err, sluice.ErrInvalidLimit); got != tc.limit {
				t.Fatalf("New: %v wraps sluice.ErrInvalidLimit: %v, want %v", err, got, tc.limit)
			}
		})
	}
}

func TestWaitRefusesBadCosts(t *testing.T) {
	t.Parallel()
	b := newBudget(t, redisbucket.Options{Client: noCalls{t}, Limit: limit("api", 100, 10)})
	for _, tc := range []struct {
		cost float64
		want error
	}{
		{0, redisbucket.ErrInvalid},
		{-1, redisbucket.ErrInvalid},
		{1e-7, redisbucket.ErrInvalid},
		{math.NaN(), redisbucket.ErrInvalid},
		{math.Inf(1), redisbucket.ErrInvalid},
		{10.000001, redisbucket.ErrCostTooLarge},
	} {
		if err := b.Wait(context.Background(), tc.cost); !errors.Is(err, tc.want) {
			t.Errorf("Wait(%v): %v, want %v", tc.cost, err, tc.want)
		}
	}
}

// The default slice is L × 100 ms, at least 1 token, at most the burst:
// the first Wait on a full bucket takes that much.
func TestDefaultSlice(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	for _, tc := range []struct {
		l    sluice.Limit
		want float64
	}{
		{limit("", 100, 50), 10},     // L × 100 ms
		{limit("", 2, 50), 1},        // at least 1
		{limit("", 1000, 30), 30},    // at most B
		{limit("", 0.5, 0.25), 0.25}, // at most B, below 1
		{sluice.Limit{Algorithm: sluice.GCRA, Quota: 600, Window: time.Minute}, 1}, // GCRA, 10/s, B = 600
		{sluice.Limit{Quota: 6000, Window: time.Minute, Burst: 3000}, 10},          // 100/s
	} {
		tc.l.Name = fresh(t)
		b := newBudget(t, redisbucket.Options{Client: dial(t, addr), Limit: tc.l})
		if err := b.Wait(context.Background(), math.Min(tc.want, 0.25)); err != nil {
			t.Fatal(err)
		}
		if got := b.Stats().Granted; got != tc.want {
			t.Errorf("%v: first slice %v, want %v", tc.l, got, tc.want)
		}
	}
}

var _ redisscript.Client = noCalls{}
