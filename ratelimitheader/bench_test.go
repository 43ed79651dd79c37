package ratelimitheader

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// The fields a server writes on every response: one limit, or three with
// partition keys; hand-formatted against httpsfv.Marshal.
func BenchmarkFormatLimits(b *testing.B) {
	one := []Limit{{Name: "per-user", Remaining: 41, Reset: 12300 * time.Millisecond}}
	three := []Limit{
		{Name: "per-ip", Remaining: 9, Reset: 800 * time.Millisecond, PartitionKey: []byte("203.0.113.7")},
		{Name: "per-user", Remaining: 41, Reset: 12300 * time.Millisecond, PartitionKey: []byte("user-42")},
		{Name: "daily", Remaining: 9_880, Reset: 13 * time.Hour, PartitionKey: []byte("user-42")},
	}
	for _, c := range []struct {
		name string
		ls   []Limit
	}{{"limits=1", one}, {"limits=3+pk", three}} {
		b.Run(c.name+"/impl=sluice", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := FormatLimits(c.ls); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/impl=httpsfv", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := marshalLimits(c.ls); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFormatPolicies(b *testing.B) {
	ps := []Policy{
		{Name: "per-ip", Quota: 10, Window: time.Second},
		{Name: "per-user", Quota: 100, Window: time.Minute},
		{Name: "daily", Quota: 10_000, Unit: "requests", Window: 24 * time.Hour},
	}
	b.Run("impl=sluice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := FormatPolicies(ps); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=httpsfv", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalPolicies(ps); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Set on a response's header, as middleware does: the policy and limit of
// one request.
func BenchmarkSet(b *testing.B) {
	ps := []Policy{{Name: "per-user", Quota: 100, Window: time.Minute}}
	ls := []Limit{{Name: "per-user", Remaining: 41, Reset: 12300 * time.Millisecond}}
	for _, v := range []Version{Draft11, Draft06} {
		b.Run("version="+v.String(), func(b *testing.B) {
			b.ReportAllocs()
			h := http.Header{}
			for b.Loop() {
				if err := Set(h, v, ps, ls); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseLimits(b *testing.B) {
	v := []string{`"per-ip";r=9;t=1;pk=:MjAzLjAuMTEzLjc=:, "per-user";r=41;t=13;pk=:dXNlci00Mg==:`}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseLimits(v); err != nil {
			b.Fatal(err)
		}
	}
}

// A middleware's fast path: the RateLimit value of one or three limits
// from their decisions, into a buffer with room (LimitField), against
// LimitOf and FormatLimits.
func BenchmarkLimitField(b *testing.B) {
	names := []string{"per-ip", "per-user", "daily"}
	ds := []sluice.Decision{
		{Allowed: true, Remaining: 9, ResetAfter: 800 * time.Millisecond},
		{Allowed: true, Remaining: 41, ResetAfter: 12300 * time.Millisecond},
		{Allowed: true, Remaining: 9_880, ResetAfter: 13 * time.Hour},
	}
	for _, n := range []int{1, 3} {
		f, err := NewLimitField(names[:n])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("limits=%d/impl=append", n), func(b *testing.B) {
			b.ReportAllocs()
			var buf [128]byte
			for b.Loop() {
				f.Append(buf[:0], ds[:n])
			}
		})
		b.Run(fmt.Sprintf("limits=%d/impl=format", n), func(b *testing.B) {
			b.ReportAllocs()
			ls := make([]Limit, n)
			for b.Loop() {
				for i := range n {
					ls[i] = LimitOf(names[i], ds[i])
				}
				if _, err := FormatLimits(ls); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
