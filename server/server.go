// Package server is sluice's decision service (sluice serve): one service
// that a fleet of API servers, or a proxy such as Envoy, asks whether a
// request may spend a limit now, so that every instance counts against the
// same limits. It speaks Envoy's rate limit service (RLS v3) over gRPC — a
// drop-in for envoyproxy/ratelimit, reading the same configuration files —
// and the same decisions as JSON over HTTP (POST /json,
// envoyproxy/ratelimit's endpoint), both from package rls; it serves
// /healthz, /readyz and /metrics, reloads its configuration on SIGHUP and
// when the files change (a bad file is refused with its reason and the old
// configuration stays), and has an admin API behind a bearer token. The
// memory store by default, Redis for a fleet, and chosen hot limits
// decided in process on leases in that Redis (Options.Leases, package
// leasestore).
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/filewatch"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/tlsconfig"
	"github.com/sluicehq/sluice/leasestore"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/redislease"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/rls"
)

// Defaults: every listener on loopback unless configured otherwise.
const (
	DefaultHTTPAddr  = "127.0.0.1:8080"
	DefaultGRPCAddr  = "127.0.0.1:8081"
	DefaultAdminAddr = "127.0.0.1:9090"
)

// Loader reads the configuration. It is called at start and at every
// reload.
type Loader func() (Loaded, error)

// Loaded is a configuration read.
type Loaded struct {
	// Matcher finds a descriptor's rule.
	Matcher rls.Matcher
	// Version names it (a hash of the files).
	Version string
	// FailurePolicies are the rules' on_failure, by limit name; a limit
	// not named has the store's default (Options.RedisPolicy).
	FailurePolicies map[string]sluice.FailurePolicy
	// Limits are the configured limits, by name: what Options.Leases
	// names is checked against them. Optional without Leases.
	Limits map[string]sluice.Limit
}

// Options configures a Server.
type Options struct {
	// Load reads the configuration. Required.
	Load Loader
	// Watch lists the paths whose change triggers a reload (a file, or a
	// directory: a Kubernetes ConfigMap's symlink swap is a change of the
	// directory). Optional; SIGHUP reloads too (see Reload).
	Watch []string
	// HTTPAddr, GRPCAddr, AdminAddr: the listeners. Defaults on loopback.
	HTTPAddr, GRPCAddr, AdminAddr string
	// Limiter, when set, decides (a store the caller opened and closes);
	// otherwise the server opens Redis or the memory store.
	Limiter sluice.Limiter
	// Redis, when set, is how to reach Redis (addresses, AUTH, TLS,
	// Sentinel); the memory store otherwise. New reads its secrets and
	// TLS files, and refuses to start on a Redis that refuses them
	// (redisstore.ErrMisconfigured), whatever the failure policy; a Redis
	// that is not up yet is an outage the policies decide.
	Redis *redisconfig.Connection
	// RedisPolicy is what a limit decides when Redis cannot answer, unless
	// its rule says otherwise (Loaded.FailurePolicies). Default
	// sluice.FailOpen.
	RedisPolicy sluice.FailurePolicy
	// RedisTimeout bounds each Redis call; past it the limit's failure
	// policy decides (see redisstore.Options.Timeout). Default
	// redisstore's, 50 ms.
	RedisTimeout time.Duration
	// AdminToken guards every admin route (Authorization: Bearer); a
	// missing or wrong credential is 401. Empty: the admin API is off, and
	// every route answers 403 saying so.
	AdminToken string
	// MaxDescriptors per request. Default rls.DefaultMaxDescriptors.
	MaxDescriptors int
	// ResponseHeaders asks Envoy to add RateLimit-Policy and RateLimit
	// (draft-11) to responses (envoyproxy/ratelimit adds none by default;
	// they cost about 8 % of the throughput).
	ResponseHeaders bool
	// Leases, when set, are the limits decided in process, on partitions
	// held under leases in Redis (package leasestore, with redislease on
	// Options.Redis, which it requires): each a token_bucket or gcra rule
	// of the configuration, checked at start and at every reload (a reload
	// that breaks a lease is refused). Every other limit goes to Redis as
	// before. KeyHMAC, when set, also keys the names of the leases'
	// groups.
	Leases *Leases
	// KeyHMAC, when set, is the secret with which the Redis store hashes
	// keys (HMAC-SHA256) before they reach Redis, so that no API key, IP
	// or other descriptor value appears in a Redis key name (see
	// redisstore.Options.KeyHMAC).
	// Requires Redis; changing it starts every counter fresh. Never logged.
	KeyHMAC []byte
	// Logger receives events (never a key or a descriptor's value),
	// including the Redis store's state changes (unreachable, back,
	// breaker opened, closed), once per change.
	Logger *slog.Logger
	// ShutdownTimeout bounds the drain of calls in flight. Default 10 s.
	ShutdownTimeout time.Duration
	// GRPCIdleTimeout, GRPCPingInterval, GRPCPingTimeout, GRPCMaxStreams
	// and GRPCCallTimeout bound the gRPC listener's connections and calls:
	// they are rls.GRPCOptions' IdleTimeout (default 5 min), PingInterval
	// (1 min) and PingTimeout (20 s), MaxStreams (1024) and CallTimeout
	// (10 s, as the HTTP listener's read and write timeouts), documented
	// there.
	GRPCIdleTimeout, GRPCPingInterval, GRPCPingTimeout time.Duration
	GRPCMaxStreams                                     int
	GRPCCallTimeout                                    time.Duration
	// MaxConnections caps the connections each listener (gRPC, HTTP,
	// admin) holds at once; more wait in the kernel's listen backlog until
	// one closes (the HTTP listeners' timeouts and GRPCIdleTimeout free
	// them). Default 10000.
	MaxConnections int
	// TLS, when its files are set, serves every listener (gRPC, HTTP,
	// admin) over TLS, TLS 1.2 at least; the files are checked at start
	// (a refusal names the file) and reloaded when they change or on
	// SIGHUP, new connections getting the new certificate, connections
	// open keeping theirs. With TLS.ClientCAFile, the listeners of
	// ClientAuth require a client certificate that CA signed (mTLS).
	TLS tlsconfig.Server
	// SecretSources says where the secrets given as values (AdminToken,
	// KeyHMAC) were kept — "admin_token": "file /run/secrets/token" — for
	// GET /admin/config, which never shows a secret. Optional.
	SecretSources map[string]string
	// NoJSON leaves POST /json off the HTTP listener (404), which then
	// serves /healthz, /readyz and /metrics only: for a listener left out
	// of ClientAuth so that Kubernetes probes reach it without a client
	// certificate, where /json would let anyone who reaches it spend the
	// counters Envoy's calls spend. Default false: /json is served.
	NoJSON bool
	// ClientAuth lists the listeners ("grpc", "http", "admin") that require
	// a client certificate under TLS.ClientCAFile. Default: all three. A
	// Kubernetes probe presents none: leave out the listener it probes.
	ClientAuth []string
}

// Listener names, as ClientAuth takes them.
const (
	ListenerGRPC  = "grpc"
	ListenerHTTP  = "http"
	ListenerAdmin = "admin"
)

// IsListener reports whether name is one of the listeners' names.
func IsListener(name string) bool {
	return name == ListenerGRPC || name == ListenerHTTP || name == ListenerAdmin
}

// Server is a decision service with its listeners bound and its store
// open. Run serves until its context ends.
type Server struct {
	opts    Options
	log     *slog.Logger
	matcher atomic.Pointer[rls.Matcher]
	// policies are the failure policies in force, by limit name.
	policies atomic.Pointer[map[string]sluice.FailurePolicy]
	version  atomic.Pointer[loaded]
	reload   sync.Mutex
	svc      *rls.Service
	metrics  *metrics.Metrics
	reloads  *metrics.Reloads
	grpc     *rls.GRPCServer
	http     *http.Server
	admin    *http.Server
	grpcLn   net.Listener // the listeners: bound by New, closed by Close
	httpLn   net.Listener
	adminLn  net.Listener
	watcher  *filewatch.Watcher // the configuration's files; nil when not watched
	closers  []func() error
	redis    *redisstore.Store // the Redis store the server opened; nil otherwise
	// tls holds the listeners' certificate; nil: clear text.
	tls *tlsconfig.Reloader
	// loaded is the configuration New loaded (the leases' policies).
	loaded Loaded
}

// loaded describes the configuration in force.
type loaded struct {
	Version  string    `json:"version"`
	LoadedAt time.Time `json:"loaded_at"`
}

// description is what GET /admin/config answers: the configuration in
// force (its version and when it was loaded) and the settings the server
// started with — listeners and their certificate, the store and how it
// reaches Redis, where each secret is kept — never a secret.
type description struct {
	loaded
	Listeners map[string]listenerDesc `json:"listeners"`
	// TLS describes the listeners' certificate; nil for clear text.
	TLS     *tlsconfig.Stats  `json:"tls"`
	Store   storeDesc         `json:"store"`
	Secrets map[string]string `json:"secrets,omitempty"`
}

type listenerDesc struct {
	Addr string `json:"addr"`
	TLS  bool   `json:"tls"`
	// JSON: the HTTP listener serves POST /json.
	JSON *bool `json:"json,omitempty"`
	// ClientCertificates: "required" (mTLS) or "not asked", under TLS.
	ClientCertificates string `json:"client_certificates,omitempty"`
}

type storeDesc struct {
	Kind  string                   `json:"kind"`
	Redis *redisconfig.Description `json:"redis,omitempty"`
	// Leased names the limits decided on leases.
	Leased []string `json:"leased,omitempty"`
}

// describe describes the server (see description).
func (s *Server) describe() description {
	d := description{loaded: *s.version.Load(), Listeners: map[string]listenerDesc{}, Secrets: s.opts.SecretSources, Store: storeDesc{Kind: "memory"}}
	for name, addr := range map[string]string{ListenerGRPC: s.GRPCAddr(), ListenerHTTP: s.HTTPAddr(), ListenerAdmin: s.AdminAddr()} {
		l := listenerDesc{Addr: addr, TLS: s.tls != nil}
		if name == ListenerHTTP {
			json := !s.opts.NoJSON
			l.JSON = &json
		}
		if s.tls != nil {
			l.ClientCertificates = "not asked"
			if s.opts.clientAuth(name) {
				l.ClientCertificates = "required"
			}
		}
		d.Listeners[name] = l
	}
	if s.tls != nil {
		st := s.tls.Stats()
		d.TLS = &st
	}
	switch {
	case s.opts.Limiter != nil:
		d.Store.Kind = "given"
	case s.opts.Redis != nil:
		rd := s.opts.Redis.Describe(time.Now())
		d.Store = storeDesc{Kind: "redis", Redis: &rd}
		if s.opts.Leases != nil {
			d.Store.Leased = s.opts.Leases.Names()
		}
	}
	return d
}

// New loads the configuration (refusing to start on a bad one), opens the
// store and binds the listeners.
func New(opts Options) (*Server, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	s.startWatching() // before loading: a change from here on is seen
	l, err := opts.Load()
	if err != nil {
		return nil, err // the loader's: "file:line: reason" for a bad file
	}
	if opts.Leases != nil {
		if err := opts.Leases.check(l); err != nil {
			return nil, fmt.Errorf("server: leases: %w", err)
		}
	}
	s.install(l)
	s.loaded = l
	if s.metrics, err = metrics.New(metrics.Options{}); err != nil {
		return nil, err
	}
	if s.reloads, err = s.metrics.RegisterReloads(); err != nil {
		return nil, err
	}
	// Failed handshakes, counted and logged per listener; nil in clear
	// text.
	handshakes := map[string]*tlsconfig.Handshakes{}
	if opts.TLS.Enabled() {
		if s.tls, err = tlsconfig.NewReloader(opts.TLS, tlsconfig.ReloaderOptions{Name: "serve", Logger: s.log, Watch: true}); err != nil {
			return nil, fmt.Errorf("server: TLS: %w", err)
		}
		s.closers = append(s.closers, s.tls.Close)
		if err := s.metrics.RegisterTLS("serve", func() metrics.TLSStats {
			st := s.tls.Stats()
			return metrics.TLSStats{NotAfter: st.Summary.NotAfter, Reloads: st.Reloads, Refused: st.Refused}
		}); err != nil {
			return nil, err
		}
		for _, l := range []string{ListenerGRPC, ListenerHTTP, ListenerAdmin} {
			c, err := s.metrics.HandshakeFailures(l)
			if err != nil {
				return nil, err
			}
			handshakes[l] = tlsconfig.NewHandshakes(s.log, l, c.Inc)
		}
	}
	limiter, err := s.openStore()
	if err != nil {
		return nil, err
	}
	if s.svc, err = rls.New(rls.Options{Limiter: limiter, Config: &s.matcher, Observer: s.metrics, Headers: opts.ResponseHeaders, MaxDescriptors: opts.MaxDescriptors}); err != nil {
		return nil, err
	}
	grpcOpts, err := opts.grpcOptions()
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		grpcOpts.TLS, grpcOpts.HandshakeFailed = s.tls.Config(opts.clientAuth(ListenerGRPC), "h2"), handshakes[ListenerGRPC].Failed
	}
	if s.grpc, err = rls.NewGRPCServer(s.svc, grpcOpts); err != nil {
		return nil, err
	}
	s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		ErrorLog: tlsconfig.HTTPErrorLog(s.log, ListenerHTTP, handshakes[ListenerHTTP])}
	s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10, // a CPU profile takes its seconds
		ErrorLog: tlsconfig.HTTPErrorLog(s.log, ListenerAdmin, handshakes[ListenerAdmin])}
	if s.grpcLn, err = s.listen(opts.GRPCAddr, DefaultGRPCAddr, ""); err != nil { // gRPC's credentials do its TLS
		return nil, err
	}
	if s.httpLn, err = s.listen(opts.HTTPAddr, DefaultHTTPAddr, ListenerHTTP); err != nil {
		return nil, err
	}
	if s.adminLn, err = s.listen(opts.AdminAddr, DefaultAdminAddr, ListenerAdmin); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// check refuses options that cannot work together, before anything is
// read or opened.
func (o Options) check() error {
	if o.Load == nil {
		return errors.New("server: Options.Load is required")
	}
	if o.Leases != nil && (o.Redis == nil || o.Limiter != nil) {
		return errors.New("server: Options.Leases holds its leases in the Redis the server opens: give Options.Redis (and no Limiter)")
	}
	if len(o.KeyHMAC) > 0 && (o.Redis == nil || o.Limiter != nil) {
		return errors.New("server: Options.KeyHMAC hashes the keys of the Redis the server opens: give Options.Redis (and no Limiter)")
	}
	if err := o.TLS.Validate(); err != nil {
		return fmt.Errorf("server: TLS: %w", err)
	}
	for _, l := range o.ClientAuth {
		if !IsListener(l) {
			return fmt.Errorf("server: Options.ClientAuth: %q: grpc, http or admin", l)
		}
	}
	if len(o.ClientAuth) > 0 && o.TLS.ClientCAFile == "" {
		return errors.New("server: Options.ClientAuth needs TLS.ClientCAFile, the CA of the client certificates")
	}
	return nil
}

// clientAuth reports whether listener requires client certificates.
func (o Options) clientAuth(listener string) bool {
	return o.TLS.ClientCAFile != "" && (len(o.ClientAuth) == 0 || slices.Contains(o.ClientAuth, listener))
}

// listen binds addr (def when empty), holding at most MaxConnections at
// once, over TLS for an HTTP listener (named by tlsFor) when the server
// has TLS. The handshake happens in the HTTP server, bounded by its
// timeouts.
func (s *Server) listen(addr, def, tlsFor string) (net.Listener, error) {
	a := or(addr, def)
	ln, err := net.Listen("tcp", a)
	if err != nil {
		return nil, fmt.Errorf("server: listen %s: %w", a, err)
	}
	ln = netutil.LimitListener(ln, s.opts.maxConnections())
	if s.tls != nil && tlsFor != "" {
		ln = tls.NewListener(ln, s.tls.Config(s.opts.clientAuth(tlsFor), "http/1.1"))
	}
	return ln, nil
}

func or(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

func (s *Server) openStore() (sluice.Limiter, error) {
	if s.opts.Limiter != nil {
		return s.opts.Limiter, nil
	}
	if s.opts.Redis == nil {
		m, err := memstore.New(memstore.Options{})
		if err != nil {
			return nil, fmt.Errorf("server: memory store: %w", err)
		}
		s.closers = append(s.closers, m.Close)
		return m, s.metrics.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats(m.Stats()) })
	}
	dial, err := s.opts.Redis.DialOptions(time.Now())
	if err != nil {
		return nil, fmt.Errorf("server: redis %w", err)
	}
	// Connected in the background: a Redis down at start is an outage
	// the policies decide, until it appears; one that refuses the
	// configuration is a start failure.
	conn, err := redisstore.Dial(dial)
	if err != nil {
		return nil, err // redisstore's, which says what Redis refused
	}
	s.closers = append(s.closers, conn.Close)
	st, err := redisstore.New(redisstore.Options{Client: conn, Policy: s.opts.RedisPolicy, Timeout: s.opts.RedisTimeout, KeyHMAC: s.opts.KeyHMAC, Logger: s.log,
		PolicyOf: func(l sluice.Limit) (sluice.FailurePolicy, bool) { // the rules' on_failure, as reloaded
			p, ok := (*s.policies.Load())[l.Name]
			return p, ok
		}})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.closers = append(s.closers, st.Close)
	s.redis = st
	if err := s.metrics.RegisterRedis(func() metrics.RedisStats { return metrics.RedisStats(st.Stats()) }); err != nil {
		return nil, err
	}
	if s.opts.Leases == nil {
		return st, nil
	}
	return s.openLeases(conn, st)
}

// openLeases puts the leased limits on a leasestore in front of the Redis
// store next, with its leases in Redis through conn, and runs it until
// Close (which ends its Holders before the connection closes).
func (s *Server) openLeases(conn redisscript.Client, next sluice.Limiter) (sluice.Limiter, error) {
	l := s.opts.Leases
	coord, err := redislease.New(redislease.Options{Client: conn, Prefix: l.Prefix})
	if err != nil {
		return nil, fmt.Errorf("server: leases: %w", err)
	}
	ls, err := leasestore.New(leasestore.Options{Coordinator: coord, Next: next, Limits: l.resolved(s.loaded, s.opts.RedisPolicy),
		Member: l.Member, Secret: s.opts.KeyHMAC, MaxKeys: l.MaxKeys, Logger: s.log})
	if err != nil {
		return nil, fmt.Errorf("server: leases: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ls.Run(ctx) }()
	s.closers = append(s.closers, func() error { cancel(); return <-done })
	s.log.Info("limits on leases", "limits", l.Names(), "member", ls.Member())
	return ls, s.metrics.RegisterLeases(func() []metrics.LeaseStats {
		var out []metrics.LeaseStats
		for _, st := range ls.Stats() {
			out = append(out, metrics.LeaseStats(st))
		}
		return out
	})
}

// failsClosed reports whether a limit in force fails closed when Redis
// cannot answer: the default policy, or a rule's on_failure.
func (s *Server) failsClosed() bool {
	if s.opts.RedisPolicy == sluice.FailClosed {
		return true
	}
	for _, p := range *s.policies.Load() {
		if p == sluice.FailClosed {
			return true
		}
	}
	return false
}

// redisReady is nil when the server may take traffic as far as Redis is
// concerned: no Redis, no limit that fails closed, or a Redis that
// answers a Ping (bounded by the store's timeout).
func (s *Server) redisReady(ctx context.Context) error {
	if s.redis == nil || !s.failsClosed() {
		return nil
	}
	return s.redis.Ping(ctx)
}

// GRPCAddr, HTTPAddr and AdminAddr are the bound listeners' addresses.
func (s *Server) GRPCAddr() string  { return s.grpcLn.Addr().String() }
func (s *Server) HTTPAddr() string  { return s.httpLn.Addr().String() }
func (s *Server) AdminAddr() string { return s.adminLn.Addr().String() }

// Version is the version of the configuration in force.
func (s *Server) Version() string { return s.version.Load().Version }

// Reload reads the configuration again. A bad one is refused (the error
// says why) and the configuration in force stays; either way a metric
// counts it.
func (s *Server) Reload() error {
	s.reload.Lock()
	defer s.reload.Unlock()
	l, err := s.opts.Load()
	if err == nil && s.opts.Leases != nil {
		if err = s.opts.Leases.check(l); err != nil {
			err = fmt.Errorf("server: leases: %w", err)
		}
	}
	if err != nil {
		s.reloads.Refused()
		s.log.Error("configuration refused; the previous one stays", "err", err, "version", s.Version())
		return err
	}
	s.reloads.OK()
	if l.Version == s.Version() {
		return nil
	}
	s.install(l)
	s.log.Info("configuration loaded", "version", l.Version)
	return nil
}

// install puts a loaded configuration in force.
func (s *Server) install(l Loaded) {
	policies := make(map[string]sluice.FailurePolicy, len(l.FailurePolicies))
	for name, p := range l.FailurePolicies {
		if p.Valid() {
			policies[name] = p
		}
	}
	s.policies.Store(&policies)
	s.matcher.Store(&l.Matcher)
	s.version.Store(&loaded{Version: l.Version, LoadedAt: time.Now().UTC()})
}

// Run serves until ctx ends, reloading on hup (SIGHUP, typically) and when
// a watched path changes, then drains: no new calls, calls in flight finish
// within the shutdown timeout. It returns nil after a graceful shutdown.
func (s *Server) Run(ctx context.Context, hup <-chan struct{}) error {
	s.log.Info("serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "admin", s.AdminAddr(), "tls", s.tls != nil, "version", s.Version())
	errs := make(chan error, 3)
	go func() { errs <- s.grpc.Serve(s.grpcLn) }()
	go func() { errs <- s.http.Serve(s.httpLn) }()
	go func() { errs <- s.admin.Serve(s.adminLn) }()
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); s.watch(wctx, hup) }()
	var err error
	pending := 3
	select {
	case <-ctx.Done():
	case err = <-errs: // a listener failed
		pending--
	}
	s.grpc.SetServing(false)
	stopWatch()
	<-watched
	err = errors.Join(err, s.drain(ctx))
	for range pending {
		if e := <-errs; e != nil && !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	s.log.Info("stopped")
	return errors.Join(err, s.Close())
}

// drain stops the servers: no new connections or calls, and the calls in
// flight answered within the shutdown timeout; past it, the gRPC calls
// still in flight are cut.
func (s *Server) drain(ctx context.Context) error {
	timeout := s.opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	drained := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(drained) }()
	err := errors.Join(s.http.Shutdown(sctx), s.admin.Shutdown(sctx))
	select {
	case <-drained:
	case <-sctx.Done():
		s.grpc.Stop()
		<-drained
	}
	return err
}

// Close releases the store and the listeners. Safe to call more than once.
func (s *Server) Close() error {
	var err error
	for _, l := range []net.Listener{s.grpcLn, s.httpLn, s.adminLn} {
		if l != nil {
			l.Close()
		}
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		err = errors.Join(err, s.closers[i]())
	}
	s.closers = nil
	return err
}

// httpHandler serves /json (rls.JSONHandler: POST an RLS request as
// JSON, the answer as JSON; not with NoJSON), /healthz, /readyz and
// /metrics.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if !s.opts.NoJSON {
		mux.Handle("/json", rls.JSONHandler(s.svc))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if p := s.matcher.Load(); p == nil || *p == nil {
			http.Error(w, "no configuration", http.StatusServiceUnavailable)
			return
		}
		if err := s.redisReady(r.Context()); err != nil {
			// The cause (an address, a dial error) is in the log, not
			// in an answer anyone who reaches this listener can read.
			http.Error(w, "not ready: Redis is unreachable and a limit fails closed", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready "+s.Version()+"\n")
	})
	mux.Handle("GET /metrics", s.metrics.Handler())
	return mux
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// adminHandler: every route needs the bearer token. GET /admin/config (the
// configuration in force), POST /admin/reload, GET /admin/keys (a
// descriptor's counter, spending nothing), POST /admin/keys/reset (forget
// it), GET /admin/tenants (the heaviest counters by cost spent and by
// rejections, as pseudonyms; ?n= 1 to 1000, default 20: see
// metrics.TenantsHandler), POST /admin/tenants/reset, and /debug/pprof/
// (profiles). Without a configured token every route is 403 (the admin API
// is off); with one, a missing or wrong credential is 401 with
// WWW-Authenticate — as the gateway's admin. Both bodies are JSON
// {"error": ...} saying which.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.describe())
	})
	mux.HandleFunc("POST /admin/reload", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Reload(); err != nil {
			writeJSONError(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.version.Load())
	})
	// A descriptor's counter: ?domain=edge&entry=api_key=k1[&entry=…].
	mux.HandleFunc("GET /admin/keys", func(w http.ResponseWriter, r *http.Request) {
		domain, es, ok := descriptorOf(w, r)
		if !ok {
			return
		}
		rule, st, err := s.svc.Peek(r.Context(), domain, es)
		if err != nil {
			writeAdminError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"limit": rule.Limit.Name, "quota": rule.Limit.Quota, "window": rule.Limit.Window.String(),
			"remaining": st.Remaining, "reset_after": st.ResetAfter.String()})
	})
	mux.HandleFunc("POST /admin/keys/reset", func(w http.ResponseWriter, r *http.Request) {
		domain, es, ok := descriptorOf(w, r)
		if !ok {
			return
		}
		if _, err := s.svc.Reset(r.Context(), domain, es); err != nil {
			writeAdminError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	// Profiles of the running service (net/http/pprof), behind the token
	// like every admin route.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.Handle("GET /admin/tenants", s.metrics.TenantsHandler())
	mux.Handle("POST /admin/tenants/reset", s.metrics.ResetTenantsHandler())
	return admin.Handler(admin.Options{Token: s.opts.AdminToken, Enable: "start sluice serve with --admin-token-file or --admin-token-env"}, mux)
}

// descriptorOf reads an admin request's descriptor: ?domain= and one
// entry=key=value per entry, in order.
func descriptorOf(w http.ResponseWriter, r *http.Request) (string, []rls.Entry, bool) {
	q := r.URL.Query()
	domain := q.Get("domain")
	var es []rls.Entry
	for _, e := range q["entry"] {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("entry %q: key=value", e))
			return "", nil, false
		}
		es = append(es, rls.Entry{Key: k, Value: v})
	}
	if domain == "" || len(es) == 0 || len(es) > rls.MaxEntries {
		writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("give ?domain= and 1 to %d entry=key=value", rls.MaxEntries))
		return "", nil, false
	}
	return domain, es, true
}

func writeAdminError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, rls.ErrNoLimit):
		writeJSONError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, rls.ErrNotInspectable), errors.Is(err, leasestore.ErrLeased):
		writeJSONError(w, http.StatusNotImplemented, err.Error())
	default:
		writeJSONError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// Checked is what Check found: the configuration's version and what the
// TLS files and the Redis settings hold.
type Checked struct {
	Version string
	// TLS describes the listeners' certificate; nil for clear text.
	TLS *tlsconfig.Summary
	// Redis describes the Redis connection; nil for the memory store.
	Redis *redisconfig.Description
}

// Check runs the checks New runs, without binding a listener, connecting
// to Redis or watching a file: the options, the configuration (Load), the
// gRPC bounds, the TLS files (read and checked: a certificate and its key
// that match, valid now, a client CA that parses) and the Redis settings
// (their secrets and TLS files read). A configuration Check accepts fails
// New only on what the machine decides at that moment (an address in use,
// a Redis that refuses the credentials, a file changed in between).
// sluice check runs it.
func Check(opts Options) (Checked, error) {
	if err := opts.check(); err != nil {
		return Checked{}, err
	}
	l, err := opts.Load()
	if err != nil {
		return Checked{}, err
	}
	if opts.Leases != nil {
		if err := opts.Leases.check(l); err != nil {
			return Checked{}, fmt.Errorf("server: leases: %w", err)
		}
	}
	c := Checked{Version: l.Version}
	if _, err := opts.grpcOptions(); err != nil {
		return Checked{}, err
	}
	now := time.Now()
	if opts.TLS.Enabled() {
		sum, err := opts.TLS.Check(now)
		if err != nil {
			return Checked{}, fmt.Errorf("server: TLS: %w", err)
		}
		c.TLS = &sum
	}
	if opts.Redis != nil && opts.Limiter == nil {
		if _, err := opts.Redis.DialOptions(now); err != nil {
			return Checked{}, fmt.Errorf("server: redis %w", err)
		}
		d := opts.Redis.Describe(now)
		c.Redis = &d
	}
	return c, nil
}
