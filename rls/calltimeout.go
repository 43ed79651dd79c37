package rls

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

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
var errNoMessage = errors.New("rls: no request message within the call timeout")

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
