// Package gateway is sluice's rate-limiting reverse proxy (sluice
// gateway): put in front of any HTTP upstream, it enforces the rules of a
// YAML file (package gateway/config) without writing Go. It is httplimit
// in front of httputil.ReverseProxy: each request is normalised once (its
// path, its headers) so that the rules and the upstream see the same
// request, bounded (timeouts, body size, connections), limited, then
// proxied; one refused is answered with its status (429, or 400, 413, 503
// …) and a JSON reason. The store is in memory by default, Redis for a
// fleet, with the few hottest limits decided in process on partitions
// held under leases in that Redis (store.leases: package leasestore). An
// admin listener, on loopback by default, serves /healthz,
// /readyz, /metrics and, behind a bearer token, the heaviest tenants.
//
// Check runs every check New runs, without binding a listener or
// connecting to Redis (sluice check); New builds the gateway and binds its
// listeners; Run serves until its context ends.
package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/gateway/upstream"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/secret"
	"github.com/sluicehq/sluice/internal/tlsconfig"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/leasestore"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/ratelimitheader"
	"github.com/sluicehq/sluice/redislease"
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
	// leased names the limits decided on leases (store.leases).
	leased []string
	// tls and adminTLS hold the listeners' certificates; nil: clear text.
	tls, adminTLS *tlsconfig.Reloader
	// cfg and upstream are the settings, for /admin/config.
	cfg      *config.File
	upstream string
}

// ErrNoUpstream is the error of New when neither Options.Upstream nor the
// configuration's upstream: says where requests go, and Check's once
// everything else has passed.
var ErrNoUpstream = errors.New("gateway: no upstream: give --upstream or upstream: in the configuration")

// Check runs every check New runs, without binding a listener or
// connecting to Redis: the options, the upstream URL, the files the
// configuration names (admin.token_file and store.redis.key_hmac_file,
// read by the code New reads them with), and the options of the store, of
// the client-IP resolver and of the middleware, each built and released.
// New runs the same steps first, so a configuration Check accepts fails
// New only on what the machine decides at that moment: an address in use
// or not this host's, a file changed in between. sluice check runs it.
//
// Without an upstream (neither Options.Upstream nor the file's) Check
// checks everything else and then returns ErrNoUpstream: a file may leave
// the upstream to sluice gateway --upstream. An error about a field of
// the file is a *config.Error, with the field's line.
func Check(opts Options) error {
	noUpstream := opts.Config != nil && opts.Upstream == "" && opts.Config.Upstream == ""
	if noUpstream {
		opts.Upstream = "http://upstream.invalid" // a stand-in, never called, so that the rest is checked
	}
	g, err := build(opts, offlineRedis, false)
	if err != nil {
		return err
	}
	if err := g.Close(); err != nil {
		return err
	}
	if noUpstream {
		return ErrNoUpstream
	}
	return nil
}

// New runs Check's steps, connecting the Redis store (in the background:
// a Redis down at start is an outage the limits' on_failure decides until
// it appears), and binds both listeners (so Addr and AdminAddr are known,
// for a configuration on port 0). Errors say what could not be set up; one
// about a field of the file is a *config.Error with the field's line.
func New(opts Options) (*Gateway, error) {
	g, err := build(opts, dialRedis, true)
	if err != nil {
		return nil, err
	}
	cfg := opts.Config
	if g.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		g.Close()
		return nil, cfg.ErrorAt("listen", err)
	}
	// At most max_connections at once: the others wait in the kernel's
	// backlog until a timeout or a client closes one. TLS is above the
	// cap: a handshake holds a connection, bounded by the server's
	// timeouts like a request.
	g.ln = netutil.LimitListener(g.ln, cfg.Server.MaxConnections)
	if g.aln, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
		g.Close()
		return nil, cfg.ErrorAt("admin.listen", err)
	}
	// HTTP/1.1 only over TLS: HTTP/2 to clients comes with the proxy
	// path's rework, tested under the same bounds.
	if g.tls != nil {
		g.ln = tls.NewListener(g.ln, g.tls.Config(true, "http/1.1"))
	}
	if g.adminTLS != nil {
		g.aln = tls.NewListener(g.aln, g.adminTLS.Config(true, "http/1.1"))
	}
	return g, nil
}

// build is New but for the listeners, with connect giving the Redis
// store its client: the options checked, the secret and TLS files read,
// the store, the middleware, the proxy and both servers made; with watch,
// the TLS files are watched from then on. On an error it releases what it
// made.
func build(opts Options, connect connector, watch bool) (_ *Gateway, err error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("gateway: Options.Config is required")
	}
	upstreamURL := opts.Upstream
	if upstreamURL == "" {
		upstreamURL = cfg.Upstream
	}
	if upstreamURL == "" {
		return nil, ErrNoUpstream
	}
	if err := config.CheckUpstream(upstreamURL); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	target, _ := url.Parse(upstreamURL)
	token, err := secret.Read(cfg.Admin.Token(), secret.AdminToken)
	if err != nil {
		return nil, cfg.ErrorAt("admin.token_"+cfg.Admin.Token().Kind(), err)
	}
	g := &Gateway{log: opts.Logger, shutdown: opts.ShutdownTimeout, cfg: cfg, upstream: upstreamURL}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.shutdown <= 0 {
		g.shutdown = 10 * time.Second
	}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if g.metrics, err = metrics.New(metrics.Options{}); err != nil {
		return nil, err
	}
	var publicHandshakes, adminHandshakes *tlsconfig.Handshakes
	if g.tls, publicHandshakes, err = g.listenerTLS(cfg, "public", cfg.TLS, "tls", watch); err != nil {
		return nil, err
	}
	if g.adminTLS, adminHandshakes, err = g.listenerTLS(cfg, "admin", cfg.Admin.TLS, "admin.tls", watch); err != nil {
		return nil, err
	}
	limiter, err := g.openStore(cfg, connect)
	if err != nil {
		return nil, err
	}
	refused, err := g.metrics.RegisterRefused()
	if err != nil {
		return nil, err
	}
	mw, ip, err := middleware(cfg, limiter, g.metrics, refused)
	if err != nil {
		return nil, err
	}
	srv := cfg.Server
	rewrite := func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		// Keep the chain a trusted proxy forwarded (anyone else's is
		// what the client chose to write) and add this hop. Other
		// spellings of the forwarding headers (X_Forwarded_For), which
		// the proxy would pass on, were dropped by guard.
		if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 && ip.Trusted(pr.In) {
			pr.Out.Header["X-Forwarded-For"] = xff
		}
		pr.SetXForwarded()
	}
	wait := upstreamWait(time.Duration(srv.WriteTimeout))
	failed := g.proxyError(srv.MaxBodyBytes, time.Duration(srv.WriteTimeout), refused)
	rp := &httputil.ReverseProxy{
		Rewrite:        rewrite,
		ModifyResponse: closeIfBodyUnread,
		Transport:      upstreamTransport(wait),
		BufferPool:     upstream.Buffers,
		ErrorHandler:   failed,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	var fast *upstream.Client
	if target.Scheme == "http" { // an https upstream keeps http.Transport, and HTTP/2 to it
		fast, err = upstream.New(upstream.Options{Target: target, Rewrite: rewrite, Wait: wait, AnswerTimeout: time.Duration(srv.WriteTimeout)})
		if err != nil {
			return nil, err
		}
		g.closers = append(g.closers, func() error { fast.CloseIdle(); return nil })
	}
	proxy := limitBody(srv.MaxBodyBytes, refused, forward(fast, rp, failed))
	public := guard(cfg, ip, refused, mw.Handler(proxy))
	g.public = &http.Server{
		Handler:           public,
		ReadHeaderTimeout: time.Duration(srv.ReadHeaderTimeout),
		ReadTimeout:       time.Duration(srv.ReadTimeout), // the whole request, and the drain of a body unread after a 429
		WriteTimeout:      time.Duration(srv.WriteTimeout),
		IdleTimeout:       time.Duration(srv.IdleTimeout),
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          tlsconfig.HTTPErrorLog(g.log, "public", publicHandshakes),
		// OPTIONS * reaches guard, which refuses it as any target that
		// is not a path (net/http would answer an empty 200 itself).
		DisableGeneralOptionsHandler: true,
	}
	g.admin = &http.Server{
		Handler:           g.adminHandler(token),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          tlsconfig.HTTPErrorLog(g.log, "admin", adminHandshakes),
	}
	return g, nil
}

// listenerTLS reads a listener's TLS files (nil when it has none), with
// the file's line on a refusal, and registers its metrics: the
// certificate's expiry and reloads, the failed handshakes (counted and
// logged by the Handshakes it returns). With watch, the files are watched
// (Run reloads them).
func (g *Gateway) listenerTLS(cfg *config.File, name string, files tlsconfig.Server, at string, watch bool) (*tlsconfig.Reloader, *tlsconfig.Handshakes, error) {
	if !files.Enabled() {
		return nil, nil, nil
	}
	r, err := tlsconfig.NewReloader(files, tlsconfig.ReloaderOptions{Name: name, Logger: g.log, Watch: watch})
	if err != nil {
		return nil, nil, cfg.ErrorAt(at+"."+tlsconfig.FieldOf(err), fmt.Errorf("%s %w", strings.ReplaceAll(at, ".", " "), err))
	}
	g.closers = append(g.closers, r.Close)
	if err := g.metrics.RegisterTLS(name, func() metrics.TLSStats {
		st := r.Stats()
		return metrics.TLSStats{NotAfter: st.Summary.NotAfter, Reloads: st.Reloads, Refused: st.Refused}
	}); err != nil {
		return nil, nil, err
	}
	c, err := g.metrics.HandshakeFailures(name)
	if err != nil {
		return nil, nil, err
	}
	return r, tlsconfig.NewHandshakes(g.log, name, c.Inc), nil
}

// connector gives the Redis store its client, and what closes it.
type connector func(redisstore.DialOptions) (redisstore.Client, func() error, error)

// dialRedis is New's connector: redisstore.Dial, which connects in the
// background.
func dialRedis(opts redisstore.DialOptions) (redisstore.Client, func() error, error) {
	c, err := redisstore.Dial(opts)
	if err != nil {
		return nil, nil, err
	}
	return c, c.Close, nil
}

// offlineRedis is Check's connector: a client that is never connected and
// never called. (What Dial checks of its options, addresses as host:port,
// config has checked more strictly.)
func offlineRedis(redisstore.DialOptions) (redisstore.Client, func() error, error) {
	return offlineClient{}, func() error { return nil }, nil
}

type offlineClient struct{}

func (offlineClient) EvalSHA(context.Context, string, []string, []string) ([]int64, error) {
	return nil, redisstore.ErrNotConnected
}

func (offlineClient) Eval(context.Context, string, []string, []string) ([]int64, error) {
	return nil, redisstore.ErrNotConnected
}

func (offlineClient) Cluster() bool { return false }

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
	g.log.Info("gateway listening", "addr", g.Addr(), "tls", g.tls != nil, "admin", g.AdminAddr(), "admin_tls", g.adminTLS != nil)
	rctx, stopReloads := context.WithCancel(ctx)
	var reloads sync.WaitGroup
	defer func() { stopReloads(); reloads.Wait() }()
	for _, r := range []*tlsconfig.Reloader{g.tls, g.adminTLS} {
		if r != nil {
			reloads.Go(func() { _ = r.Run(rctx) }) // nil when rctx ends
		}
	}
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

// ReloadTLS reads the listeners' TLS files again (as a change of the
// files does): on success the new certificates are in force for new
// connections; a refusal keeps the ones in force, is logged and counted,
// and returned. sluice gateway calls it on SIGHUP. Safe for concurrent
// use; nil without TLS.
func (g *Gateway) ReloadTLS() error {
	var err error
	for _, r := range []*tlsconfig.Reloader{g.tls, g.adminTLS} {
		if r != nil {
			err = errors.Join(err, r.Reload())
		}
	}
	return err
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

// openStore opens the configured store, the Redis one with a client from
// connect, and registers its metrics.
func (g *Gateway) openStore(cfg *config.File, connect connector) (sluice.Limiter, error) {
	if cfg.Store.Kind == "memory" {
		s, err := memstore.New(memstore.Options{MaxKeys: *cfg.Store.Memory.MaxKeys})
		if err != nil {
			return nil, cfg.ErrorAt("store.memory", err)
		}
		g.closers = append(g.closers, s.Close)
		return s, g.metrics.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats(s.Stats()) })
	}
	r := cfg.Store.Redis
	keyHMAC, err := secret.Read(r.KeyHMAC(), secret.KeyHMAC)
	if err != nil {
		return nil, cfg.ErrorAt("store.redis.key_hmac_"+r.KeyHMAC().Kind(), err)
	}
	dial, err := r.Connection.DialOptions(time.Now())
	if err != nil {
		return nil, cfg.RedisError(err)
	}
	conn, closeConn, err := connect(dial)
	if err != nil {
		return nil, cfg.ErrorAt("store.redis", err)
	}
	g.closers = append(g.closers, closeConn)
	policies := map[string]sluice.FailurePolicy{}
	for _, l := range cfg.Limits {
		policies[l.Name] = l.OnFailure
		g.failsClosed = g.failsClosed || l.OnFailure == sluice.FailClosed
	}
	s, err := redisstore.New(redisstore.Options{
		Client: conn, Prefix: r.Prefix, KeyHMAC: []byte(keyHMAC), Logger: g.log,
		Timeout: time.Duration(r.Timeout), Instances: r.Instances, DenyCache: r.DenyCache, Policies: policies,
	})
	if err != nil {
		return nil, cfg.ErrorAt("store.redis", err)
	}
	g.closers = append(g.closers, s.Close)
	g.redis = s
	if err := g.metrics.RegisterRedis(func() metrics.RedisStats { return metrics.RedisStats(s.Stats()) }); err != nil {
		return nil, err
	}
	if cfg.Store.Leases == nil {
		return s, nil
	}
	return g.openLeases(cfg, conn, s, []byte(keyHMAC), policies)
}

// openLeases puts the limits of store.leases on a leasestore in front of
// the Redis store next, with its leases in Redis through conn and its
// groups' names keyed by keyHMAC, and runs it until Close (which ends its
// Holders, giving their partitions back, before the store and the
// connection close). A leased limit without its own on_failure has the
// limit's, from policies.
func (g *Gateway) openLeases(cfg *config.File, conn redisstore.Client, next sluice.Limiter, keyHMAC []byte, policies map[string]sluice.FailurePolicy) (sluice.Limiter, error) {
	l := cfg.Store.Leases
	coord, err := redislease.New(redislease.Options{Client: conn, Prefix: l.Prefix})
	if err != nil {
		return nil, cfg.ErrorAt("store.leases.prefix", err)
	}
	limits := l.Leased(func(name string) sluice.FailurePolicy { return policies[name] })
	ls, err := leasestore.New(leasestore.Options{Coordinator: coord, Next: next, Limits: limits, Member: l.Member, Secret: keyHMAC, MaxKeys: l.MaxKeys, Logger: g.log})
	if err != nil {
		return nil, cfg.ErrorAt("store.leases", err)
	}
	for _, x := range limits {
		g.failsClosed = g.failsClosed || x.Policy == sluice.FailClosed // cut off from Redis, holding nothing: refused
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ls.Run(ctx) }()
	g.closers = append(g.closers, func() error { cancel(); return <-done })
	g.leased = l.Names()
	g.log.Info("limits on leases", "limits", g.leased, "member", ls.Member())
	return ls, g.metrics.RegisterLeases(func() []metrics.LeaseStats {
		var out []metrics.LeaseStats
		for _, st := range ls.Stats() {
			out = append(out, metrics.LeaseStats(st))
		}
		return out
	})
}

// readyz answers 200 when the gateway may take traffic, 503 when it has a
// Redis store that does not answer a Ping (bounded by the store's
// timeout) while a limit fails closed: the load balancer sends the
// requests to another instance rather than have them refused.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	if g.redis != nil && g.failsClosed {
		if err := g.redis.Ping(r.Context()); err != nil {
			// The cause (an address, a user name) is in the log, not in an
			// answer anyone who reaches this listener can read.
			http.Error(w, "not ready: Redis is unreachable and a limit fails closed", http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

// middleware builds the httplimit middleware of cfg; its fence's
// refusals are counted in refused, by reason.
func middleware(cfg *config.File, limiter sluice.Limiter, obs enforce.Observer, refused *metrics.Refused) (*httplimit.Middleware, *clientip.Resolver, error) {
	trusted, err := clientip.ParseTrusted(cfg.ClientIP.TrustedProxies)
	if err != nil {
		return nil, nil, cfg.ErrorAt("client_ip.trusted_proxies", err)
	}
	header := clientip.ForwardedFor
	if cfg.ClientIP.Header == "forwarded" {
		header = clientip.Forwarded
	}
	ip, err := clientip.New(clientip.Options{TrustedProxies: trusted, Header: header, IPv4Prefix: cfg.ClientIP.IPv4Prefix, IPv6Prefix: cfg.ClientIP.IPv6Prefix})
	if err != nil {
		return nil, nil, cfg.ErrorAt("client_ip", err)
	}
	opts := httplimit.Options{Limiter: limiter, ClientIP: ip, Legacy: cfg.Headers.Legacy, Observer: obs}
	if cfg.Headers.Version == "draft-06" {
		opts.Version = ratelimitheader.Draft06
	}
	opts.Rules = cfg.HTTPRules()
	if opts.Fence, err = fence(cfg, refused); err != nil {
		return nil, nil, err
	}
	mw, err := httplimit.New(opts)
	if err != nil {
		return nil, nil, cfg.ErrorAt("rules", err)
	}
	return mw, ip, nil
}

// fence is cfg's fence: the zero httplimit.Fence without a fence:
// section. A request that passes is forwarded with its Sluice-Lease-Epoch
// field (the upstream may log it, or fence too); a refused one never
// reaches the upstream, and is counted in refused (when not nil).
func fence(cfg *config.File, refused *metrics.Refused) (httplimit.Fence, error) {
	if cfg.Fence == nil {
		return httplimit.Fence{}, nil
	}
	fences, err := lease.NewFences(cfg.Fence.FenceOptions())
	if err != nil {
		return httplimit.Fence{}, cfg.ErrorAt("fence", err)
	}
	f := httplimit.Fence{Fences: fences, Required: cfg.Fence.Required}
	if refused != nil {
		f.Refused = func(_ *http.Request, reason string) { refused.Inc(reason) }
	}
	return f, nil
}

// forward sends the requests fast takes (those without a body, on an
// http:// upstream: package upstream) through it, and the others (with a
// body, an upgrade, to an https:// upstream) through rp; failed answers a
// request fast could not forward, as rp's ErrorHandler does.
func forward(fast *upstream.Client, rp http.Handler, failed func(http.ResponseWriter, *http.Request, error)) http.Handler {
	if fast == nil {
		return rp
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fast.Handles(r) {
			rp.ServeHTTP(w, r)
			return
		}
		if err := fast.Forward(w, r); err != nil {
			failed(w, r, err)
		}
	})
}

// upstreamTransport is http.DefaultTransport's, with enough idle
// connections for a busy upstream and bounded waits: the upstream has
// wait to start its answer (504 after it).
func upstreamTransport(wait time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.ResponseHeaderTimeout = wait
	t.MaxResponseHeaderBytes = 1 << 20 // as the fast path's (package upstream)
	return t
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
	auth := func(h http.Handler) http.Handler {
		return admin.Handler(admin.Options{Token: token, Enable: "set admin.token_file"}, h)
	}
	mux.Handle("GET /admin/tenants", auth(g.metrics.TenantsHandler()))
	mux.Handle("POST /admin/tenants/reset", auth(g.metrics.ResetTenantsHandler()))
	mux.Handle("GET /admin/config", auth(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(g.describe())
	})))
	return mux
}

// description is what GET /admin/config answers: the settings in force —
// listeners and their certificates, the upstream, the store and how it
// reaches Redis, where each secret is kept — never a secret.
type description struct {
	Listeners map[string]listenerDesc `json:"listeners"`
	Upstream  string                  `json:"upstream"`
	Store     storeDesc               `json:"store"`
	Admin     struct {
		Token string `json:"token"`
	} `json:"admin"`
}

type listenerDesc struct {
	Addr string `json:"addr"`
	// TLS is nil for clear text.
	TLS *tlsconfig.Stats `json:"tls"`
	// ClientCertificates: "required" (mTLS) or "not asked".
	ClientCertificates string `json:"client_certificates,omitempty"`
}

type storeDesc struct {
	Kind    string                   `json:"kind"`
	Redis   *redisconfig.Description `json:"redis,omitempty"`
	KeyHMAC string                   `json:"key_hmac,omitempty"`
	// Leased names the limits decided on leases.
	Leased []string `json:"leased,omitempty"`
}

// describe describes the gateway's settings (see description).
func (g *Gateway) describe() description {
	cfg := g.cfg
	d := description{Listeners: map[string]listenerDesc{}, Upstream: g.upstream, Store: storeDesc{Kind: cfg.Store.Kind}}
	if u, err := url.Parse(g.upstream); err == nil && u.RawQuery != "" {
		u.RawQuery = "…" // a query may carry a token
		d.Upstream = u.String()
	}
	for name, l := range map[string]struct {
		addr  string
		r     *tlsconfig.Reloader
		files tlsconfig.Server
	}{"public": {g.Addr(), g.tls, cfg.TLS}, "admin": {g.AdminAddr(), g.adminTLS, cfg.Admin.TLS}} {
		ld := listenerDesc{Addr: l.addr}
		if l.r != nil {
			st := l.r.Stats()
			ld.TLS, ld.ClientCertificates = &st, "not asked"
			if l.files.ClientCAFile != "" {
				ld.ClientCertificates = "required"
			}
		}
		d.Listeners[name] = ld
	}
	d.Admin.Token = cfg.Admin.Token().String()
	if cfg.Store.Kind == "redis" {
		rd := cfg.Store.Redis.Connection.Describe(time.Now())
		d.Store.Redis, d.Store.KeyHMAC, d.Store.Leased = &rd, cfg.Store.Redis.KeyHMAC().String(), g.leased
	}
	return d
}
