package ratelimitheader

import (
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"
)

func TestSetLegacy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   Legacy
		want http.Header
	}{
		{Legacy{Limit: 100, Remaining: 42, Reset: 1500 * time.Millisecond}, http.Header{
			"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"42"}, "X-Ratelimit-Reset": {"2"},
		}},
		{Legacy{}, http.Header{
			"X-Ratelimit-Limit": {"0"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"0"},
		}},
		{Legacy{Limit: 10, Remaining: -3, Reset: time.Millisecond}, http.Header{
			"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1"},
		}},
		{Legacy{Limit: -1, Remaining: 5, Reset: NoReset}, http.Header{
			"X-Ratelimit-Remaining": {"5"},
		}},
	}
	for _, tt := range tests {
		h := http.Header{"X-Ratelimit-Limit": {"stale"}, "X-Ratelimit-Reset": {"stale"}}
		SetLegacy(h, tt.in)
		if !reflect.DeepEqual(h, tt.want) {
			t.Errorf("SetLegacy(%+v)\n got %v\nwant %v", tt.in, h, tt.want)
		}
	}
}

func TestParseLegacy(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 250_000_000)
	epoch := func(d int64) string { return strconv.FormatInt(now.Unix()+d, 10) }
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name   string
		in     http.Header
		want   Legacy
		wantOK bool
	}{
		{"delta seconds", hdr("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "42", "X-RateLimit-Reset", "60"),
			Legacy{100, 42, time.Minute}, true},
		{"GitHub: Unix time", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Reset", epoch(60)),
			Legacy{5000, 4999, time.Minute - 250*time.Millisecond}, true},
		{"Unix time in the past", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(-60)),
			Legacy{5000, 0, 0}, true},
		{"Unix time with a fraction", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", epoch(2)+".75"),
			Legacy{-1, 1, 2500 * time.Millisecond}, true},
		{"1e9 is still delta seconds", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1000000000"),
			Legacy{-1, 1, 1e9 * time.Second}, true},
		{"fractional delta", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1.5"),
			Legacy{-1, 1, 1500 * time.Millisecond}, true},
		{"more than nine fraction digits", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "0.1234567899"),
			Legacy{-1, 1, 123456789}, true},
		{"leading zeros, lower case, spaces", hdr("x-ratelimit-remaining", " 007 ", "X-RATELIMIT-LIMIT", "010"),
			Legacy{10, 7, NoReset}, true},
		{"Twitter spelling", hdr("X-Rate-Limit-Limit", "15", "X-Rate-Limit-Remaining", "14", "X-Rate-Limit-Reset", epoch(900)),
			Legacy{15, 14, 900*time.Second - 250*time.Millisecond}, true},
		{"several values: the most restrictive", hdr("X-RateLimit-Limit", "100, 60", "X-RateLimit-Remaining", "50", "X-RateLimit-Remaining", "7", "X-RateLimit-Reset", "10, 30"),
			Legacy{60, 7, 30 * time.Second}, true},
		{"invalid values ignored", hdr("X-RateLimit-Limit", "lots", "X-RateLimit-Remaining", "-1, 3", "X-RateLimit-Reset", "soon"),
			Legacy{-1, 3, NoReset}, true},
		{"huge numbers clamped", hdr("X-RateLimit-Limit", "99999999999999999999", "X-RateLimit-Remaining", "99999999999999999999", "X-RateLimit-Reset", "99999999999999999999"),
			Legacy{maxInteger, maxInteger, 1<<63 - 1}, true},
		{"no remaining", hdr("X-RateLimit-Limit", "100", "X-RateLimit-Reset", "60"),
			Legacy{100, 0, time.Minute}, false},
		{"invalid remaining", hdr("X-RateLimit-Remaining", "1.5"),
			Legacy{-1, 0, NoReset}, false},
		{"nothing", http.Header{}, Legacy{-1, 0, NoReset}, false},
		{"too large", hdr("X-RateLimit-Remaining", string(make([]byte, MaxFieldSize+1))),
			Legacy{-1, 0, NoReset}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseLegacy(tt.in, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ParseLegacy(%v)\n got %+v, %v\nwant %+v, %v", tt.in, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestLegacyRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for _, l := range []Legacy{{100, 42, time.Minute}, {-1, 0, NoReset}, {0, 0, 0}, {7, 3, 999 * time.Second}} {
		h := http.Header{}
		SetLegacy(h, l)
		got, ok := ParseLegacy(h, now)
		if !ok || got != l {
			t.Errorf("ParseLegacy(SetLegacy(%+v)) = %+v, %v", l, got, ok)
		}
	}
}
