package ratelimitheader

import (
	"net/http"
	"testing"
	"time"
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
