package cli

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/server"
)

// serveFlags are sluice serve's flags.
type serveFlags struct {
	config                           string
	leases                           string
	httpAddr, grpcAddr, adminAddr    string
	onRedisFailure                   sluice.FailurePolicy
	maxDescriptors, maxConnections   int
	grpcMaxStreams                   int
	grpcIdleTimeout, grpcCallTimeout time.Duration
	responseHeaders, json            bool
	conn                             connFlags
	fs                               *pflag.FlagSet
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve --config FILE|DIR [flags]",
		Short: "run the decision service (Envoy RLS over gRPC, JSON over HTTP)",
		Long: `The decision service: Envoy's rate limit service (RLS v3) over gRPC, a drop-in for
envoyproxy/ratelimit that reads its configuration files unchanged, and the same decisions
as JSON over HTTP. Reloads on SIGHUP and when the files change; logs JSON to stderr;
drains and stops on SIGINT or SIGTERM. Check a configuration first with sluice check.`,
		GroupID:           groupServices,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			return f.run(c.Context(), c.ErrOrStderr())
		},
	}
	f.register(cmd.Flags())
	_ = cmd.RegisterFlagCompletionFunc("on-redis-failure", cobra.FixedCompletions(enumNames[sluice.FailurePolicy](), cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("tls-client-auth", cobra.FixedCompletions([]string{server.ListenerGRPC, server.ListenerHTTP, server.ListenerAdmin}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("tls-min-version", cobra.FixedCompletions([]string{"1.2", "1.3"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// register defines serve's flags on fs (sluice check defines them too).
func (f *serveFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	if fs.Lookup("config") == nil { // sluice check has its own
		fs.StringVar(&f.config, "config", "", "the `FILE|DIR` of the rate limit configuration: an envoyproxy/ratelimit YAML file (with a top-level domain) or a directory of them (required)")
	}
	fs.StringVar(&f.httpAddr, "http-addr", server.DefaultHTTPAddr, "the HTTP listener's `HOST:PORT` (port 0: any free one): POST /json, /healthz, /readyz, /metrics")
	fs.StringVar(&f.grpcAddr, "grpc-addr", server.DefaultGRPCAddr, "the gRPC listener's `HOST:PORT` (port 0: any free one): envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1")
	fs.StringVar(&f.adminAddr, "admin-addr", server.DefaultAdminAddr, "the admin listener's `HOST:PORT` (port 0: any free one); every route needs the token of --admin-token-file")
	fs.TextVar(&f.onRedisFailure, "on-redis-failure", sluice.FailOpen, "what a decision is when Redis cannot answer, a `POLICY`: fail_open (allow), fail_closed (refuse) or fail_local (decide in this process's memory)")
	fs.IntVar(&f.maxDescriptors, "max-descriptors", rls.DefaultMaxDescriptors, "descriptors per request at most (0 or less: the default)")
	fs.DurationVar(&f.grpcIdleTimeout, "grpc-idle-timeout", server.DefaultGRPCIdleTimeout, "close a gRPC connection with no call in flight for this long (a GOAWAY: the client reconnects on its next call); positive")
	fs.IntVar(&f.maxConnections, "max-connections", server.DefaultMaxConnections, "connections each listener holds at once, at least 1; more wait in the listen backlog")
	fs.IntVar(&f.grpcMaxStreams, "grpc-max-streams", server.DefaultGRPCMaxStreams, "gRPC calls in flight on one connection at most, from 1 to 2147483647 (announced as HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); a stream past it is refused (REFUSED_STREAM, safe to retry)")
	fs.DurationVar(&f.grpcCallTimeout, "grpc-call-timeout", server.DefaultGRPCCallTimeout, "end a gRPC call with DEADLINE_EXCEEDED this long after it starts if it has not answered (a request message that never comes, or a longer client deadline); a streaming call (health Watch) only until its first message; positive")
	fs.BoolVar(&f.json, "json", true, "serve POST /json on the HTTP listener; false leaves it /healthz, /readyz and /metrics, for a listener Kubernetes probes reach without a client certificate (see --tls-client-auth)")
	fs.BoolVar(&f.responseHeaders, "response-headers", false, "ask Envoy to add RateLimit-Policy and RateLimit (draft-11) to responses (default off, as envoyproxy/ratelimit)")
	inGroup(fs, groupListeners, "config", "http-addr", "grpc-addr", "admin-addr", "json")
	inGroup(fs, groupLimits, "max-descriptors", "grpc-idle-timeout", "max-connections", "grpc-max-streams", "grpc-call-timeout", "response-headers")
	f.conn.register(fs)
	fs.StringVar(&f.leases, "leases", "", "decide the limits this YAML `FILE` names in process, on partitions of each held under leases in Redis, instead of a Redis call per decision (needs --redis; see docs/leasestore.md) (default: none)")
	inGroup(fs, groupRedis, "on-redis-failure", "leases")
}

// options checks the flags (a bad value is a usage error), reads the
// secret files they name and returns the server's options.
func (f *serveFlags) options(log *slog.Logger) (server.Options, error) {
	if f.config == "" {
		return server.Options{}, usagef("--config is required: an envoyproxy/ratelimit YAML file, or a directory of them")
	}
	bound := map[string]string{}
	for _, a := range []struct{ flag, addr string }{{"http-addr", f.httpAddr}, {"grpc-addr", f.grpcAddr}, {"admin-addr", f.adminAddr}} {
		if err := configfile.CheckAddr(a.addr); err != nil {
			return server.Options{}, usagef("--%s %q: %v", a.flag, a.addr, err)
		}
		if _, port, _ := net.SplitHostPort(a.addr); port != "0" {
			if other, twice := bound[a.addr]; twice {
				return server.Options{}, usagef("--%s %q: the address of --%s too; each listener needs its own", a.flag, a.addr, other)
			}
			bound[a.addr] = a.flag
		}
	}
	switch {
	case f.maxConnections < 1:
		return server.Options{}, usagef("--max-connections %d: at least 1 (a bound cannot be switched off)", f.maxConnections)
	case f.grpcIdleTimeout <= 0:
		return server.Options{}, usagef("--grpc-idle-timeout %v: must be positive (a bound cannot be switched off)", f.grpcIdleTimeout)
	case f.grpcMaxStreams < 1 || f.grpcMaxStreams > math.MaxInt32:
		return server.Options{}, usagef("--grpc-max-streams %d: from 1 to %d (HTTP/2's largest)", f.grpcMaxStreams, math.MaxInt32)
	case f.grpcCallTimeout <= 0:
		return server.Options{}, usagef("--grpc-call-timeout %v: must be positive (a bound cannot be switched off)", f.grpcCallTimeout)
	}
	opts := server.Options{
		Load: server.EnvoyLoader(f.config), Watch: []string{f.config},
		HTTPAddr: f.httpAddr, GRPCAddr: f.grpcAddr, AdminAddr: f.adminAddr,
		RedisPolicy: f.onRedisFailure, MaxDescriptors: f.maxDescriptors, ResponseHeaders: f.responseHeaders, Logger: log, NoJSON: !f.json,
		GRPCIdleTimeout: f.grpcIdleTimeout, MaxConnections: f.maxConnections,
		GRPCMaxStreams: f.grpcMaxStreams, GRPCCallTimeout: f.grpcCallTimeout,
	}
	if err := f.conn.options(f.fs, &opts); err != nil {
		return server.Options{}, err
	}
	if f.leases != "" {
		if opts.Redis == nil {
			return server.Options{}, usagef("--leases %s: the leases are held in Redis: give --redis (or --redis-sentinel-master) too", f.leases)
		}
		l, err := server.LoadLeases(f.leases)
		if err != nil {
			return server.Options{}, err
		}
		opts.Leases = l
	}
	return opts, nil
}

// run serves until ctx ends, reloading on SIGHUP.
func (f *serveFlags) run(ctx context.Context, stderr io.Writer) error {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	opts, err := f.options(log)
	if err != nil {
		return err
	}
	hup, stopHangups := hangups(ctx) // before New, which may wait for Redis
	defer stopHangups()
	s, err := server.New(opts)
	if err != nil {
		return redisFlagError(err)
	}
	if err := s.Run(ctx, hup); err != nil {
		log.Error("serve failed", "err", err)
		return errReported
	}
	return nil
}

// hangups turns SIGHUP into reload requests from now on — so that a
// SIGHUP during a slow start does not end the process, Go's default — one
// at most waiting: a burst of signals is one reload. stop stops listening
// and waits for the goroutine; the channel is never closed.
func hangups(ctx context.Context) (hup <-chan struct{}, stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	requests := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				select {
				case requests <- struct{}{}:
				default:
				}
			}
		}
	}()
	return requests, func() {
		signal.Stop(sig)
		cancel()
		<-done
	}
}
