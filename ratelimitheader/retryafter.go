package ratelimitheader

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FormatRetryAfter returns the value of a Retry-After field for a client
// that should wait d: delay-seconds (RFC 9110 §10.2.3), d in whole seconds
// rounded up and at least 1, so "1" for any d up to one second (negative and
// zero included) and "2" for 1.001 s. A client that waits the written time
// never comes back early.
func FormatRetryAfter(d time.Duration) string {
	return strconv.FormatInt(retrySeconds(d), 10)
}

// ParseRetryAfter parses a Retry-After value received at now into how long
// to wait. It accepts delay-seconds (digits only, leading zeros allowed;
// values beyond the largest time.Duration are clamped to it, as RFC 9111
// §1.2.2 asks of delta-seconds) and the three HTTP-date formats
// http.ParseTime accepts (IMF-fixdate, RFC 850, asctime): a date is the
// time from now until it, and 0 when it is not after now. Spaces and tabs
// around the value are ignored.
//
// The error, wrapping ErrMalformed, is for anything else: empty, negative,
// fractional or signed numbers, other text.
func ParseRetryAfter(v string, now time.Time) (time.Duration, error) {
	s := strings.Trim(v, " \t")
	if s == "" {
		return 0, fmt.Errorf("%w: Retry-After is empty", ErrMalformed)
	}
	if n, ok := digits(s); ok {
		return seconds(n), nil
	}
	if t, err := http.ParseTime(s); err == nil {
		return max(t.Sub(now), 0), nil
	}
	why := "neither delay-seconds nor an HTTP-date"
	if s[0] == '-' {
		why = "negative"
	}
	return 0, fmt.Errorf("%w: Retry-After %s: %s", ErrMalformed, quote(s), why)
}

// digits parses s, which must be one or more ASCII digits, saturating at
// maxInteger.
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int64(c-'0'), maxInteger)
	}
	return n, true
}

// quote is s quoted for an error message, cut to 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}
