package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
)

// Two health checks per minute for each API key: the third is refused
// with RESOURCE_EXHAUSTED and a RetryInfo.
func Example() {
	clock := limittest.NewClock(limittest.Epoch) // a real store reads the time itself
	store, err := memstore.New(memstore.Options{Now: clock.Now})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	limits, err := grpclimit.New(grpclimit.Options{
		Limiter: store,
		Rules: []grpclimit.Rule{{
			Name:  "health-per-key",
			Match: grpclimit.Match{Methods: []string{"/grpc.health.v1.Health/*"}},
			Quotas: []grpclimit.Quota{{
				Limit: sluice.Limit{Name: "per-key", Quota: 2, Window: time.Minute},
				Key:   grpclimit.Key{Kind: grpclimit.Metadata, Metadata: "x-api-key"},
			}},
		}},
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limits.Unary()), grpc.ChainStreamInterceptor(limits.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k-123")
	for i := 1; i <= 3; i++ {
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		st := status.Convert(err)
		fmt.Printf("call %d: %v %q ratelimit: %s\n", i, st.Code(), st.Message(), header.Get("ratelimit"))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("retry in", ri.GetRetryDelay().AsDuration())
			}
		}
	}
	// Output:
	// call 1: OK "" ratelimit: ["per-key";r=1;t=30]
	// call 2: OK "" ratelimit: ["per-key";r=0;t=60]
	// call 3: ResourceExhausted "rate limited" ratelimit: ["per-key";r=0;t=30]
	// retry in 30s
}
