package clientip

import (
	"strings"
	"testing"
)

// go test -run '^$' -bench . -benchmem ./clientip/
func BenchmarkKey(b *testing.B) {
	xff, fwd := Options{TrustedProxies: testTrusted}, Options{TrustedProxies: testTrusted, Header: Forwarded}
	trustedChain := strings.TrimSuffix(strings.Repeat("10.0.0.2, ", 100), ", ")
	tests := []struct {
		name string
		opts Options
		h    Header
		peer string
		hdr  []string
	}{
		{"peer", Options{}, ForwardedFor, "203.0.113.7:51234", nil},
		{"peer-ipv6", Options{}, ForwardedFor, "[2001:db8:1:2:3:4:5:6]:51234", nil},
		{"untrusted-peer-with-header", xff, ForwardedFor, "203.0.113.7:51234", []string{"1.1.1.1, 2.2.2.2"}},
		{"xff-3-hops", xff, ForwardedFor, "10.0.0.3:1", []string{"1.1.1.1, 203.0.113.7, 10.0.0.1, 10.0.0.2"}},
		{"forwarded-3-hops", fwd, Forwarded, "10.0.0.3:1", []string{`for=1.1.1.1, for="[2001:db8::1]:4711";proto=https, for=10.0.0.1, for=10.0.0.2`}},
		{"xff-hop-bound", xff, ForwardedFor, "10.0.0.3:1", []string{trustedChain}},
		{"xff-1MiB-spoofed", xff, ForwardedFor, "10.0.0.3:1", []string{strings.Repeat("1.1.1.1,", 1<<17) + "203.0.113.7, 10.0.0.2"}},
		{"xff-byte-bound-commas", xff, ForwardedFor, "10.0.0.3:1", []string{strings.Repeat(",", 1<<20)}},
		{"forwarded-byte-bound-quotes", fwd, Forwarded, "10.0.0.3:1", []string{`for="` + strings.Repeat(`\",`, 1<<19) + `"`}},
		{"forwarded-byte-bound-backslashes", fwd, Forwarded, "10.0.0.3:1", []string{strings.Repeat(`\\\\\\\"`, 1<<17)}},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			r := mustNew(b, tt.opts)
			req := newRequest(tt.peer, tt.h, tt.hdr...)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Key(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkKeyParallel(b *testing.B) {
	r := mustNew(b, Options{TrustedProxies: testTrusted})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := newRequest("10.0.0.3:1", ForwardedFor, "1.1.1.1, 203.0.113.7, 10.0.0.1, 10.0.0.2")
		for pb.Next() {
			if _, err := r.Key(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
