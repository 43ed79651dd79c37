package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"
)

// Defaults of the connection and call bounds (Options.GRPCIdleTimeout,
// GRPCPingInterval, GRPCPingTimeout, MaxConnections, GRPCMaxStreams,
// GRPCCallTimeout).
const (
	DefaultGRPCIdleTimeout  = 5 * time.Minute
	DefaultGRPCPingInterval = time.Minute
	DefaultGRPCPingTimeout  = 20 * time.Second
	DefaultMaxConnections   = 10000
	// DefaultGRPCMaxStreams: calls in flight on one connection. An Envoy
	// worker sends its rate limit calls over one connection; at 100,000
	// calls a second of a millisecond each, that is 100 in flight.
	DefaultGRPCMaxStreams = 1024
	// DefaultGRPCCallTimeout: an RLS call takes milliseconds (Envoy's
	// rate limit filter gives up after 20 ms by default).
	DefaultGRPCCallTimeout = 10 * time.Second
	// MinClientPingInterval: a client that pings more often is sent a
	// GOAWAY (too_many_pings) and disconnected; pings are allowed without
	// calls in flight (they do not keep a connection from being idle).
	MinClientPingInterval = 10 * time.Second
)

// grpcBounds are the gRPC server's keepalive options: an idle connection
// is closed (GOAWAY, then close: a client such as Envoy reconnects on its
// next call), a silent peer is pinged and closed when it does not answer,
// a client that pings too often is refused; and its call bounds: at most
// GRPCMaxStreams calls in flight on a connection, each bounded by calls
// (whose streaming methods the caller sets once the services are
// registered). Negative values are refused.
func (o Options) grpcBounds() (_ []grpc.ServerOption, calls *callBound, _ error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"GRPCIdleTimeout", o.GRPCIdleTimeout}, {"GRPCPingInterval", o.GRPCPingInterval}, {"GRPCPingTimeout", o.GRPCPingTimeout}, {"GRPCCallTimeout", o.GRPCCallTimeout}} {
		if d.v < 0 {
			return nil, nil, fmt.Errorf("server: Options.%s %v: must be positive (0: the default)", d.name, d.v)
		}
	}
	if o.MaxConnections < 0 {
		return nil, nil, fmt.Errorf("server: Options.MaxConnections %d: must be positive (0: %d)", o.MaxConnections, DefaultMaxConnections)
	}
	if o.GRPCMaxStreams < 0 || o.GRPCMaxStreams > math.MaxInt32 {
		return nil, nil, fmt.Errorf("server: Options.GRPCMaxStreams %d: must be between 1 and %d, HTTP/2's largest stream count (0: %d)", o.GRPCMaxStreams, math.MaxInt32, DefaultGRPCMaxStreams)
	}
	streams := uint32(DefaultGRPCMaxStreams)
	if o.GRPCMaxStreams > 0 {
		streams = uint32(o.GRPCMaxStreams)
	}
	calls = &callBound{max: orDuration(o.GRPCCallTimeout, DefaultGRPCCallTimeout)}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(streams),
		grpc.InTapHandle(calls.tap),
		grpc.ChainStreamInterceptor(calls.untilMessage),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: orDuration(o.GRPCIdleTimeout, DefaultGRPCIdleTimeout),
			Time:              orDuration(o.GRPCPingInterval, DefaultGRPCPingInterval),
			Timeout:           orDuration(o.GRPCPingTimeout, DefaultGRPCPingTimeout),
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinClientPingInterval, PermitWithoutStream: true}),
	}, calls, nil
}

// callBound bounds each gRPC call, so that a stream whose request message
// never arrives (an attacker's HEADERS alone) cannot hold its goroutine
// and buffers for ever: grpc-go reads a unary call's message on the
// stream's context before any handler or interceptor runs, so the bound
// is set where that context is made, in the transport's tap (which runs
// once per stream, on the connection's reading goroutine, before the
// stream's reader takes the context).
//
// A unary call lives at most max from its HEADERS: its context gets that
// deadline unless the client's (grpc-timeout) is sooner, and a call past
// it ends DEADLINE_EXCEEDED (trailers with grpc-status 4). A streaming
// call (the health service's Watch, open as long as its client watches)
// is bounded only until its first request message arrives.
type callBound struct {
	max time.Duration
	// streaming holds the full names of the streaming methods
	// (/package.Service/Method). Set before the server serves; read-only
	// after.
	streaming map[string]bool
}

// setMethods records which of the registered methods are streaming.
func (b *callBound) setMethods(services map[string]grpc.ServiceInfo) {
	b.streaming = map[string]bool{}
	for name, svc := range services {
		for _, m := range svc.Methods {
			if m.IsClientStream || m.IsServerStream {
				b.streaming["/"+name+"/"+m.Name] = true
			}
		}
	}
}

// tap gives a new stream's context its bound. It never refuses a stream.
func (b *callBound) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if b.streaming[info.FullMethodName] {
		return b.untilFirstMessage(ctx), nil
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= b.max {
		return ctx, nil // the client's deadline is the sooner (Envoy's, 20 ms)
	}
	// Not cancelled here, on purpose: ctx is a child of the stream's
	// context, which the transport cancels on every path that ends the
	// stream (answered, reset, timed out, connection closed), and that
	// stops ctx's timer and releases it. Cancelling it ourselves would need
	// a hook at the call's end: context.AfterFunc(ctx, cancel), a goroutine
	// per call, measured +17 % on an end-to-end call without a client
	// deadline (BenchmarkGRPCCall); without it, within noise.
	ctx, cancel := context.WithTimeout(ctx, b.max)
	_ = cancel
	return ctx, nil
}

// errNoMessage is the cause with which a streaming call's context is
// cancelled when its first request message has not arrived in time.
var errNoMessage = errors.New("server: no request message within GRPCCallTimeout")

// untilFirstMessage is ctx, cancelled with errNoMessage after b.max
// unless untilMessage stops its timer first. (A stream that ends before
// its first message leaves its timer to fire, a no-op, at b.max.)
func (b *callBound) untilFirstMessage(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	return &firstMessageCtx{Context: ctx, timer: time.AfterFunc(b.max, func() { cancel(errNoMessage) })}
}

// firstMessageCtx is a streaming call's context. Its Err, once its timer
// has cancelled it, is context.DeadlineExceeded: the transport's reader,
// which holds this context, answers the call DEADLINE_EXCEEDED (trailers
// with grpc-status 4), as a unary call past its deadline is answered.
type firstMessageCtx struct {
	context.Context
	timer *time.Timer
}

func (c *firstMessageCtx) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), errNoMessage) {
		return context.DeadlineExceeded
	}
	return err
}

// firstMessageKey finds a call's *firstMessageCtx in its derived contexts.
type firstMessageKey struct{}

func (c *firstMessageCtx) Value(key any) any {
	if key == (firstMessageKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// untilMessage is the stream interceptor that stops a streaming call's
// timer once its first message is received (its handler reads it).
func (b *callBound) untilMessage(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c, ok := ss.Context().Value(firstMessageKey{}).(*firstMessageCtx)
	if !ok {
		return handler(srv, ss)
	}
	return handler(srv, &firstMessage{ServerStream: ss, timer: c.timer})
}

// firstMessage is a streaming call's stream, which stops the call's timer
// at its first message. RecvMsg is called by one goroutine at a time
// (grpc.ServerStream's rule).
type firstMessage struct {
	grpc.ServerStream
	timer    *time.Timer
	received bool
}

func (s *firstMessage) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if !s.received {
		s.received = true
		s.timer.Stop()
	}
	return err
}

// maxConnections is what each listener holds at once.
func (o Options) maxConnections() int {
	if o.MaxConnections > 0 {
		return o.MaxConnections
	}
	return DefaultMaxConnections
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
