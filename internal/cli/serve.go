package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/server"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the rate limit configuration: an envoyproxy/ratelimit YAML file, or a directory of them (required)")
	httpAddr := fs.String("http-addr", server.DefaultHTTPAddr, "the HTTP listener: POST /json, /healthz, /readyz, /metrics")
	grpcAddr := fs.String("grpc-addr", server.DefaultGRPCAddr, "the gRPC listener: envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1")
	adminAddr := fs.String("admin-addr", server.DefaultAdminAddr, "the admin listener (every route needs the token)")
	redis := fs.String("redis", "", "a Redis address (several, comma-separated: a Cluster); the memory store when empty")
	failure := fs.String("on-redis-failure", "fail_open", "what a decision is when Redis cannot answer: fail_open, fail_closed or fail_local")
	hmacFile := fs.String("key-hmac-file", "", "a file holding a secret (at least 16 characters) with which Redis keys are HMAC'd: no API key or IP in Redis key names (needs --redis)")
	tokenFile := fs.String("admin-token-file", "", "a file holding the admin token (without it, the admin API is off: every route answers 403)")
	maxDesc := fs.Int("max-descriptors", 0, "descriptors per request at most (default 64)")
	grpcIdle := fs.Duration("grpc-idle-timeout", server.DefaultGRPCIdleTimeout, "close a gRPC connection with no call in flight for this long (a GOAWAY: the client reconnects on its next call)")
	maxConns := fs.Int("max-connections", server.DefaultMaxConnections, "connections each listener holds at once; more wait in the listen backlog")
	maxStreams := fs.Int("grpc-max-streams", server.DefaultGRPCMaxStreams, "gRPC calls in flight on one connection at most (announced as HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); a stream past it is refused (REFUSED_STREAM, safe to retry)")
	callTimeout := fs.Duration("grpc-call-timeout", server.DefaultGRPCCallTimeout, "end a gRPC call with DEADLINE_EXCEEDED this long after it starts if it has not answered (a request message that never comes, or a longer client deadline); a streaming call (health Watch) only until its first message")
	headers := fs.Bool("response-headers", false, "ask Envoy to add RateLimit-Policy and RateLimit (draft-11) to responses (off by default, as envoyproxy/ratelimit)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice serve --config FILE|DIR [flags]\n\nThe decision service: Envoy's rate limit service (RLS v3) over gRPC, a drop-in for\nenvoyproxy/ratelimit that reads its configuration files unchanged, and the same decisions\nas JSON over HTTP. Reloads on SIGHUP and when the files change; logs JSON to stderr;\ndrains and stops on SIGINT or SIGTERM.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	if *maxConns < 1 || *grpcIdle <= 0 {
		fmt.Fprintf(stderr, "sluice serve: --max-connections %d, --grpc-idle-timeout %v: both must be positive (a bound cannot be switched off)\n", *maxConns, *grpcIdle)
		return exitUsage
	}
	if *maxStreams < 1 || *maxStreams > math.MaxInt32 || *callTimeout <= 0 {
		fmt.Fprintf(stderr, "sluice serve: --grpc-max-streams %d, --grpc-call-timeout %v: the streams must be between 1 and %d (HTTP/2's largest), the timeout positive (a bound cannot be switched off)\n", *maxStreams, *callTimeout, math.MaxInt32)
		return exitUsage
	}
	policy, err := sluice.ParseFailurePolicy(*failure)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: --on-redis-failure %q: fail_open, fail_closed or fail_local\n", *failure)
		return exitUsage
	}
	var keyHMAC []byte
	if *hmacFile != "" {
		if *redis == "" {
			fmt.Fprintln(stderr, "sluice serve: --key-hmac-file hashes the keys sent to Redis: give --redis too")
			return exitUsage
		}
		var err error
		if keyHMAC, err = server.ReadKeyHMAC(*hmacFile); err != nil {
			fmt.Fprintln(stderr, "sluice serve:", err)
			return exitError
		}
	}
	var token string
	if *tokenFile != "" {
		var err error
		if token, err = admin.ReadToken(admin.Source{File: *tokenFile}); err != nil {
			fmt.Fprintln(stderr, "sluice serve:", err)
			return exitError
		}
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	s, err := server.New(server.Options{
		Load: server.EnvoyLoader(*path), Watch: []string{*path},
		HTTPAddr: *httpAddr, GRPCAddr: *grpcAddr, AdminAddr: *adminAddr,
		Redis: *redis, RedisPolicy: policy, KeyHMAC: keyHMAC, AdminToken: token, MaxDescriptors: *maxDesc, ResponseHeaders: *headers, Logger: log,
		GRPCIdleTimeout: *grpcIdle, MaxConnections: *maxConns, GRPCMaxStreams: *maxStreams, GRPCCallTimeout: *callTimeout,
	})
	if err != nil {
		fmt.Fprintln(stderr, "sluice serve:", err)
		return exitError
	}
	hup := make(chan struct{}, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	defer signal.Stop(sig)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				select {
				case hup <- struct{}{}:
				default:
				}
			}
		}
	}()
	if err := s.Run(ctx, hup); err != nil {
		log.Error("serve failed", "err", err)
		return exitError
	}
	return exitOK
}
