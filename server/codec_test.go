package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends the bytes it is given as they are, and reads an answer
// as a RateLimitResponse: a client that can send what no protobuf
// library would.
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

// Bytes that are not a RateLimitRequest are INVALID_ARGUMENT with a reason
// (grpc-go would answer INTERNAL, as for a bug of the server); a well-formed
// request on the same connection still answers.
func TestMalformedRequestIsInvalidArgument(t *testing.T) {
	t.Parallel()
	f := start(t, map[string]string{"edge.yaml": config(2)})
	conn, err := grpc.NewClient(f.s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	good, err := proto.Marshal(request("k"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"truncated field":    {0x0a, 0x05, 'e', 'd'},                       // domain: 5 bytes announced, 2 sent
		"bad wire type":      {0x0f},                                       // field 1, wire type 7
		"invalid UTF-8":      {0x0a, 0x02, 0xff, 0xfe},                     // domain is a string
		"truncated varint":   {0x18, 0xff, 0xff},                           // hits_addend never ends
		"descriptor garbage": append([]byte{0x12, 0x03}, 0x0a, 0x09, 0x01), // descriptors[0].entries cut
	} {
		var out rlpb.RateLimitResponse
		err := conn.Invoke(context.Background(), rlpb.RateLimitService_ShouldRateLimit_FullMethodName, b, &out, grpc.ForceCodecV2(rawCodec{}))
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "rls: not a RateLimitRequest: ") {
			t.Errorf("%s: %v %q, want INVALID_ARGUMENT saying it is not a RateLimitRequest", name, st.Code(), st.Message())
		}
	}
	var out rlpb.RateLimitResponse
	if err := conn.Invoke(context.Background(), rlpb.RateLimitService_ShouldRateLimit_FullMethodName, good, &out, grpc.ForceCodecV2(rawCodec{})); err != nil || out.OverallCode != rlpb.RateLimitResponse_OK {
		t.Fatalf("a well-formed request after them: %v %v", &out, err)
	}
}
