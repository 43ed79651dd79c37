package ratelimitheader

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Legacy is the de facto X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset fields that many services send (GitHub, GitLab, Twitter
// as X-Rate-Limit-*) and the drafts list as prior art. They are not
// Structured Fields: each is a plain number.
type Legacy struct {
	// Limit is the quota of the current window. Negative: absent (not
	// written; parsed as -1).
	Limit int64
	// Remaining is what is left of it. A negative value is written as 0.
	Remaining int64
	// Reset is the time until the window resets, written in whole seconds
	// rounded up. Negative (NoReset): absent.
	Reset time.Duration
}

// SetLegacy writes l into h as X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset, replacing their values; a field that l leaves absent is
// deleted. Reset is written as delay-seconds (a duration, as draft -06 does
// and unlike GitHub's Unix time), so clients need no synchronised clock.
// h must not be nil.
func SetLegacy(h http.Header, l Legacy) {
	if l.Limit >= 0 {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(l.Limit, 10))
	} else {
		h.Del("X-RateLimit-Limit")
	}
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(l.Remaining, 0), 10))
	if l.Reset >= 0 {
		h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(l.Reset), 10))
	} else {
		h.Del("X-RateLimit-Reset")
	}
}

// ParseLegacy reads the X-RateLimit-* fields of a response received at now
// (or, when X-RateLimit-X is absent, X-Rate-Limit-X). It reports false when
// X-RateLimit-Remaining is absent or has no valid value (Remaining is then
// 0). Limit is -1 when its field is absent or invalid, Reset NoReset.
//
// Limit and Remaining are non-negative integers (digits only), clamped to
// 999,999,999,999,999. Reset is seconds, with an optional fraction
// ("1.5"): delay-seconds, or, above 1e9, a Unix time (GitHub's form),
// taken as the time from now until it (0 when it is past). Should a field
// have several values (several lines, or a comma-separated line), the most
// restrictive valid one is taken: the least Limit and Remaining, the
// longest Reset. Invalid values are ignored, as is a field longer than
// MaxFieldSize bytes.
func ParseLegacy(h http.Header, now time.Time) (Legacy, bool) {
	l := Legacy{Limit: -1, Remaining: -1, Reset: NoReset}
	each(h, "Limit", func(s string) {
		if n, ok := digits(s); ok && (l.Limit < 0 || n < l.Limit) {
			l.Limit = n
		}
	})
	each(h, "Remaining", func(s string) {
		if n, ok := digits(s); ok && (l.Remaining < 0 || n < l.Remaining) {
			l.Remaining = n
		}
	})
	each(h, "Reset", func(s string) {
		if d, ok := resetOf(s, now); ok {
			l.Reset = max(l.Reset, d)
		}
	})
	if l.Remaining < 0 {
		return Legacy{Limit: l.Limit, Remaining: 0, Reset: l.Reset}, false
	}
	return l, true
}

// each calls f with every comma-separated value, trimmed, of the field
// X-RateLimit-<suffix>, or X-Rate-Limit-<suffix> when that is absent.
func each(h http.Header, suffix string, f func(string)) {
	vs := h.Values("X-Ratelimit-" + suffix)
	if len(vs) == 0 {
		vs = h.Values("X-Rate-Limit-" + suffix)
	}
	total := 0
	for _, v := range vs {
		total += len(v)
	}
	if total > MaxFieldSize {
		return
	}
	for _, v := range vs {
		for e := range strings.SplitSeq(v, ",") {
			if e = strings.Trim(e, " \t"); e != "" {
				f(e)
			}
		}
	}
}

// resetOf parses a legacy reset: seconds with an optional fraction, a Unix
// time when above 1e9.
func resetOf(s string, now time.Time) (time.Duration, bool) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	sec, ok := digits(whole)
	if !ok {
		return 0, false
	}
	var nsec int64
	if hasFrac {
		if _, ok := digits(frac); !ok {
			return 0, false
		}
		for i, scale := 0, int64(1e8); i < len(frac) && scale > 0; i, scale = i+1, scale/10 {
			nsec += int64(frac[i]-'0') * scale
		}
	}
	if sec > 1e9 || sec == 1e9 && nsec > 0 {
		return max(time.Unix(sec, nsec).Sub(now), 0), true
	}
	return time.Duration(sec)*time.Second + time.Duration(nsec), true
}
