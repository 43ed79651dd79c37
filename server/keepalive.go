package server

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Defaults of the connection bounds (Options.GRPCIdleTimeout,
// GRPCPingInterval, GRPCPingTimeout, MaxConnections).
const (
	DefaultGRPCIdleTimeout  = 5 * time.Minute
	DefaultGRPCPingInterval = time.Minute
	DefaultGRPCPingTimeout  = 20 * time.Second
	DefaultMaxConnections   = 10000
	// MinClientPingInterval: a client that pings more often is sent a
	// GOAWAY (too_many_pings) and disconnected; pings are allowed without
	// calls in flight (they do not keep a connection from being idle).
	MinClientPingInterval = 10 * time.Second
)

// grpcBounds are the gRPC server's keepalive options: an idle connection
// is closed (GOAWAY, then close: a client such as Envoy reconnects on its
// next call), a silent peer is pinged and closed when it does not answer,
// a client that pings too often is refused. Negative durations are
// refused.
func (o Options) grpcBounds() ([]grpc.ServerOption, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"GRPCIdleTimeout", o.GRPCIdleTimeout}, {"GRPCPingInterval", o.GRPCPingInterval}, {"GRPCPingTimeout", o.GRPCPingTimeout}} {
		if d.v < 0 {
			return nil, fmt.Errorf("server: Options.%s %v: must be positive (0: the default)", d.name, d.v)
		}
	}
	if o.MaxConnections < 0 {
		return nil, fmt.Errorf("server: Options.MaxConnections %d: must be positive (0: %d)", o.MaxConnections, DefaultMaxConnections)
	}
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: orDuration(o.GRPCIdleTimeout, DefaultGRPCIdleTimeout),
			Time:              orDuration(o.GRPCPingInterval, DefaultGRPCPingInterval),
			Timeout:           orDuration(o.GRPCPingTimeout, DefaultGRPCPingTimeout),
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinClientPingInterval, PermitWithoutStream: true}),
	}, nil
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
