package rls_test

import (
	"context"
	"sync/atomic"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// FuzzShouldRateLimit: whatever bytes arrive as a request, the service
// answers without panicking — INVALID_ARGUMENT, or one status per
// descriptor — on a configuration with nesting, wildcards, shadow mode,
// unlimited, replaces and share_threshold.
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
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlpb.RateLimitRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		resp, err := svc.ShouldRateLimit(context.Background(), &req)
		if err != nil {
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Fatalf("%v: %v", code, err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
	})
}
