package rls

import (
	"context"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// ServerOption is the option a gRPC server of a Service is built with
// (grpc.NewServer(rls.ServerOption(), ...)) so that a request whose bytes
// are not a RateLimitRequest is refused INVALID_ARGUMENT, "rls: not a
// RateLimitRequest: " and the decoder's reason — the client's error.
// Without it grpc-go answers such a request INTERNAL, as if the server had
// failed. It sets the server's codec (grpc.ForceServerCodecV2), for this
// server only: the proto codec registered with grpc, for every service of
// the server, except that the RLS handler is told of a decoding failure
// instead of grpc-go answering it.
func ServerOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(codec{encoding.GetCodecV2(grpcproto.Name)})
}

// codec is the proto codec, except that a request the RLS handler decodes
// (a *request) keeps its decoding error for the handler to answer.
type codec struct{ encoding.CodecV2 }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*request); ok {
		r.err = c.CodecV2.Unmarshal(data, r.RateLimitRequest)
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// request is what the RLS handler decodes into: the RateLimitRequest (a
// proto message by its embedded methods, so any proto codec fills it) and,
// under codec, the error decoding it.
type request struct {
	*rlpb.RateLimitRequest
	err error
}

// serviceDesc is rlpb.RateLimitService_ServiceDesc with a handler that
// answers a request it cannot decode INVALID_ARGUMENT (under ServerOption).
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "envoy.service.ratelimit.v3.RateLimitService",
	HandlerType: (*rlpb.RateLimitServiceServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimit}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "envoy/service/ratelimit/v3/rls.proto",
}

func shouldRateLimit(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := &request{RateLimitRequest: new(rlpb.RateLimitRequest)}
	if err := dec(in); err != nil {
		return nil, err
	}
	if in.err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "rls: not a RateLimitRequest: %v", in.err)
	}
	s := srv.(rlpb.RateLimitServiceServer)
	if interceptor == nil {
		return s.ShouldRateLimit(ctx, in.RateLimitRequest)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlpb.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, in.RateLimitRequest, info, func(ctx context.Context, req any) (any, error) {
		return s.ShouldRateLimit(ctx, req.(*rlpb.RateLimitRequest))
	})
}
