// Command rlsnoop is a do-nothing Envoy RLS v3 server: ShouldRateLimit
// answers OK for every descriptor without looking at it. Loaded by rlsload on
// the same cores, it is the ceiling a real decision service is measured
// against.
//
//	rlsnoop -addr 127.0.0.1:18091
//
// It serves until SIGINT or SIGTERM, then stops at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsnoop:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rlsnoop", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:18091", "gRPC listen `host:port`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(srv, noop{})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		srv.Stop()
		<-errc
		return nil
	}
}

// noop answers every request OK, with one OK status per descriptor.
type noop struct {
	rls.UnimplementedRateLimitServiceServer
}

func (noop) ShouldRateLimit(_ context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	st := make([]*rls.RateLimitResponse_DescriptorStatus, len(req.Descriptors))
	for i := range st {
		st[i] = &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
	}
	return &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK, Statuses: st}, nil
}
