package limittest

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// badInput: invalid limits, costs, keys and requests are refused with an
// error that names the field and the value, nothing panics and nothing is
// spent.
func (s *suite) badInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := s.store(t)
	key := s.key(t, "k")
	good := lim("good", sluice.TokenBucket, 5, s1, 0)
	badLimits := []struct {
		limit   sluice.Limit
		mention string
	}{
		{sluice.Limit{Quota: 5, Window: s1}, "name is empty"},
		{sluice.Limit{Name: "bad name", Quota: 5, Window: s1}, "name"},
		{sluice.Limit{Name: strings.Repeat("n", 200), Quota: 5, Window: s1}, "MaxNameLen"},
		{sluice.Limit{Name: "q", Quota: 0, Window: s1}, "quota 0"},
		{sluice.Limit{Name: "q", Quota: -1, Window: s1}, "quota -1"},
		{sluice.Limit{Name: "q", Quota: math.NaN(), Window: s1}, "quota NaN"},
		{sluice.Limit{Name: "q", Quota: math.Inf(1), Window: s1}, "quota +Inf"},
		{sluice.Limit{Name: "q", Quota: 1e-9, Window: s1}, "quota 1e-09"},
		{sluice.Limit{Name: "q", Quota: 1e300, Window: s1}, "quota 1e+300"},
		{sluice.Limit{Name: "w", Quota: 5}, "window 0s"},
		{sluice.Limit{Name: "w", Quota: 5, Window: -s1}, "window -1s"},
		{sluice.Limit{Name: "w", Quota: 5, Window: 100 * 365 * 24 * time.Hour}, "window 876000h"},
		{sluice.Limit{Name: "b", Quota: 5, Window: s1, Burst: -1}, "burst -1"},
		{sluice.Limit{Name: "b", Quota: 5, Window: s1, Burst: math.NaN()}, "burst NaN"},
		{sluice.Limit{Name: "b", Algorithm: sluice.FixedWindow, Quota: 5, Window: s1, Burst: 3}, "burst 3"},
		{sluice.Limit{Name: "a", Algorithm: 99, Quota: 5, Window: s1}, "algorithm 99"},
		{sluice.Limit{Name: "l", Algorithm: sluice.SlidingLog, Quota: 2.5, Window: s1}, "quota 2.5"},
		{sluice.Limit{Name: "l", Algorithm: sluice.SlidingLog, Quota: 1e6, Window: s1}, "quota 1e+06"},
		{sluice.Limit{Name: "d", Algorithm: sluice.LeakyBucket, Quota: 5, Window: s1, DelayThreshold: 6}, "delay threshold 6"},
		{sluice.Limit{Name: "d", Quota: 5, Window: s1, DelayThreshold: 1}, "delay threshold 1"},
		{sluice.Limit{Name: "w", Quota: 5, Window: 1500 * time.Nanosecond}, "whole number of microseconds"},
		{sluice.Limit{Name: "o", Quota: 12345.678901, Window: 10 * 365 * 24 * time.Hour}, "too large for exact arithmetic"},
	}
	for _, c := range badLimits {
		_, err := l.Allow(ctx, key, c.limit, 1)
		if !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("limit %+v: err = %v; want ErrInvalidLimit mentioning %q", c.limit, err, c.mention)
		}
	}
	badCosts := []struct {
		limit   sluice.Limit
		cost    float64
		mention string
	}{
		{good, 0, "cost 0"},
		{good, -1, "cost -1"},
		{good, math.NaN(), "cost NaN"},
		{good, math.Inf(1), "cost +Inf"},
		{good, 1e-9, "resolution"},
		{good, 1e12, "largest"},
		{lim("log", sluice.SlidingLog, 5, s1, 0), 1.5, "whole units"},
		{lim("slots", sluice.Concurrency, 5, s1, 0), 0.5, "whole units"},
	}
	for _, c := range badCosts {
		_, err := l.Allow(ctx, key, c.limit, c.cost)
		if !errors.Is(err, sluice.ErrInvalidCost) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("cost %v on %s: err = %v; want ErrInvalidCost mentioning %q", c.cost, c.limit.Name, err, c.mention)
		}
	}
	for _, k := range []string{"", strings.Repeat("k", sluice.MaxKeyLen+1)} {
		_, err := l.Allow(ctx, k, good, 1)
		if !errors.Is(err, sluice.ErrInvalidKey) || strings.Contains(err.Error(), "kkkk") {
			t.Errorf("key of %d bytes: err = %v; want ErrInvalidKey, without the key", len(k), err)
		}
	}
	req := sluice.Request{Key: key, Limit: good, Cost: 1}
	slots := sluice.Request{Key: key, Limit: lim("slots", sluice.Concurrency, 5, s1, 0), Cost: 1}
	badRequests := []struct {
		name string
		reqs []sluice.Request
		mode sluice.Mode
		each []sluice.Decision
	}{
		{"no requests", nil, sluice.AllOrNothing, nil},
		{"unknown mode", []sluice.Request{req}, 7, nil},
		{"each too short", []sluice.Request{req, slots}, sluice.AllOrNothing, make([]sluice.Decision, 1)},
		{"duplicate", []sluice.Request{req, req}, sluice.AllOrNothing, nil},
		{"concurrency without each", []sluice.Request{slots}, sluice.AllOrNothing, nil},
	}
	for _, c := range badRequests {
		if _, err := l.AllowAll(ctx, c.reqs, c.mode, c.each); !errors.Is(err, sluice.ErrInvalidRequest) {
			t.Errorf("%s: err = %v; want ErrInvalidRequest", c.name, err)
		}
	}
	if _, err := l.AllowAll(ctx, []sluice.Request{req, {Key: key, Limit: good, Cost: -1}}, sluice.AllOrNothing, nil); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("a bad cost in a multi-limit request: err = %v; want ErrInvalidCost", err)
	}
	if err := l.Release(ctx, key, good, 1); !errors.Is(err, sluice.ErrInvalidRequest) {
		t.Errorf("Release on a token bucket: err = %v; want ErrInvalidRequest", err)
	}
	// Nothing above spent anything.
	if d, err := l.Allow(ctx, key, good, 5); err != nil || !d.Allowed {
		t.Errorf("after the bad calls, the key is not full: %+v, %v", d, err)
	}
}
