package server

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/rls"
)

// Defaults of the connection and call bounds (Options.GRPCIdleTimeout,
// GRPCPingInterval, GRPCPingTimeout, MaxConnections, GRPCMaxStreams,
// GRPCCallTimeout): the gRPC ones are rls.GRPCOptions' defaults.
const (
	DefaultGRPCIdleTimeout  = rls.DefaultIdleTimeout
	DefaultGRPCPingInterval = rls.DefaultPingInterval
	DefaultGRPCPingTimeout  = rls.DefaultPingTimeout
	DefaultMaxConnections   = 10000
	DefaultGRPCMaxStreams   = rls.DefaultMaxStreams
	DefaultGRPCCallTimeout  = rls.DefaultCallTimeout
	// MinClientPingInterval: a client that pings more often is sent a
	// GOAWAY (too_many_pings) and disconnected.
	MinClientPingInterval = rls.MinClientPingInterval
)

// grpcOptions are the gRPC listener's bounds, refusing negative values
// (and more streams than HTTP/2 counts) with the name of the Options field.
func (o Options) grpcOptions() (rls.GRPCOptions, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"GRPCIdleTimeout", o.GRPCIdleTimeout}, {"GRPCPingInterval", o.GRPCPingInterval}, {"GRPCPingTimeout", o.GRPCPingTimeout}, {"GRPCCallTimeout", o.GRPCCallTimeout}} {
		if d.v < 0 {
			return rls.GRPCOptions{}, fmt.Errorf("server: Options.%s %v: must be positive (0: the default)", d.name, d.v)
		}
	}
	if o.MaxConnections < 0 {
		return rls.GRPCOptions{}, fmt.Errorf("server: Options.MaxConnections %d: must be positive (0: %d)", o.MaxConnections, DefaultMaxConnections)
	}
	if o.GRPCMaxStreams < 0 || o.GRPCMaxStreams > math.MaxInt32 {
		return rls.GRPCOptions{}, fmt.Errorf("server: Options.GRPCMaxStreams %d: must be between 1 and %d, HTTP/2's largest stream count (0: %d)", o.GRPCMaxStreams, math.MaxInt32, DefaultGRPCMaxStreams)
	}
	return rls.GRPCOptions{
		IdleTimeout:  o.GRPCIdleTimeout,
		PingInterval: o.GRPCPingInterval,
		PingTimeout:  o.GRPCPingTimeout,
		MaxStreams:   o.GRPCMaxStreams,
		CallTimeout:  o.GRPCCallTimeout,
	}, nil
}

// maxConnections is what each listener holds at once.
func (o Options) maxConnections() int {
	if o.MaxConnections > 0 {
		return o.MaxConnections
	}
	return DefaultMaxConnections
}
