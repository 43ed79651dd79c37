// Package gateway is sluice's rate-limiting reverse proxy (sluice gateway):
// the seed's central gateway, put in front of any upstream without writing
// Go. It is httplimit in front of httputil.ReverseProxy, configured by a
// config.File: the memory store by default, Redis for a fleet; and an admin
// listener, on loopback by default, serving /metrics, /healthz and, behind
// a bearer token, the heaviest tenants.
package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimitheader"
	"github.com/sluicehq/sluice/redisstore"
)

// Options configures a Gateway.
type Options struct {
	// Config is the validated configuration. Required.
	Config *config.File
	// Upstream overrides Config.Upstream; one of them is required.
	Upstream string
	// Logger receives the gateway's events (never a key or an identity).
	// Default: discard.
	Logger *slog.Logger
	// ShutdownTimeout bounds a graceful shutdown. Default 10 s.
	ShutdownTimeout time.Duration
}

// Gateway is a running configuration: listeners bound, store open. Run
// serves until its context ends; Close releases what New acquired.
type Gateway struct {
	log      *slog.Logger
	public   *http.Server
	admin    *http.Server
	ln, aln  net.Listener
	metrics  *metrics.Metrics
	closers  []func() error
	shutdown time.Duration
	closeMu  sync.Once
}

// New opens the store, builds the middleware and binds both listeners (so
// Addr and AdminAddr are known, for a configuration on port 0). Errors say
// what could not be set up.
func New(opts Options) (*Gateway, error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("gateway: Options.Config is required")
	}
	upstream := opts.Upstream
	if upstream == "" {
		upstream = cfg.Upstream
	}
	if upstream == "" {
		return nil, errors.New("gateway: no upstream: give --upstream or upstream: in the configuration")
	}
	if err := config.CheckUpstream(upstream); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	target, _ := url.Parse(upstream)
	g := &Gateway{log: opts.Logger, shutdown: opts.ShutdownTimeout}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.shutdown <= 0 {
		g.shutdown = 10 * time.Second
	}
	ok := false
	defer func() {
		if !ok {
			g.Close()
		}
	}()
	var err error
	if g.metrics, err = metrics.New(metrics.Options{}); err != nil {
		return nil, err
	}
	limiter, err := g.openStore(cfg)
	if err != nil {
		return nil, err
	}
	mw, ip, err := middleware(cfg, limiter, g.metrics)
	if err != nil {
		return nil, err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// Keep the chain a trusted proxy forwarded (anyone else's is
			// what the client chose to write) and add this hop.
			if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 && ip.Trusted(pr.In) {
				pr.Out.Header["X-Forwarded-For"] = xff
			}
			pr.SetXForwarded()
		},
		Transport: upstreamTransport(),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.log.Warn("upstream unreachable", "err", err)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`{"error":"upstream_unavailable","retryable":true}`))
		},
	}
	g.public = &http.Server{
		Handler:           dropUntrusted(ip, cfg.PrincipalHeaders(), mw.Handler(proxy)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	token, err := readSecret(cfg.Admin.TokenFile, "admin token_file")
	if err != nil {
		return nil, err
	}
	g.admin = &http.Server{
		Handler:           g.adminHandler(string(token)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	if g.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("gateway: listen %s: %w", cfg.Listen, err)
	}
	if g.aln, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
		return nil, fmt.Errorf("gateway: admin listen %s: %w", cfg.Admin.Listen, err)
	}
	ok = true
	return g, nil
}

// Addr is the public listener's address.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// AdminAddr is the admin listener's address.
func (g *Gateway) AdminAddr() string { return g.aln.Addr().String() }

// Run serves until ctx ends, then shuts down gracefully: no new
// connections, requests in flight finish (within the shutdown timeout).
// It returns nil after a graceful shutdown, or the error that stopped a
// listener.
func (g *Gateway) Run(ctx context.Context) error {
	g.log.Info("gateway listening", "addr", g.Addr(), "admin", g.AdminAddr())
	errs := make(chan error, 2)
	go func() { errs <- g.public.Serve(g.ln) }()
	go func() { errs <- g.admin.Serve(g.aln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.shutdown)
	defer cancel()
	err = errors.Join(err, g.public.Shutdown(sctx), g.admin.Shutdown(sctx))
	pending := 2
	if err != nil {
		pending-- // that server's error was received above
	}
	for range pending {
		if e := <-errs; !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	g.log.Info("gateway stopped")
	return errors.Join(err, g.Close())
}

// Close releases the store and the listeners. Idempotent.
func (g *Gateway) Close() error {
	var err error
	g.closeMu.Do(func() {
		for _, l := range []net.Listener{g.ln, g.aln} {
			if l != nil {
				l.Close()
			}
		}
		for i := len(g.closers) - 1; i >= 0; i-- {
			err = errors.Join(err, g.closers[i]())
		}
	})
	return err
}

// openStore opens the configured store and registers its metrics.
func (g *Gateway) openStore(cfg *config.File) (sluice.Limiter, error) {
	if cfg.Store.Kind == "memory" {
		s, err := memstore.New(memstore.Options{MaxKeys: *cfg.Store.Memory.MaxKeys})
		if err != nil {
			return nil, fmt.Errorf("gateway: memory store: %w", err)
		}
		g.closers = append(g.closers, s.Close)
		return s, g.metrics.RegisterMemory(s)
	}
	r := cfg.Store.Redis
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: r.Addrs, DisableCache: true})
	if err != nil {
		return nil, fmt.Errorf("gateway: redis %v: %w", r.Addrs, err)
	}
	g.closers = append(g.closers, func() error { client.Close(); return nil })
	secret, err := readSecret(r.KeyHMACFile, "redis key_hmac_file")
	if err != nil {
		return nil, err
	}
	policies := map[string]redisstore.Policy{}
	for _, l := range cfg.Limits {
		p, _ := config.FailurePolicy(l.OnFailure) // validated
		policies[l.Name] = map[string]redisstore.Policy{config.FailOpen: redisstore.FailOpen, config.FailClosed: redisstore.FailClosed, config.FailLocal: redisstore.FailLocal}[p]
	}
	s, err := redisstore.New(redisstore.Options{
		Client: redisstore.NewRueidis(client), Prefix: r.Prefix, KeyHMAC: secret,
		Timeout: time.Duration(r.Timeout), Instances: r.Instances, DenyCache: r.DenyCache, Policies: policies,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.closers = append(g.closers, s.Close)
	return s, g.metrics.RegisterRedis(s)
}

// middleware builds the httplimit middleware of cfg.
// dropUntrusted removes the principal headers of requests that do not come
// through a trusted proxy: only an authenticating proxy in front may say
// who a request is (a client that wrote the header itself would choose its
// own key, and the upstream would believe it).
func dropUntrusted(ip *clientip.Resolver, headers []string, next http.Handler) http.Handler {
	if len(headers) == 0 {
		return next
	}
	for i, h := range headers {
		headers[i] = http.CanonicalHeaderKey(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ip.Trusted(r) {
			for _, h := range headers {
				delete(r.Header, h)
			}
		}
		next.ServeHTTP(w, r)
	})
}

func middleware(cfg *config.File, limiter sluice.Limiter, obs enforce.Observer) (*httplimit.Middleware, *clientip.Resolver, error) {
	trusted, err := clientip.ParseTrusted(cfg.ClientIP.TrustedProxies)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: %w", err)
	}
	header := clientip.ForwardedFor
	if cfg.ClientIP.Header == "forwarded" {
		header = clientip.Forwarded
	}
	ip, err := clientip.New(clientip.Options{TrustedProxies: trusted, Header: header, IPv4Prefix: cfg.ClientIP.IPv4Prefix, IPv6Prefix: cfg.ClientIP.IPv6Prefix})
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: client_ip: %w", err)
	}
	opts := httplimit.Options{Limiter: limiter, ClientIP: ip, Legacy: cfg.Headers.Legacy, Observer: obs}
	if cfg.Headers.Version == "draft-06" {
		opts.Version = ratelimitheader.Draft06
	}
	opts.Rules = cfg.HTTPRules()
	mw, err := httplimit.New(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: %w", err)
	}
	return mw, ip, nil
}

// upstreamTransport is http.DefaultTransport's, with enough idle
// connections for a busy upstream and bounded waits.
func upstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.ResponseHeaderTimeout = time.Minute
	return t
}

// readSecret reads a file holding a secret ("" for none), trimmed of
// surrounding white space.
func readSecret(path, what string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway: %s: %w", what, err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return nil, fmt.Errorf("gateway: %s %s: the secret must be at least 16 characters", what, path)
	}
	return []byte(s), nil
}

// adminHandler serves /healthz and /metrics, and, with the bearer token,
// /admin/tenants (GET: the heaviest tenants; ?n= how many, default 20, at
// most 1000) and /admin/tenants/reset (POST: start a new period).
func (g *Gateway) adminHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", g.metrics.Handler())
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			if token == "" {
				http.Error(w, "admin endpoints are off: configure admin.token_file", http.StatusForbidden)
				return
			}
			got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !bearer || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /admin/tenants", auth(func(w http.ResponseWriter, r *http.Request) {
		n := 20
		if v := r.URL.Query().Get("n"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
				http.Error(w, "n: a number from 1 to 1000", http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(g.metrics.TopTenants(n))
	}))
	mux.HandleFunc("POST /admin/tenants/reset", auth(func(w http.ResponseWriter, r *http.Request) {
		g.metrics.ResetTenants()
		w.WriteHeader(http.StatusNoContent)
	}))
	return mux
}
