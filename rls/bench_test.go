package rls_test

import (
	"context"
	"sync/atomic"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// The service's own cost per call, without gRPC: one descriptor, the
// memory store, metrics on, response headers on.
func BenchmarkShouldRateLimit(b *testing.B) {
	d, err := envoyconfig.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: key\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	c, err := envoyconfig.New(d)
	if err != nil {
		b.Fatal(err)
	}
	var m atomic.Pointer[rls.Matcher]
	matcher := rls.FromEnvoyConfig(c)
	m.Store(&matcher)
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer ms.Close()
	obs, err := metrics.New(metrics.Options{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := rls.New(rls.Options{Limiter: ms, Config: &m, Observer: obs, Headers: true})
	if err != nil {
		b.Fatal(err)
	}
	req := &rlpb.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{desc("key", "k1")}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
