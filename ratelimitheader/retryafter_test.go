package ratelimitheader

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFormatRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   time.Duration
		want string
	}{
		{-time.Hour, "1"},
		{0, "1"},
		{1, "1"},
		{time.Millisecond, "1"},
		{time.Second, "1"},
		{time.Second + 1, "2"},
		{1500 * time.Millisecond, "2"},
		{2 * time.Second, "2"},
		{90 * time.Second, "90"},
		{24 * time.Hour, "86400"},
		{1<<63 - 1, "9223372037"},
	}
	for _, tt := range tests {
		if got := FormatRetryAfter(tt.in); got != tt.want {
			t.Errorf("FormatRetryAfter(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	tests := []struct {
		in   string
		now  time.Time
		want time.Duration
	}{
		{"120", now, 2 * time.Minute},
		{"0", now, 0},
		{"007", now, 7 * time.Second},
		{"000000000000000000000000000001", now, time.Second},
		{" 5\t", now, 5 * time.Second},
		{"9223372036", now, time.Duration(maxSeconds) * time.Second},
		{"9223372037", now, time.Duration(maxSeconds) * time.Second},
		{"99999999999999999999999999999999", now, time.Duration(maxSeconds) * time.Second},
		// The three HTTP-date formats of RFC 9110 §5.6.7.
		{"Sun, 06 Nov 1994 08:50:37 GMT", now, time.Minute},  // IMF-fixdate
		{"Sunday, 06-Nov-94 08:50:37 GMT", now, time.Minute}, // RFC 850
		{"Sun Nov  6 08:50:37 1994", now, time.Minute},       // asctime
		{"Sun, 06 Nov 1994 08:49:37 GMT", now, 0},            // now
		{"Sun, 06 Nov 1994 08:00:00 GMT", now, 0},            // past
		{"Sun, 06 Nov 1994 08:49:37 GMT", now.Add(-500 * time.Millisecond), 500 * time.Millisecond},
		{"Fri, 31 Dec 9999 23:59:59 GMT", now, 1<<63 - 1}, // beyond time.Duration: Sub saturates
	}
	for _, tt := range tests {
		got, err := ParseRetryAfter(tt.in, tt.now)
		if err != nil || got != tt.want {
			t.Errorf("ParseRetryAfter(%q, %v) = %v, %v; want %v", tt.in, tt.now, got, err, tt.want)
		}
	}
}

func TestParseRetryAfterErrors(t *testing.T) {
	t.Parallel()
	now := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	tests := []struct {
		in, want string
	}{
		{"", "Retry-After is empty"},
		{" \t", "Retry-After is empty"},
		{"-1", `Retry-After "-1": negative`},
		{"-0", `Retry-After "-0": negative`},
		{"+5", `Retry-After "+5": neither delay-seconds nor an HTTP-date`},
		{"1.5", `neither delay-seconds`},
		{"5s", `neither delay-seconds`},
		{"0x10", `neither delay-seconds`},
		{"1 2", `neither delay-seconds`},
		{"tomorrow", `neither delay-seconds`},
		{"2024-01-01T00:00:00Z", `neither delay-seconds`},
		{"Sun, 06 Nov 1994 25:00:00 GMT", `neither delay-seconds`},
		{strings.Repeat("x", 100), `"` + strings.Repeat("x", 64) + `"…: neither`},
	}
	for _, tt := range tests {
		got, err := ParseRetryAfter(tt.in, now)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want ErrMalformed saying %s", tt.in, got, err, tt.want)
		}
	}
}
