package rls_test

import (
	"context"
	"sync/atomic"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// FuzzShouldRateLimit: whatever bytes arrive as a request, the service
// answers without panicking, on a configuration with nesting, wildcards,
// shadow mode, unlimited, replaces and share_threshold: a request within
// the documented bounds (wellFormed) gets one status per descriptor, never
// an error — whatever its hits and overrides ask, nothing turns it into a
// failed, uncounted call — and one beyond them is INVALID_ARGUMENT. A
// descriptor of the api_key rule asking more than its 3 a second is
// OVER_LIMIT (unless tenant=gold's rule replaces it).
func FuzzShouldRateLimit(f *testing.F) {
	d, err := envoyconfig.Parse("fuzz.yaml", []byte(`domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 3, name: per_key}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
  - key: tenant
    value: gold
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 0, replaces: [{name: per_key}]}
`))
	if err != nil {
		f.Fatal(err)
	}
	c, err := envoyconfig.New(d)
	if err != nil {
		f.Fatal(err)
	}
	var m atomic.Pointer[rls.Matcher]
	matcher := rls.FromEnvoyConfig(c)
	m.Store(&matcher)
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ms.Close() })
	svc, err := rls.New(rls.Options{Limiter: ms, Config: &m, Headers: true})
	if err != nil {
		f.Fatal(err)
	}
	seed := func(req *rlpb.RateLimitRequest) {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	over := desc("api_key", "k")
	over.HitsAddend = wrapperspb.UInt64(1 << 40)
	seed(&rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "k"), desc("path", "/files/a"), desc("ip", "x"), desc("internal", "y"), desc("tenant", "gold", "api_key", "k"), over}, HitsAddend: 2})
	seed(&rlpb.RateLimitRequest{Domain: "nope", Descriptors: []*commonrl.RateLimitDescriptor{desc("a", "b")}})
	// The probe's: the same descriptor twice at the largest request hits
	// (summed beyond what a store represents), a descriptor's own hits of
	// 5e9 beside another, overrides with and without a unit.
	seed(&rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "dup1"), desc("api_key", "dup1")}, HitsAddend: 1<<32 - 1})
	five := desc("api_key", "k")
	five.HitsAddend = wrapperspb.UInt64(5e9)
	seed(&rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{five, desc("path", "/files/a")}})
	for _, u := range []typev3.RateLimitUnit{typev3.RateLimitUnit_UNKNOWN, typev3.RateLimitUnit_MINUTE, 99} {
		o := desc("api_key", "k")
		o.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: u}
		seed(&rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "k"), o}})
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlpb.RateLimitRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		resp, err := svc.ShouldRateLimit(context.Background(), &req)
		good := wellFormed(&req)
		if err != nil {
			if code := status.Code(err); code != codes.InvalidArgument || good {
				t.Fatalf("a request within the bounds (%v) refused: %v: %v", good, code, err)
			}
			return
		}
		if !good {
			t.Fatalf("a request beyond the bounds answered: %v", resp)
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		replaced := false // tenant=gold's nested rule replaces per_key
		for _, d := range req.Descriptors {
			if es := d.GetEntries(); es[0].GetKey() == "tenant" && es[0].GetValue() == "gold" {
				replaced = true
			}
		}
		for i, d := range req.Descriptors {
			es := d.GetEntries()
			hits := uint64(max(req.HitsAddend, 1))
			if h := d.GetHitsAddend(); h != nil {
				hits = h.GetValue()
			}
			if req.Domain == "edge" && !replaced && len(es) == 1 && es[0].GetKey() == "api_key" && d.GetLimit() == nil && hits > 3 &&
				resp.Statuses[i].Code != rlpb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("descriptor %d asks %d of 3: %v", i, hits, resp.Statuses[i])
			}
		}
	})
}

// wellFormed reports whether req is within the bounds the service
// documents: a domain of 1 to 256 bytes; 1 to DefaultMaxDescriptors
// descriptors of 1 to MaxEntries entries, each key of 1 to MaxEntryBytes
// bytes, each value at most MaxEntryBytes; no is_negative_hits; a limit
// override only with a unit of time.
func wellFormed(req *rlpb.RateLimitRequest) bool {
	if req.Domain == "" || len(req.Domain) > 256 || len(req.Descriptors) == 0 || len(req.Descriptors) > rls.DefaultMaxDescriptors {
		return false
	}
	for _, d := range req.Descriptors {
		if len(d.Entries) == 0 || len(d.Entries) > rls.MaxEntries || d.IsNegativeHits {
			return false
		}
		for _, e := range d.Entries {
			if e.Key == "" || len(e.Key) > rls.MaxEntryBytes || len(e.Value) > rls.MaxEntryBytes {
				return false
			}
		}
		// SECOND (1) to YEAR (6), and rls.proto's WEEK (7).
		if o := d.Limit; o != nil && (o.Unit < typev3.RateLimitUnit_SECOND || o.Unit > 7) {
			return false
		}
	}
	return true
}
