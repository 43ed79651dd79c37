// Package server is sluice's decision service (sluice serve): the seed's
// shared decision service that every API server or proxy asks. It speaks
// Envoy's rate limit service (RLS v3) over gRPC — a drop-in for
// envoyproxy/ratelimit, reading the same configuration files — and the
// same decisions as JSON over HTTP (POST /json, envoyproxy/ratelimit's
// endpoint); it serves /healthz, /readyz and /metrics, reloads its
// configuration on SIGHUP and when the files change (a bad file is refused
// with its reason and the old configuration stays), and has an admin API
// behind a bearer token. Memory store by default, Redis for a fleet.
package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/rls"
)

// Defaults: every listener on loopback unless configured otherwise.
const (
	DefaultHTTPAddr  = "127.0.0.1:8080"
	DefaultGRPCAddr  = "127.0.0.1:8081"
	DefaultAdminAddr = "127.0.0.1:9090"
	// MaxBody bounds a JSON request (and MaxMessage a gRPC one).
	MaxBody    = 64 << 10
	MaxMessage = 1 << 20
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
	// FailurePolicies are the rules' on_failure, by limit name
	// (fail_open, fail_closed, fail_local); a limit not named has the
	// store's default.
	FailurePolicies map[string]string
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
	// Redis, when set, is the Redis address (several, comma-separated: a
	// Cluster); the memory store otherwise.
	Redis string
	// RedisPolicy is what a limit decides when Redis cannot answer.
	// Default sluice.FailOpen.
	RedisPolicy sluice.FailurePolicy
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
	// KeyHMAC, when set, is the secret with which the Redis store hashes
	// keys (HMAC-SHA256) before they reach Redis, so that no API key, IP
	// or other descriptor value appears in a Redis key name (see
	// redisstore.Options.KeyHMAC; ReadKeyHMAC reads it from a file).
	// Requires Redis; changing it starts every counter fresh. Never logged.
	KeyHMAC []byte
	// Logger receives events (never a key or a descriptor's value),
	// including the Redis store's state changes (unreachable, back,
	// breaker opened, closed), once per change.
	Logger *slog.Logger
	// ShutdownTimeout bounds the drain of calls in flight. Default 10 s.
	ShutdownTimeout time.Duration
	// GRPCIdleTimeout closes a gRPC connection that has had no call in
	// flight for this long, with a GOAWAY (a client such as Envoy
	// reconnects on its next call, failing none). Default 5 min.
	GRPCIdleTimeout time.Duration
	// GRPCPingInterval and GRPCPingTimeout: a gRPC connection silent for
	// GRPCPingInterval is pinged, and closed when the ping is not answered
	// within GRPCPingTimeout (a peer gone without closing). Defaults 1 min
	// (at least 1 s) and 20 s. A client may ping every
	// MinClientPingInterval at most, calls in flight or not.
	GRPCPingInterval, GRPCPingTimeout time.Duration
	// GRPCMaxStreams caps the calls in flight on one gRPC connection,
	// announced in its HTTP/2 SETTINGS (SETTINGS_MAX_CONCURRENT_STREAMS),
	// which clients keep to (grpc-go waits for a free stream, Envoy opens
	// another connection); a stream past it is refused with RST_STREAM
	// REFUSED_STREAM, safe to retry. At most 2^31-1. Default
	// DefaultGRPCMaxStreams (1024; grpc-go's own default is no bound).
	GRPCMaxStreams int
	// GRPCCallTimeout bounds a gRPC call's life: a unary call (every RLS
	// call) ends with DEADLINE_EXCEEDED this long after its HEADERS if it
	// has not answered, whether its request message never arrived or the
	// client's deadline (grpc-timeout) is longer; a shorter client deadline
	// applies as it is. A streaming call (the health service's Watch) is
	// bounded only until its request message arrives. Default
	// DefaultGRPCCallTimeout (10 s, as the HTTP listener's read and write
	// timeouts; an RLS call takes milliseconds, and Envoy's rate limit
	// filter gives up after 20 ms by default).
	GRPCCallTimeout time.Duration
	// MaxConnections caps the connections each listener (gRPC, HTTP,
	// admin) holds at once; more wait in the kernel's listen backlog until
	// one closes (the HTTP listeners' timeouts and GRPCIdleTimeout free
	// them). Default 10000.
	MaxConnections int
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
	reloads  *prometheus.CounterVec
	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	admin    *http.Server
	lns      [3]net.Listener // grpc, http, admin
	watcher  *fsnotify.Watcher
	watched  map[string]bool // base names of watched files (not directories)
	closers  []func() error
	redis    *redisstore.Store // the Redis store the server opened; nil otherwise
}

// loaded describes the configuration in force.
type loaded struct {
	Version  string    `json:"version"`
	LoadedAt time.Time `json:"loaded_at"`
}

// New loads the configuration (refusing to start on a bad one), opens the
// store and binds the listeners.
func New(opts Options) (*Server, error) {
	if opts.Load == nil {
		return nil, errors.New("server: Options.Load is required")
	}
	if len(opts.KeyHMAC) > 0 && (opts.Redis == "" || opts.Limiter != nil) {
		return nil, errors.New("server: Options.KeyHMAC hashes the keys of the Redis the server opens: give Options.Redis (and no Limiter)")
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
		return nil, fmt.Errorf("server: %w", err)
	}
	s.install(l)
	if s.metrics, err = metrics.New(metrics.Options{}); err != nil {
		return nil, err
	}
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Name: "config_reloads_total",
		Help: "Configuration reloads, by result (ok, or refused: the file was bad and the previous configuration stayed).",
	}, []string{"result"})
	s.metrics.Registry().MustRegister(s.reloads)
	limiter, err := s.openStore()
	if err != nil {
		return nil, err
	}
	if s.svc, err = rls.New(rls.Options{Limiter: limiter, Config: &s.matcher, Observer: s.metrics, Headers: opts.ResponseHeaders, MaxDescriptors: opts.MaxDescriptors}); err != nil {
		return nil, err
	}
	bounds, calls, err := opts.grpcBounds()
	if err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer(append(bounds, rls.ServerOption(), grpc.MaxRecvMsgSize(MaxMessage), grpc.ConnectionTimeout(5*time.Second))...)
	s.svc.Register(s.grpc)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	calls.setMethods(s.grpc.GetServiceInfo())
	s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10} // a CPU profile takes its seconds
	for i, a := range []string{or(opts.GRPCAddr, DefaultGRPCAddr), or(opts.HTTPAddr, DefaultHTTPAddr), or(opts.AdminAddr, DefaultAdminAddr)} {
		if s.lns[i], err = net.Listen("tcp", a); err != nil {
			return nil, fmt.Errorf("server: listen %s: %w", a, err)
		}
		s.lns[i] = netutil.LimitListener(s.lns[i], opts.maxConnections())
	}
	ok = true
	return s, nil
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
	if s.opts.Redis == "" {
		m, err := memstore.New(memstore.Options{})
		if err != nil {
			return nil, fmt.Errorf("server: memory store: %w", err)
		}
		s.closers = append(s.closers, m.Close)
		return m, s.metrics.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats(m.Stats()) })
	}
	// Connected in the background: a Redis down at start is an outage
	// the policies decide, until it appears.
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: strings.Split(s.opts.Redis, ",")})
	if err != nil {
		return nil, fmt.Errorf("server: redis %s: %w", s.opts.Redis, err)
	}
	s.closers = append(s.closers, conn.Close)
	st, err := redisstore.New(redisstore.Options{Client: conn, Policy: s.opts.RedisPolicy, KeyHMAC: s.opts.KeyHMAC, Logger: s.log,
		PolicyOf: func(l sluice.Limit) (sluice.FailurePolicy, bool) { // the rules' on_failure, as reloaded
			p, ok := (*s.policies.Load())[l.Name]
			return p, ok
		}})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.closers = append(s.closers, st.Close)
	s.redis = st
	return st, s.metrics.RegisterRedis(func() metrics.RedisStats { return metrics.RedisStats(st.Stats()) })
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
func (s *Server) GRPCAddr() string  { return s.lns[0].Addr().String() }
func (s *Server) HTTPAddr() string  { return s.lns[1].Addr().String() }
func (s *Server) AdminAddr() string { return s.lns[2].Addr().String() }

// Version is the version of the configuration in force.
func (s *Server) Version() string { return s.version.Load().Version }

// Reload reads the configuration again. A bad one is refused (the error
// says why) and the configuration in force stays; either way a metric
// counts it.
func (s *Server) Reload() error {
	s.reload.Lock()
	defer s.reload.Unlock()
	l, err := s.opts.Load()
	if err != nil {
		s.reloads.WithLabelValues("refused").Inc()
		s.log.Error("configuration refused; the previous one stays", "err", err, "version", s.Version())
		return err
	}
	s.reloads.WithLabelValues("ok").Inc()
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
		if pol, ok := policyNames[p]; ok {
			policies[name] = pol
		}
	}
	s.policies.Store(&policies)
	s.matcher.Store(&l.Matcher)
	s.version.Store(&loaded{Version: l.Version, LoadedAt: time.Now().UTC()})
}

// policyNames are the failure policies by their configuration names.
var policyNames = map[string]sluice.FailurePolicy{"fail_open": sluice.FailOpen, "fail_closed": sluice.FailClosed, "fail_local": sluice.FailLocal}

// ParsePolicy reads a failure policy's name.
func ParsePolicy(name string) (sluice.FailurePolicy, bool) {
	p, ok := policyNames[name]
	return p, ok
}

// Run serves until ctx ends, reloading on hup (SIGHUP, typically) and when
// a watched path changes, then drains: no new calls, calls in flight finish
// within the shutdown timeout. It returns nil after a graceful shutdown.
func (s *Server) Run(ctx context.Context, hup <-chan struct{}) error {
	s.log.Info("serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "admin", s.AdminAddr(), "version", s.Version())
	errs := make(chan error, 3)
	go func() { errs <- s.grpc.Serve(s.lns[0]) }()
	go func() { errs <- s.http.Serve(s.lns[1]) }()
	go func() { errs <- s.admin.Serve(s.lns[2]) }()
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); s.watch(wctx, hup) }()
	var err error
	pending := 3
	select {
	case <-ctx.Done():
	case err = <-errs:
		pending--
	}
	s.health.Shutdown()
	stopWatch()
	<-watched
	timeout := s.opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	drained := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(drained) }()
	err = errors.Join(err, s.http.Shutdown(sctx), s.admin.Shutdown(sctx))
	select {
	case <-drained:
	case <-sctx.Done():
		s.grpc.Stop()
		<-drained
	}
	for range pending {
		if e := <-errs; e != nil && !errors.Is(e, http.ErrServerClosed) && !errors.Is(e, grpc.ErrServerStopped) {
			err = errors.Join(err, e)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	s.log.Info("stopped")
	return errors.Join(err, s.Close())
}

// Close releases the store and the listeners. Safe to call more than once.
func (s *Server) Close() error {
	var err error
	for _, l := range s.lns {
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

// httpHandler serves POST /json (an RLS request as JSON, the answer as
// JSON: 200, or 429 when over the limit), /healthz, /readyz and /metrics.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", s.serveJSON)
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

var jsonIn = protojson.UnmarshalOptions{DiscardUnknown: false}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a request is at most %d bytes", MaxBody))
		return
	} else if err != nil {
		writeJSONError(w, http.StatusBadRequest, "reading the request: "+err.Error())
		return
	}
	var req rlpb.RateLimitRequest
	if err := jsonIn.Unmarshal(body, &req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "not an RLS request in JSON: "+err.Error())
		return
	}
	resp, err := s.svc.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		code := http.StatusServiceUnavailable
		if status.Code(err) == codes.InvalidArgument {
			code = http.StatusBadRequest
		}
		writeJSONError(w, code, status.Convert(err).Message())
		return
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(resp)
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, "encoding the answer failed")
		return
	}
	var compact bytes.Buffer // protojson varies its spacing on purpose; clients and docs get one form
	if json.Compact(&compact, out) == nil {
		out = compact.Bytes()
	}
	if resp.OverallCode == rlpb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(append(out, '\n'))
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
		_ = json.NewEncoder(w).Encode(s.version.Load())
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
	token := []byte(s.opts.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if len(token) == 0 {
			writeJSONError(w, http.StatusForbidden, "admin endpoints are off: no admin token is configured (start sluice serve with --admin-token-file)")
			return
		}
		got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !bearer || subtle.ConstantTimeCompare([]byte(got), token) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			writeJSONError(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer and the admin token")
			return
		}
		mux.ServeHTTP(w, r)
	})
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
	case errors.Is(err, rls.ErrNotInspectable):
		writeJSONError(w, http.StatusNotImplemented, err.Error())
	default:
		writeJSONError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// ReadKeyHMAC reads the secret of Options.KeyHMAC from a file, trimmed of
// surrounding white space: at least 16 characters (the gateway's
// key_hmac_file rule). The error names the file, never the secret.
func ReadKeyHMAC(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("server: key HMAC secret: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if len(secret) < 16 {
		return nil, fmt.Errorf("server: key HMAC secret %s: the secret must be at least 16 characters", path)
	}
	return []byte(secret), nil
}

// ReadToken reads an admin token from a file: one line, at least 16
// characters.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("server: admin token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 16 || strings.ContainsAny(t, " \t\r\n") {
		return "", fmt.Errorf("server: admin token %s: one word of at least 16 characters", path)
	}
	return t, nil
}
