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
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"

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
	// ShutdownTimeout bounds a graceful shutdown: requests still in
	// flight then are cut. Default 10 s.
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
	// redis is the Redis store (nil for the memory store); failsClosed:
	// a limit's on_failure is fail_closed. For /readyz.
	redis       *redisstore.Store
	failsClosed bool
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
	refused, err := g.metrics.RegisterRefused()
	if err != nil {
		return nil, err
	}
	srv := cfg.Server
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// Keep the chain a trusted proxy forwarded (anyone else's is
			// what the client chose to write) and add this hop. Other
			// spellings of the forwarding headers (X_Forwarded_For), which
			// the proxy would pass on, were dropped by guard.
			if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 && ip.Trusted(pr.In) {
				pr.Out.Header["X-Forwarded-For"] = xff
			}
			pr.SetXForwarded()
		},
		ModifyResponse: closeIfBodyUnread,
		Transport:      upstreamTransport(upstreamWait(time.Duration(srv.WriteTimeout))),
		ErrorHandler:   g.proxyError(srv.MaxBodyBytes, time.Duration(srv.WriteTimeout), refused),
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	proxy := limitBody(srv.MaxBodyBytes, refused, rp)
	public := guard(cfg, ip, refused, mw.Handler(proxy))
	g.public = &http.Server{
		Handler:           public,
		ReadHeaderTimeout: time.Duration(srv.ReadHeaderTimeout),
		ReadTimeout:       time.Duration(srv.ReadTimeout), // the whole request, and the drain of a body unread after a 429
		WriteTimeout:      time.Duration(srv.WriteTimeout),
		IdleTimeout:       time.Duration(srv.IdleTimeout),
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		// OPTIONS * reaches guard, which refuses it as any target that
		// is not a path (net/http would answer an empty 200 itself).
		DisableGeneralOptionsHandler: true,
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
	// At most max_connections at once: the others wait in the kernel's
	// backlog until a timeout or a client closes one.
	g.ln = netutil.LimitListener(g.ln, srv.MaxConnections)
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
// connections, requests in flight finish within the shutdown timeout;
// those still running then are cut (their connections closed), so that
// none outlives Run. It returns nil after a graceful shutdown, or every
// error that stopped a listener, and the shutdown's timeout.
func (g *Gateway) Run(ctx context.Context) error {
	g.log.Info("gateway listening", "addr", g.Addr(), "admin", g.AdminAddr())
	servers := []*http.Server{g.public, g.admin}
	errs := make(chan error, len(servers))
	go func() { errs <- served(g.public.Serve(g.ln)) }()
	go func() { errs <- served(g.admin.Serve(g.aln)) }()
	pending := len(servers) // the Serve returns not yet received
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
		pending--
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.shutdown)
	defer cancel()
	for _, s := range servers {
		if e := s.Shutdown(sctx); e != nil {
			s.Close() // cut what is still in flight
			err = errors.Join(err, fmt.Errorf("gateway: shutdown (%v), requests still in flight were cut: %w", g.shutdown, e))
		}
	}
	for ; pending > 0; pending-- {
		err = errors.Join(err, <-errs)
	}
	g.log.Info("gateway stopped")
	return errors.Join(err, g.Close())
}

// served is a Serve's return as Run reports it: nil for the
// http.ErrServerClosed of a shutdown.
func served(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
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
		return s, g.metrics.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats(s.Stats()) })
	}
	r := cfg.Store.Redis
	// Connected in the background: a Redis down at start is an outage
	// the limits' on_failure decides, until it appears.
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: r.Addrs})
	if err != nil {
		return nil, fmt.Errorf("gateway: redis %v: %w", r.Addrs, err)
	}
	g.closers = append(g.closers, conn.Close)
	secret, err := readSecret(r.KeyHMACFile, "redis key_hmac_file")
	if err != nil {
		return nil, err
	}
	policies := map[string]sluice.FailurePolicy{}
	for _, l := range cfg.Limits {
		p, _ := config.FailurePolicy(l.OnFailure) // validated
		policies[l.Name] = map[string]sluice.FailurePolicy{config.FailOpen: sluice.FailOpen, config.FailClosed: sluice.FailClosed, config.FailLocal: sluice.FailLocal}[p]
		g.failsClosed = g.failsClosed || policies[l.Name] == sluice.FailClosed
	}
	s, err := redisstore.New(redisstore.Options{
		Client: conn, Prefix: r.Prefix, KeyHMAC: secret, Logger: g.log,
		Timeout: time.Duration(r.Timeout), Instances: r.Instances, DenyCache: r.DenyCache, Policies: policies,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.closers = append(g.closers, s.Close)
	g.redis = s
	return s, g.metrics.RegisterRedis(func() metrics.RedisStats { return metrics.RedisStats(s.Stats()) })
}

// readyz answers 200 when the gateway may take traffic, 503 when it has a
// Redis store that does not answer a Ping (bounded by the store's
// timeout) while a limit fails closed: the load balancer sends the
// requests to another instance rather than have them refused.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	if g.redis != nil && g.failsClosed {
		if err := g.redis.Ping(r.Context()); err != nil {
			http.Error(w, "not ready: Redis is unreachable and a limit fails closed: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

// middleware builds the httplimit middleware of cfg.
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
// connections for a busy upstream and bounded waits: the upstream has
// wait to start its answer (504 after it).
func upstreamTransport(wait time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.ResponseHeaderTimeout = wait
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
// /admin/tenants (GET: the heaviest tenants by cost spent and by
// rejections; ?n= how many, default 20, at most 1000: see
// metrics.TenantsHandler) and /admin/tenants/reset (POST: start a new
// period). Without a configured token the /admin/ routes are 403 (off);
// with one, a missing or wrong credential is 401 with WWW-Authenticate — as
// sluice serve's admin. Both bodies are JSON {"error": ...} saying which.
func (g *Gateway) adminHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", g.readyz)
	mux.Handle("GET /metrics", g.metrics.Handler())
	refuse := func(w http.ResponseWriter, code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
	auth := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			if token == "" {
				refuse(w, http.StatusForbidden, "admin endpoints are off: no admin token is configured (set admin.token_file)")
				return
			}
			got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !bearer || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
				refuse(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer and the admin token")
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	mux.Handle("GET /admin/tenants", auth(g.metrics.TenantsHandler()))
	mux.Handle("POST /admin/tenants/reset", auth(g.metrics.ResetTenantsHandler()))
	return mux
}
