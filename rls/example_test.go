package rls_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// exampleService is a Service of an envoyproxy/ratelimit file (2 calls a
// minute per api_key) on the memory store, whose clock stands still at
// 10 s past a minute so that the output does not change.
func exampleService() (*rls.Service, func()) {
	d, err := envoyconfig.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"))
	if err != nil {
		panic(err)
	}
	cfg, err := envoyconfig.New(d)
	if err != nil {
		panic(err)
	}
	var config atomic.Pointer[rls.Matcher]
	m := rls.FromEnvoyConfig(cfg)
	config.Store(&m) // swap it to reload
	now := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	store, err := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	svc, err := rls.New(rls.Options{Limiter: store, Config: &config})
	if err != nil {
		panic(err)
	}
	return svc, func() { store.Close() }
}

// The /json endpoint: the same decisions as the gRPC service, as JSON.
func Example() {
	svc, closeStore := exampleService()
	defer closeStore()
	h := rls.JSONHandler(svc)
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/json", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`)))
		fmt.Print(w.Code, " ", w.Body)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/json", nil))
	fmt.Print(w.Code, " ", w.Body)
	// Output:
	// 200 {"overall_code":"OK","statuses":[{"code":"OK","current_limit":{"requests_per_unit":2,"unit":"MINUTE"},"limit_remaining":1,"duration_until_reset":"50s"}]}
	// 200 {"overall_code":"OK","statuses":[{"code":"OK","current_limit":{"requests_per_unit":2,"unit":"MINUTE"},"duration_until_reset":"50s"}]}
	// 429 {"overall_code":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","current_limit":{"requests_per_unit":2,"unit":"MINUTE"},"duration_until_reset":"50s"}]}
	// 405 {"error":"method GET: POST an RLS request (RateLimitRequest) as JSON"}
}

// Envoy's rate limit service over gRPC, with its bounds and the health
// service, on a loopback port.
func ExampleNewGRPCServer() {
	svc, closeStore := exampleService()
	defer closeStore()
	srv, err := rls.NewGRPCServer(svc, rls.GRPCOptions{CallTimeout: time.Second}) // zero fields: the defaults
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	client := rlpb.NewRateLimitServiceClient(conn)
	req := &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k2"}}},
	}}
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	conn.Close()
	srv.SetServing(false) // health: NOT_SERVING, so that clients go elsewhere
	srv.GracefulStop()    // answers the calls in flight
	fmt.Println("Serve:", <-served)
	// Output:
	// OK 1
	// OK 0
	// OVER_LIMIT 0
	// Serve: <nil>
}
