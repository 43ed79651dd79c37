package rls

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// Defaults of GRPCOptions' bounds.
const (
	// DefaultIdleTimeout: a connection with no call in flight this long is
	// closed (GOAWAY).
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultPingInterval and DefaultPingTimeout: a connection silent for
	// the interval is pinged, and closed when the ping is not answered
	// within the timeout.
	DefaultPingInterval = time.Minute
	DefaultPingTimeout  = 20 * time.Second
	// DefaultMaxStreams: calls in flight on one connection. An Envoy
	// worker sends its rate limit calls over one connection; at 100,000
	// calls a second of a millisecond each, that is 100 in flight.
	DefaultMaxStreams = 1024
	// DefaultCallTimeout: an RLS call takes milliseconds (Envoy's rate
	// limit filter gives up after 20 ms by default).
	DefaultCallTimeout = 10 * time.Second
	// DefaultMaxMessage is the largest request message, in bytes.
	DefaultMaxMessage = 1 << 20
	// MinClientPingInterval: a client that pings more often is sent a
	// GOAWAY (too_many_pings) and disconnected; pings are allowed without
	// calls in flight (they do not keep a connection from being idle).
	MinClientPingInterval = 10 * time.Second

	// handshakeTimeout bounds a new connection's HTTP/2 preface and
	// settings.
	handshakeTimeout = 5 * time.Second
)

// GRPCOptions bounds a GRPCServer's connections and calls. A zero field
// means its default; a negative one is refused.
type GRPCOptions struct {
	// IdleTimeout closes a connection that has had no call in flight for
	// this long, with a GOAWAY (a client such as Envoy reconnects on its
	// next call, failing none). Default DefaultIdleTimeout (5 min).
	IdleTimeout time.Duration
	// PingInterval and PingTimeout: a connection silent for PingInterval
	// is pinged, and closed when the ping is not answered within
	// PingTimeout (a peer gone without closing). Defaults
	// DefaultPingInterval (1 min; gRPC pings every second at most) and
	// DefaultPingTimeout (20 s). A client may ping every
	// MinClientPingInterval at most, calls in flight or not.
	PingInterval, PingTimeout time.Duration
	// MaxStreams caps the calls in flight on one connection, announced in
	// its HTTP/2 SETTINGS (SETTINGS_MAX_CONCURRENT_STREAMS), which clients
	// keep to (grpc-go waits for a free stream, Envoy opens another
	// connection); a stream past it is refused with RST_STREAM
	// REFUSED_STREAM, safe to retry. At most 2^31-1. Default
	// DefaultMaxStreams (1024; grpc-go's own default is no bound).
	MaxStreams int
	// CallTimeout bounds a call's life: a unary call (every RLS call) ends
	// with DEADLINE_EXCEEDED this long after its HEADERS if it has not
	// answered, whether its request message never arrived or the client's
	// deadline (grpc-timeout) is longer; a shorter client deadline applies
	// as it is. A streaming call (the health service's Watch) is bounded
	// only until its request message arrives. Default DefaultCallTimeout
	// (10 s).
	CallTimeout time.Duration
	// MaxMessage is the largest request message, in bytes; a larger one is
	// refused RESOURCE_EXHAUSTED. Default DefaultMaxMessage (1 MiB).
	MaxMessage int
	// TLS, when set, serves TLS with it (its GetConfigForClient may give
	// another certificate to each new connection: a reloaded one); clear
	// text otherwise. The handshake is bounded by the 5 s a new
	// connection has for its preface.
	TLS *tls.Config
	// HandshakeFailed, when set, is called with the error of each
	// connection whose TLS handshake fails (a client without an acceptable
	// certificate under mTLS, a scanner), for a metric and a log line.
	HandshakeFailed func(error)
}

// GRPCServer serves a Service over gRPC: Envoy's RateLimitService (a
// request whose bytes are not a RateLimitRequest is INVALID_ARGUMENT, see
// ServerOption) and the standard health service (grpc.health.v1, the
// server's overall status), under the bounds of its GRPCOptions; a new
// connection has 5 s to say its HTTP/2 preface. Its methods are safe for
// concurrent use.
type GRPCServer struct {
	srv    *grpc.Server
	health *health.Server
}

// NewGRPCServer returns a server of svc, not serving yet (see Serve); its
// health service reports SERVING until SetServing(false).
func NewGRPCServer(svc *Service, opts GRPCOptions) (*GRPCServer, error) {
	if svc == nil {
		return nil, errors.New("rls: NewGRPCServer: the Service is required")
	}
	bounds, calls, err := opts.serverOptions()
	if err != nil {
		return nil, err
	}
	if opts.TLS != nil {
		bounds = append(bounds, grpc.Creds(countedTLS{credentials.NewTLS(opts.TLS), opts.HandshakeFailed}))
	}
	srv := grpc.NewServer(append(bounds, ServerOption(), grpc.ConnectionTimeout(handshakeTimeout))...)
	svc.Register(srv)
	h := health.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	calls.setMethods(srv.GetServiceInfo())
	return &GRPCServer{srv: srv, health: h}, nil
}

// countedTLS is gRPC's TLS credentials, counting the failed server
// handshakes.
type countedTLS struct {
	credentials.TransportCredentials
	failed func(error)
}

func (c countedTLS) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	nc, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil && c.failed != nil {
		c.failed(err)
	}
	return nc, info, err
}

func (c countedTLS) Clone() credentials.TransportCredentials {
	return countedTLS{c.TransportCredentials.Clone(), c.failed}
}

// Serve accepts connections on ln until GracefulStop or Stop, and then
// returns nil (also when called after them); otherwise it returns ln's
// failure. ln is closed when Serve returns.
func (g *GRPCServer) Serve(ln net.Listener) error {
	if err := g.srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// GracefulStop stops accepting connections and calls, and returns once the
// calls in flight have been answered.
func (g *GRPCServer) GracefulStop() { g.srv.GracefulStop() }

// Stop closes every connection at once, failing the calls in flight.
func (g *GRPCServer) Stop() { g.srv.Stop() }

// SetServing sets what the health service reports: SERVING, or
// NOT_SERVING (a server about to stop, so that clients go elsewhere).
func (g *GRPCServer) SetServing(serving bool) {
	if serving {
		g.health.Resume()
		return
	}
	g.health.Shutdown()
}

// serverOptions are the gRPC server's keepalive options: an idle
// connection is closed (GOAWAY, then close: a client such as Envoy
// reconnects on its next call), a silent peer is pinged and closed when it
// does not answer, a client that pings too often is refused; and its call
// bounds: the largest message, at most MaxStreams calls in flight on a
// connection, each bounded by calls (whose streaming methods the caller
// sets once the services are registered). Negative values are refused.
func (o GRPCOptions) serverOptions() (_ []grpc.ServerOption, calls *callBound, _ error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"IdleTimeout", o.IdleTimeout}, {"PingInterval", o.PingInterval}, {"PingTimeout", o.PingTimeout}, {"CallTimeout", o.CallTimeout}} {
		if d.v < 0 {
			return nil, nil, fmt.Errorf("rls: GRPCOptions.%s %v: must be positive (0: the default)", d.name, d.v)
		}
	}
	if o.MaxStreams < 0 || o.MaxStreams > math.MaxInt32 {
		return nil, nil, fmt.Errorf("rls: GRPCOptions.MaxStreams %d: must be between 1 and %d, HTTP/2's largest stream count (0: %d)", o.MaxStreams, math.MaxInt32, DefaultMaxStreams)
	}
	if o.MaxMessage < 0 {
		return nil, nil, fmt.Errorf("rls: GRPCOptions.MaxMessage %d: must be positive (0: %d)", o.MaxMessage, DefaultMaxMessage)
	}
	calls = &callBound{max: orDefault(o.CallTimeout, DefaultCallTimeout)}
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(orDefault(o.MaxMessage, DefaultMaxMessage)),
		grpc.MaxConcurrentStreams(uint32(orDefault(o.MaxStreams, DefaultMaxStreams))),
		grpc.InTapHandle(calls.tap),
		grpc.ChainStreamInterceptor(calls.untilMessage),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: orDefault(o.IdleTimeout, DefaultIdleTimeout),
			Time:              orDefault(o.PingInterval, DefaultPingInterval),
			Timeout:           orDefault(o.PingTimeout, DefaultPingTimeout),
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinClientPingInterval, PermitWithoutStream: true}),
	}, calls, nil
}

func orDefault[T time.Duration | int](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
