package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
)

// headerSink is a server stream that takes header metadata and drops it.
type headerSink struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *headerSink) Context() context.Context    { return s.ctx }
func (s *headerSink) SetHeader(metadata.MD) error { return nil }

// What an allowed stream costs the interceptor: the decision itself
// allocates nothing (a rule in shadow mode writes no metadata); the
// ratelimit metadata takes a few allocations, and a rule of several limits
// a few more (AllowAll's).
func TestStreamAllocs(t *testing.T) {
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	perPeer := sluice.Limit{Name: "per-peer", Quota: 1e9, Window: time.Second}
	everyone := sluice.Limit{Name: "global", Quota: 1e9, Window: time.Second}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 4711}})
	info := &grpc.StreamServerInfo{FullMethod: "/test.Echo/Chat"}
	handler := func(any, grpc.ServerStream) error { return nil }
	ss := &headerSink{ctx: ctx}
	for _, c := range []struct {
		name string
		rule grpclimit.Rule
		max  float64
	}{
		{"shadow", grpclimit.Rule{Name: "r", Shadow: true, Quotas: []grpclimit.Quota{{Limit: everyone, Key: global}}}, 0},
		{"global", grpclimit.Rule{Name: "r", Quotas: []grpclimit.Quota{{Limit: everyone, Key: global}}}, 4},
		{"peer", grpclimit.Rule{Name: "r", Quotas: []grpclimit.Quota{{Limit: perPeer, Key: grpclimit.Key{Kind: grpclimit.Peer}}}}, 5},
		{"peer and global", grpclimit.Rule{Name: "r", Quotas: []grpclimit.Quota{{Limit: perPeer, Key: grpclimit.Key{Kind: grpclimit.Peer}}, {Limit: everyone, Key: global}}}, 8},
	} {
		in, err := grpclimit.New(grpclimit.Options{Limiter: ms, Rules: []grpclimit.Rule{c.rule}})
		if err != nil {
			t.Fatal(err)
		}
		stream := in.Stream()
		if n := testing.AllocsPerRun(100, func() { _ = stream(nil, ss, info, handler) }); n > c.max {
			t.Errorf("%s: %v allocations per stream, want at most %v", c.name, n, c.max)
		}
	}
}
