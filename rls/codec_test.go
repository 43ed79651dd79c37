package rls_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/rls"
)

// rawCodec sends the bytes it is given as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// With ServerOption, bytes that are not a RateLimitRequest are
// INVALID_ARGUMENT; without it, grpc-go's INTERNAL, as documented. Either
// way a well-formed request is served, and an interceptor sees it as a
// *RateLimitRequest.
func TestServerOption(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts []grpc.ServerOption
		want codes.Code
	}{{[]grpc.ServerOption{rls.ServerOption()}, codes.InvalidArgument}, {nil, codes.Internal}} {
		ms, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ms.Close() })
		var m atomic.Pointer[rls.Matcher]
		var matcher rls.Matcher = rules
		m.Store(&matcher)
		svc, err := rls.New(rls.Options{Limiter: ms, Config: &m})
		if err != nil {
			t.Fatal(err)
		}
		var seen atomic.Value
		record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			seen.Store(fmt.Sprintf("%s %T", info.FullMethod, req))
			return h(ctx, req)
		}
		srv := grpc.NewServer(append(c.opts, grpc.UnaryInterceptor(record))...)
		svc.Register(srv)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(lis) }()
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(); srv.Stop(); <-done })

		var out rlpb.RateLimitResponse
		err = conn.Invoke(context.Background(), rlpb.RateLimitService_ShouldRateLimit_FullMethodName, []byte{0x0a, 0x05, 'e', 'd'}, &out, grpc.ForceCodecV2(rawCodec{}))
		if got := status.Code(err); got != c.want {
			t.Errorf("options %v: a truncated request: %v, want %v", c.opts, err, c.want)
		}
		resp, err := rlpb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "k")}})
		if err != nil || resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
			t.Errorf("options %v: a good request: %v %v", c.opts, resp, err)
		}
		if got, want := seen.Load(), rlpb.RateLimitService_ShouldRateLimit_FullMethodName+" *ratelimitv3.RateLimitRequest"; got != want {
			t.Errorf("options %v: the interceptor saw %v, want %q", c.opts, got, want)
		}
	}
}
