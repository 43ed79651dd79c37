// Package config is the schema of the gateway's YAML file (sluice gateway
// --config, sluice check): the limits, the rules that apply them to HTTP
// requests, the store, the listeners, the upstream. (The decision service,
// sluice serve, reads envoyproxy/ratelimit's files instead: package
// rls/envoyconfig.) Decoding is strict: an unknown field (with the closest
// known one suggested), a value of the wrong type, a limit that cannot be
// enforced, a rule naming a limit that does not exist — each is refused as
// an *Error that names the file, the line and the reason, before anything
// starts. What needs more than the file (the secrets it names, the store's
// options) is checked by gateway.Check, which the gateway runs at start.
//
// A complete file, every field shown with its default:
//
//	listen: 127.0.0.1:8080          # the gateway's listener
//	tls:                            # TLS on the gateway's listener (absent: clear text); the files are reloaded when they change
//	  cert_file: ""                 # the certificate (and intermediates), PEM
//	  key_file: ""                  # its key, PEM, not encrypted
//	  client_ca_file: ""            # set: clients must present a certificate this CA signed (mTLS)
//	  min_version: "1.2"            # or "1.3"
//	upstream: ""                    # the gateway's upstream URL (or --upstream)
//	server:                         # the gateway's listener: bounds for slow and idle clients
//	  read_header_timeout: 10s      # a request's headers must have arrived (slowloris)
//	  read_timeout: 1m              # the whole request, its body included
//	  write_timeout: 1m             # the whole answer, from the end of the headers: the upstream's time included
//	  idle_timeout: 75s             # a keep-alive connection waiting for its next request
//	  max_body_bytes: 1048576       # a larger request body: 413 (1 MiB, as nginx)
//	  max_connections: 10000        # connections held at once; more wait in the listen backlog
//	admin:
//	  listen: 127.0.0.1:9090        # /metrics, and /admin/* behind the token
//	  token_file: ""                # a file holding the admin token; no token: /admin/* is off
//	  token_env: ""                 # or an environment variable holding it
//	  tls: {}                       # TLS on the admin listener: the fields of tls: above
//	store:
//	  kind: memory                  # memory or redis
//	  memory:
//	    max_keys: 1000000           # states held at most (~56 bytes each); at least 1
//	  redis:
//	    addrs: [127.0.0.1:6379]     # several: a Cluster
//	    username: ""                # an ACL user (Redis 6+); needs a password
//	    password_file: ""           # a file holding Redis's password
//	    password_env: ""            # or an environment variable holding it
//	    db: 0                       # a single node's database
//	    tls:                        # absent: clear text; tls: {} for the system's roots
//	      ca_file: ""               # the CA that signed Redis's certificate
//	      cert_file: ""             # a client certificate, for tls-auth-clients yes
//	      key_file: ""
//	      server_name: ""           # default: the host dialled
//	    sentinel:                   # absent: addrs is Redis; present: the Sentinels find the master
//	      master: ""                # its name under the Sentinels
//	      addrs: []                 # the Sentinels (port 26379)
//	      username: ""              # the Sentinels' own AUTH, when they ask for one
//	      password_file: ""
//	      password_env: ""
//	    connect_timeout: 1s         # one connection attempt: dial, TLS, AUTH
//	    prefix: sluice              # at most 64 bytes, no { or }
//	    key_hmac_file: ""           # a file holding a secret: keys are HMAC'd before Redis
//	    key_hmac_env: ""            # or an environment variable holding it
//	    timeout: 50ms               # each command; past it the limit's on_failure decides
//	    instances: 1                # processes sharing the limits (fail_local divides by it)
//	    deny_cache: 0
//	  leases:                       # absent: every limit a script call in Redis; kind redis only (docs/leasestore.md)
//	    limits:                     # the hot limits decided in process, on partitions held under leases in that Redis
//	      - name: global            # a token_bucket or gcra limit of limits:
//	        partitions: 8           # P: each a bucket of quota/P and burst/P
//	        ttl: 2s                 # a lease's length; renewed every ttl/3
//	        on_failure: ""          # Redis out of reach, nothing held: default the limit's on_failure
//	        outage_share: 0         # kept out of the leases for fail_local
//	        idle: 1m                # a key's partitions given back after this long unused (30 × ttl)
//	    member: ""                  # this instance among the fleet's; default random
//	    max_keys: 1024              # keys held on leases at once
//	    prefix: "sluice:lease:"     # the leases' Redis keys
//	headers:
//	  version: draft-11             # or draft-06
//	  legacy: false                 # X-RateLimit-* too
//	client_ip:
//	  trusted_proxies: []           # CIDRs whose forwarding header is believed
//	  header: x-forwarded-for       # or forwarded (RFC 7239)
//	  ipv4_prefix: 32
//	  ipv6_prefix: 64
//	request:                        # how the gateway normalises a request before the rules see it
//	  escaped_slashes: reject       # %2F, %5C or \ in the path: reject (400) or unescape (a separator)
//	  path_parameters: keep         # ";" in a segment: keep (data), strip (as Java servlets do) or reject (400)
//	  headers_with_underscores: allow # a header named with "_" or another byte outside A-Za-z0-9-: allow, drop or reject (400)
//	fence:                          # absent: lease fencing tokens (Sluice-Lease-Epoch) are not checked; fence: {} checks any group's
//	  groups: []                    # the lease groups fenced (another group's token: 403); empty: any, up to max_groups
//	  max_groups: 1024              # without groups: groups remembered at most; a new one past it: 403 (never one forgotten)
//	  required: false               # true: a request without Sluice-Lease-Epoch is refused (428)
//	limits:
//	  - name: per-ip
//	    algorithm: token_bucket     # gcra, fixed_window, sliding_log, sliding_window, leaky_bucket, concurrency
//	    quota: 100
//	    window: 1m
//	    burst: 0                    # 0: the quota
//	    delay_threshold: 0          # leaky_bucket only
//	    on_failure: fail_open       # when Redis cannot answer: fail_closed, fail_local
//	rules:
//	  - name: api
//	    match: {methods: [], path: /}
//	    mode: all_or_nothing        # or rejections_count
//	    shadow: false
//	    on_error: fail_open         # when the limiter fails: fail_closed answers 503
//	    quotas:
//	      - limit: per-ip
//	        key: ip                 # global, header (with header:), principal (with header:, set by an auth proxy)
//	        header: ""
//	        cost: 1
//	        charge_header: ""       # a response header whose number is charged after the response
package config

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/leaseconfig"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/secret"
	"github.com/sluicehq/sluice/internal/tlsconfig"
	"github.com/sluicehq/sluice/lease"
)

// MaxFileSize bounds a configuration file.
const MaxFileSize = configfile.MaxFileSize

// File is a gateway configuration as Load and Parse return it: decoded,
// its defaults filled in, validated. A File is not modified by the
// gateway; it is safe to share once parsed.
type File struct {
	Listen   string           `yaml:"listen"`
	TLS      tlsconfig.Server `yaml:"tls"`
	Upstream string           `yaml:"upstream"`
	Admin    Admin            `yaml:"admin"`
	Server   Server           `yaml:"server"`
	Store    Store            `yaml:"store"`
	Headers  Headers          `yaml:"headers"`
	ClientIP ClientIP         `yaml:"client_ip"`
	Request  Request          `yaml:"request"`
	Fence    *Fence           `yaml:"fence"`
	Limits   []Limit          `yaml:"limits"`
	Rules    []Rule           `yaml:"rules"`

	name string     // the file's name, for messages
	root *yaml.Node // the document, for line numbers
}

// Admin is the operator's listener.
type Admin struct {
	Listen string `yaml:"listen"`
	// TokenFile and TokenEnv say where the admin token is kept (one of
	// them; neither: the admin API is off).
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
	// TLS is the admin listener's.
	TLS tlsconfig.Server `yaml:"tls"`
}

// Token is where the admin token is kept.
func (a Admin) Token() secret.Source { return secret.Source{File: a.TokenFile, Env: a.TokenEnv} }

// Server bounds the gateway's public listener, so that slow and idle
// clients cannot hold it: each timeout closes the connection that
// overstays it. A zero field means its default (Default* below); no
// bound can be switched off, only raised.
type Server struct {
	// ReadHeaderTimeout: a request's headers must have arrived within it
	// of the connection's accept or of the request's first byte
	// (slowloris). Default 10 s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading the whole request, its body included
	// (net/http's ReadTimeout: a total, not a gap between reads); a body
	// still arriving then is cut (408 when the upstream was reading it).
	// Also bounds the draining of an unread body after a 429. Default
	// 1 min (nginx's client_body_timeout, here for the whole body).
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds the whole answer, from the end of the request's
	// headers: the upstream's time to answer included (as nginx's
	// proxy_read_timeout, 1 min), and a client that does not read. An
	// answer not finished then is cut: the upstream request is canceled
	// and the connection closed. Long streams (server-sent events, large
	// downloads) need a larger value. Default 1 min.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection that has no request for
	// this long. Default 75 s (nginx's keepalive_timeout): longer than the
	// 60 s idle timeout of the usual load balancers in front, so that they
	// close first; raise it behind one that waits longer.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxBodyBytes bounds a request body: one declared larger is refused
	// with 413 before the upstream is called, and one that grows larger
	// (chunked) is cut with 413. Default 1 MiB (nginx's
	// client_max_body_size); raise it for uploads.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxConnections caps the connections the listener holds at once;
	// more wait in the kernel's listen backlog until one closes. Default
	// 10000 (each may hold an upstream connection too: keep it under half
	// the process's file-descriptor limit).
	MaxConnections int `yaml:"max_connections"`
}

// Defaults of the server section.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = time.Minute
	DefaultIdleTimeout       = 75 * time.Second
	DefaultMaxBodyBytes      = 1 << 20
	DefaultMaxConnections    = 10000
)

func (s *Server) defaults() {
	if s.ReadHeaderTimeout == 0 && s.ReadTimeout > 0 && time.Duration(s.ReadTimeout) < DefaultReadHeaderTimeout {
		s.ReadHeaderTimeout = s.ReadTimeout // the headers are part of the request
	}
	for _, d := range []struct {
		field *Duration
		def   time.Duration
	}{{&s.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&s.ReadTimeout, DefaultReadTimeout}, {&s.WriteTimeout, DefaultWriteTimeout}, {&s.IdleTimeout, DefaultIdleTimeout}} {
		if *d.field == 0 {
			*d.field = Duration(d.def)
		}
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.MaxConnections == 0 {
		s.MaxConnections = DefaultMaxConnections
	}
}

// validateServer checks the server section (after its defaults).
func (f *File) validateServer() error {
	s := f.Server
	for _, d := range []struct {
		name string
		v    Duration
	}{{"read_header_timeout", s.ReadHeaderTimeout}, {"read_timeout", s.ReadTimeout}, {"write_timeout", s.WriteTimeout}, {"idle_timeout", s.IdleTimeout}} {
		if d.v < 0 {
			return f.errAt([]any{"server", d.name}, "server %s %v: must be positive (0 or absent: the default; a bound cannot be switched off)", d.name, time.Duration(d.v))
		}
	}
	if s.ReadHeaderTimeout > s.ReadTimeout {
		return f.errAt([]any{"server", "read_header_timeout"}, "server read_header_timeout %v is longer than read_timeout %v, which bounds the whole request, headers included", time.Duration(s.ReadHeaderTimeout), time.Duration(s.ReadTimeout))
	}
	if s.MaxBodyBytes < 0 {
		return f.errAt([]any{"server", "max_body_bytes"}, "server max_body_bytes %d: must be positive (0 or absent: %d)", s.MaxBodyBytes, DefaultMaxBodyBytes)
	}
	if s.MaxConnections < 0 {
		return f.errAt([]any{"server", "max_connections"}, "server max_connections %d: must be positive (0 or absent: %d)", s.MaxConnections, DefaultMaxConnections)
	}
	return nil
}

// Store selects and configures the store.
type Store struct {
	Kind   string `yaml:"kind"`
	Memory Memory `yaml:"memory"`
	Redis  Redis  `yaml:"redis"`
	// Leases, with kind redis, are the limits decided in process on
	// partitions held under leases in that Redis (package leasestore, as
	// sluice serve --leases): the few hot ones where a script call per
	// decision is the bottleneck. Nil: none.
	Leases *leaseconfig.Leases `yaml:"leases"`
}

// Memory configures the in-process store.
type Memory struct {
	MaxKeys *int `yaml:"max_keys"`
}

// Redis configures the Redis store: its connection (the shape every
// sluice file shares) and the store's own options.
type Redis struct {
	redisconfig.Connection `yaml:",inline"`
	Prefix                 string   `yaml:"prefix"`
	KeyHMACFile            string   `yaml:"key_hmac_file"`
	KeyHMACEnv             string   `yaml:"key_hmac_env"`
	Timeout                Duration `yaml:"timeout"`
	Instances              int      `yaml:"instances"`
	DenyCache              int      `yaml:"deny_cache"`
}

// KeyHMAC is where the key HMAC secret is kept.
func (r Redis) KeyHMAC() secret.Source { return secret.Source{File: r.KeyHMACFile, Env: r.KeyHMACEnv} }

// Headers selects the rate-limit fields of responses.
type Headers struct {
	Version string `yaml:"version"`
	Legacy  bool   `yaml:"legacy"`
}

// ClientIP says how the client of a request is found.
type ClientIP struct {
	TrustedProxies []string `yaml:"trusted_proxies"`
	Header         string   `yaml:"header"`
	IPv4Prefix     int      `yaml:"ipv4_prefix"`
	IPv6Prefix     int      `yaml:"ipv6_prefix"`
}

// Request says how the gateway normalises a request before its rules see
// it, so that the upstream receives the path the rules matched and no
// header spelling the rules did not see. Every field's zero value means
// its default.
type Request struct {
	// EscapedSlashes is what an encoded "/" or "\" (%2F, %5C) or a literal
	// "\" in the path does: reject (the default) answers 400, since an
	// upstream may read it as a separator or as data; unescape makes it a
	// separator, and the upstream receives "/" there.
	EscapedSlashes string `yaml:"escaped_slashes"`
	// PathParameters is what a ";" in a path segment does: keep (the
	// default) leaves it as data, as net/http and most frameworks read it;
	// strip removes each segment's ";..." before the rules match, as Java
	// servlet containers do ("/api;x/y" is "/api/y"); reject answers 400.
	PathParameters string `yaml:"path_parameters"`
	// HeadersWithUnderscores is what a request header whose name holds
	// "_", or any other byte outside A-Za-z0-9- ("X.Tenant", "X~Tenant"),
	// does: allow (the default), drop (removed before the rules and the
	// upstream see the request) or reject (400). It covers every such
	// byte, not only "_", because lighttpd's CGI, FastCGI and SCGI read
	// each of them as a dash (HTTP_X_TENANT), as WSGI and nginx's FastCGI
	// read "_"; drop is what nginx does by default (ignore_invalid_headers,
	// underscores_in_headers off). Whatever it says, another spelling of a
	// key header or of a forwarding header (X_User or X.User for X-User,
	// X_Forwarded_For for X-Forwarded-For: the same HTTP_X_USER to those
	// upstreams) is always dropped.
	HeadersWithUnderscores string `yaml:"headers_with_underscores"`
}

// Fence turns on the checking of lease fencing tokens (package lease,
// httplimit.Fence): a request carrying Sluice-Lease-Epoch whose epoch is
// below the highest this gateway has seen for its partition comes from a
// holder whose lease was taken over, and is refused with 409 before any
// rule spends and before the upstream is called. Absent (nil): the field
// is not read, and is forwarded as any other.
type Fence struct {
	// Groups are the lease groups fenced (names as lease.Group.Name); a
	// token of another group is refused (403). Empty: any group, up to
	// MaxGroups.
	Groups []string `yaml:"groups"`
	// MaxGroups bounds the groups remembered when Groups is empty; once
	// reached, a token of a new group is refused (403) rather than another
	// group forgotten (which would let its stale epochs through). 0:
	// lease.DefaultMaxFenceGroups (1024). Not with Groups.
	MaxGroups int `yaml:"max_groups"`
	// Required refuses a request without the field (428).
	Required bool `yaml:"required"`
}

// FenceOptions is the table's options (for a File with a fence: section).
func (f Fence) FenceOptions() lease.FenceOptions {
	return lease.FenceOptions{Groups: f.Groups, MaxGroups: f.MaxGroups}
}

// validateFence checks the fence section, with the line of what is wrong.
func (f *File) validateFence() error {
	if f.Fence == nil {
		if _, found := f.node([]any{"fence"}); found { // fence: with nothing under it
			return f.errAt([]any{"fence"}, "fence: present but empty — write fence: {} to check the tokens of any lease group, or leave fence out")
		}
		return nil
	}
	fc := f.Fence
	if fc.MaxGroups < 0 {
		return f.errAt([]any{"fence", "max_groups"}, "fence max_groups %d: must be positive (0 or absent: %d)", fc.MaxGroups, lease.DefaultMaxFenceGroups)
	}
	if fc.MaxGroups != 0 && len(fc.Groups) > 0 {
		return f.errAt([]any{"fence", "max_groups"}, "fence: max_groups with groups: the list is the bound; give one or the other")
	}
	for i, g := range fc.Groups {
		if j := slices.Index(fc.Groups[:i], g); j >= 0 {
			return f.errAt([]any{"fence", "groups", i}, "fence: group %q is listed twice (first as groups[%d])", g, j)
		}
		if _, err := lease.NewFences(lease.FenceOptions{Groups: []string{g}}); err != nil {
			why := strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": fence ")
			return f.errAt([]any{"fence", "groups", i}, "fence: %s", verbatim(why))
		}
	}
	return nil
}

// Values of the Request fields.
const (
	Reject   = "reject"
	Unescape = "unescape"
	Keep     = "keep"
	Strip    = "strip"
	Allow    = "allow"
	Drop     = "drop"
)

func (r *Request) defaults() {
	if r.EscapedSlashes == "" {
		r.EscapedSlashes = Reject
	}
	if r.PathParameters == "" {
		r.PathParameters = Keep
	}
	if r.HeadersWithUnderscores == "" {
		r.HeadersWithUnderscores = Allow
	}
}

// validateRequest checks the request section, and that no key header has
// a name the underscore action would remove from every request.
func (f *File) validateRequest() error {
	r := f.Request
	if v := r.EscapedSlashes; v != Reject && v != Unescape {
		return f.errAt([]any{"request", "escaped_slashes"}, "request escaped_slashes %q: reject or unescape (keeping an encoded slash would let the rules and the upstream split the path differently)", v)
	}
	if v := r.PathParameters; v != Keep && v != Strip && v != Reject {
		return f.errAt([]any{"request", "path_parameters"}, "request path_parameters %q: keep, strip or reject", v)
	}
	if v := r.HeadersWithUnderscores; v != Allow && v != Drop && v != Reject {
		return f.errAt([]any{"request", "headers_with_underscores"}, "request headers_with_underscores %q: allow, drop or reject", v)
	}
	if r.HeadersWithUnderscores == Allow {
		return nil
	}
	does := "would remove it from every request"
	if r.HeadersWithUnderscores == Reject {
		does = "would refuse every request that has it"
	}
	for i, rule := range f.Rules {
		for j, q := range rule.Quotas {
			if strings.ContainsFunc(q.Header, func(c rune) bool {
				return c != '-' && !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9')
			}) {
				return f.errAt([]any{"rules", i, "quotas", j, "header"}, "rule %q: header %q has a byte outside A-Za-z0-9- (an underscore or other punctuation), and request headers_with_underscores: %s %s", rule.Name, q.Header, r.HeadersWithUnderscores, does)
			}
		}
	}
	return nil
}

// Limit is a named limit.
type Limit struct {
	Name           string   `yaml:"name"`
	Algorithm      string   `yaml:"algorithm"`
	Quota          float64  `yaml:"quota"`
	Window         Duration `yaml:"window"`
	Burst          float64  `yaml:"burst"`
	DelayThreshold float64  `yaml:"delay_threshold"`
	// OnFailure is what the Redis store decides for this limit when Redis
	// cannot answer: fail_open (the default), fail_closed or fail_local.
	OnFailure sluice.FailurePolicy `yaml:"on_failure"`
}

// Rule applies limits to the requests it matches.
type Rule struct {
	Name   string `yaml:"name"`
	Match  Match  `yaml:"match"`
	Mode   string `yaml:"mode"`
	Shadow bool   `yaml:"shadow"`
	// OnError is what the rule does when its limiter fails with an error:
	// fail_open (the default) lets the request through, fail_closed
	// answers 503. fail_local is refused: a rule has no local fallback.
	OnError sluice.FailurePolicy `yaml:"on_error"`
	Quotas  []Quota              `yaml:"quotas"`
}

// Match selects requests.
type Match struct {
	Methods []string `yaml:"methods"`
	Path    string   `yaml:"path"`
}

// Quota is one limit a rule's requests spend on.
type Quota struct {
	Limit        string  `yaml:"limit"`
	Key          string  `yaml:"key"`
	Header       string  `yaml:"header"`
	Cost         float64 `yaml:"cost"`
	ChargeHeader string  `yaml:"charge_header"`
}

// Duration is a time.Duration written as Go writes one ("50ms", "1m30s",
// "2h"): configfile.Duration, shared by sluice's YAML files.
type Duration = configfile.Duration

// Defaults.
const (
	DefaultListen      = "127.0.0.1:8080"
	DefaultAdminListen = "127.0.0.1:9090"
	DefaultMaxKeys     = 1_000_000
)

func (f *File) defaults() {
	if f.Listen == "" {
		f.Listen = DefaultListen
	}
	if f.Admin.Listen == "" {
		f.Admin.Listen = DefaultAdminListen
	}
	if f.Store.Kind == "" {
		f.Store.Kind = "memory"
	}
	if f.Store.Memory.MaxKeys == nil {
		n := DefaultMaxKeys
		f.Store.Memory.MaxKeys = &n
	}
	if f.Store.Kind == "redis" && len(f.Store.Redis.Addrs) == 0 && f.Store.Redis.Sentinel == nil {
		f.Store.Redis.Addrs = []string{redisconfig.DefaultAddr}
	}
	if f.Headers.Version == "" {
		f.Headers.Version = "draft-11"
	}
	if f.ClientIP.Header == "" {
		f.ClientIP.Header = "x-forwarded-for"
	}
	// A header's name has no case: X-Forwarded-For is x-forwarded-for.
	f.ClientIP.Header = strings.ToLower(f.ClientIP.Header)
	f.Request.defaults()
	f.Server.defaults()
}

func (f *File) validate() error {
	if err := configfile.CheckAddr(f.Listen); err != nil {
		return f.errAt([]any{"listen"}, "listen %q: %v", f.Listen, err)
	}
	if err := configfile.CheckAddr(f.Admin.Listen); err != nil {
		return f.errAt([]any{"admin", "listen"}, "admin listen %q: %v", f.Admin.Listen, err)
	}
	if _, port, _ := net.SplitHostPort(f.Listen); f.Admin.Listen == f.Listen && port != "0" {
		return f.errAt([]any{"admin", "listen"}, "admin listen %q: the gateway's own listen address; give the admin another port", f.Admin.Listen)
	}
	for _, l := range []struct {
		at   string
		path []any
		tls  tlsconfig.Server
	}{{"tls", []any{"tls"}, f.TLS}, {"admin.tls", []any{"admin", "tls"}, f.Admin.TLS}} {
		// A section written but empty (tls: {}, or a template's empty
		// values) would be clear text without a word: refused.
		if n, found := f.node(l.path); found && !isImplicitNull(n) && n.ShortTag() != "!!null" && !l.tls.Enabled() {
			return f.errAt(l.path, "%s: present but empty — give cert_file and key_file for TLS, or leave %s out for clear text", strings.ReplaceAll(l.at, ".", " "), l.at)
		}
		if err := l.tls.Validate(); err != nil {
			return f.ErrorAt(l.at+"."+tlsconfig.FieldOf(err), fmt.Errorf("%s %w", strings.ReplaceAll(l.at, ".", " "), err))
		}
	}
	if f.Admin.TokenFile != "" && f.Admin.TokenEnv != "" {
		return f.errAt([]any{"admin", "token_env"}, "admin: give the token in a file (token_file) or a variable (token_env), not both")
	}
	if f.Upstream != "" {
		if err := CheckUpstream(f.Upstream); err != nil {
			return f.errAt([]any{"upstream"}, "%v", err)
		}
	}
	switch f.Store.Kind {
	case "memory":
		if *f.Store.Memory.MaxKeys < 1 {
			return f.errAt([]any{"store", "memory", "max_keys"}, "max_keys %d: at least 1 (the store is always bounded)", *f.Store.Memory.MaxKeys)
		}
	case "redis":
		r := f.Store.Redis
		if err := r.Connection.Validate(); err != nil {
			return f.RedisError(err)
		}
		if r.KeyHMACFile != "" && r.KeyHMACEnv != "" {
			return f.errAt([]any{"store", "redis", "key_hmac_env"}, "redis: give the key HMAC secret in a file (key_hmac_file) or a variable (key_hmac_env), not both")
		}
		if r.Timeout < 0 || r.Instances < 0 || r.DenyCache < 0 {
			return f.errAt([]any{"store", "redis"}, "timeout, instances and deny_cache must not be negative")
		}
		if len(r.Prefix) > 64 || strings.ContainsAny(r.Prefix, "{}") {
			return f.errAt([]any{"store", "redis", "prefix"}, "redis prefix %q: at most 64 bytes, without { or } (the store writes the keys' Cluster hash tags itself)", r.Prefix)
		}
	default:
		return f.errAt([]any{"store", "kind"}, "store kind %q: memory or redis", f.Store.Kind)
	}
	if v := f.Headers.Version; v != "draft-11" && v != "draft-06" {
		return f.errAt([]any{"headers", "version"}, "headers version %q: draft-11 or draft-06", v)
	}
	if h := f.ClientIP.Header; h != "x-forwarded-for" && h != "forwarded" {
		return f.errAt([]any{"client_ip", "header"}, "client_ip header %q: x-forwarded-for or forwarded", h)
	}
	for i, c := range f.ClientIP.TrustedProxies {
		if err := checkProxy(c); err != nil {
			return f.errAt([]any{"client_ip", "trusted_proxies", i}, "trusted proxy %q: %v", c, err)
		}
	}
	if p := f.ClientIP.IPv4Prefix; p < 0 || p > 32 {
		return f.errAt([]any{"client_ip", "ipv4_prefix"}, "ipv4_prefix %d: 1 to 32 (0: 32)", p)
	}
	if p := f.ClientIP.IPv6Prefix; p < 0 || p > 128 {
		return f.errAt([]any{"client_ip", "ipv6_prefix"}, "ipv6_prefix %d: 1 to 128 (0: 64)", p)
	}
	if err := f.validateRequest(); err != nil {
		return err
	}
	if err := f.validateFence(); err != nil {
		return err
	}
	if err := f.validateServer(); err != nil {
		return err
	}
	limits := map[string]sluice.Limit{}
	for i, l := range f.Limits {
		sl, err := l.Sluice()
		if err != nil {
			return f.limitError(i, l, err)
		}
		if _, dup := limits[l.Name]; dup {
			return f.errAt([]any{"limits", i, "name"}, "limit %q is defined twice", l.Name)
		}
		limits[l.Name] = sl
	}
	if len(f.Rules) == 0 {
		return f.errAt(nil, "no rules: a configuration needs at least one rule (and the limits it uses)")
	}
	rules := map[string]bool{}
	for i, r := range f.Rules {
		at := func(p ...any) []any { return append([]any{"rules", i}, p...) }
		if r.Name == "" {
			return f.errAt(at(), "rule %d has no name", i)
		}
		if rules[r.Name] {
			return f.errAt(at("name"), "rule %q is defined twice", r.Name)
		}
		rules[r.Name] = true
		if r.Mode != "" && r.Mode != "all_or_nothing" && r.Mode != "rejections_count" {
			return f.errAt(at("mode"), "rule %q: mode %q: all_or_nothing or rejections_count", r.Name, r.Mode)
		}
		if r.OnError == sluice.FailLocal {
			return f.errAt(at("on_error"), "rule %q: on_error %v: %s (a rule has no local fallback; fail_local is a limit's on_failure, for the Redis store)", r.Name, r.OnError, onErrorValues)
		}
		if len(r.Quotas) == 0 {
			return f.errAt(at(), "rule %q has no quotas: it must spend on at least one limit", r.Name)
		}
		for j, q := range r.Quotas {
			qat := func(p ...any) []any { return at(append([]any{"quotas", j}, p...)...) }
			l, ok := limits[q.Limit]
			if !ok {
				return f.errAt(qat("limit"), "rule %q: limit %q is not defined under limits", r.Name, q.Limit)
			}
			switch q.Key {
			case "ip", "global":
				if q.Header != "" {
					return f.errAt(qat("header"), "rule %q: a %s key takes no header", r.Name, q.Key)
				}
			case "header", "principal":
				if q.Header == "" {
					return f.errAt(qat("key"), "rule %q: a %s key needs header: the request header that carries it", r.Name, q.Key)
				}
			default:
				return f.errAt(qat("key"), "rule %q: key %q: ip, global, header or principal", r.Name, q.Key)
			}
			if q.Cost < 0 {
				return f.errAt(qat("cost"), "rule %q: cost %v: must be positive (0 means 1)", r.Name, q.Cost)
			}
			if q.ChargeHeader != "" && l.Algorithm != sluice.TokenBucket && l.Algorithm != sluice.GCRA &&
				l.Algorithm != sluice.FixedWindow && l.Algorithm != sluice.SlidingWindow {
				return f.errAt(qat("charge_header"), "rule %q: limit %q is a %v: only token_bucket, gcra, fixed_window and sliding_window can be charged after the response", r.Name, q.Limit, l.Algorithm)
			}
		}
		// What the middleware checks besides (path pattern, methods, costs
		// against the limits, header names, names): refused here, with the
		// rule's line, rather than when the gateway starts.
		if err := f.httpRule(r).Validate(); err != nil {
			return f.errAt(at(), "%v", err)
		}
	}
	return f.validateLeases(limits)
}

// validateLeases checks store.leases: with the Redis store, each limit
// named once and defined under limits, one the leases can hold; no rule
// charges a leased limit after the response or spends more on it than one
// partition holds.
func (f *File) validateLeases(limits map[string]sluice.Limit) error {
	l := f.Store.Leases
	if l == nil {
		if _, found := f.node([]any{"store", "leases"}); found { // leases: with nothing under it
			return f.errAt([]any{"store", "leases"}, "store leases: present but empty — list the limits to decide on leases under limits:, or leave leases out")
		}
		return nil
	}
	if f.Store.Kind != "redis" {
		return f.errAt([]any{"store", "leases"}, "leases need store kind redis: the leases are held in that Redis (this store is %s)", f.Store.Kind)
	}
	if err := l.Validate(); err != nil {
		return f.sectionError("store.leases", "leases", err)
	}
	maxCost := map[string]float64{}
	for i, x := range l.Leased(func(string) sluice.FailurePolicy { return sluice.FailOpen }) {
		limit, ok := limits[x.Name]
		if !ok {
			return f.errAt([]any{"store", "leases", "limits", i, "name"}, "leases: limit %q is not defined under limits", x.Name)
		}
		c, err := x.MaxCost(limit)
		if err != nil {
			return f.errAt([]any{"store", "leases", "limits", i}, "leases: limit %q: %v", x.Name, err)
		}
		maxCost[x.Name] = c
	}
	for i, r := range f.Rules {
		for j, q := range r.Quotas {
			most, leased := maxCost[q.Limit]
			cost := q.Cost
			if cost == 0 {
				cost = 1
			}
			qat := []any{"rules", i, "quotas", j}
			switch {
			case !leased:
			case q.ChargeHeader != "":
				return f.errAt(append(qat, "charge_header"), "rule %q: limit %q is decided on leases (store.leases), which cannot charge after the response", r.Name, q.Limit)
			case cost > most:
				return f.errAt(append(qat, "cost"), "rule %q: cost %v on limit %q, decided on leases: above one partition's burst %v (burst × (1 − outage_share) ÷ partitions), so it would never fit", r.Name, cost, q.Limit, most)
			}
		}
	}
	return nil
}

// RedisError is an error of the Redis connection's settings
// (redisconfig), at the line of its field under store.redis; other errors
// at store.redis's line.
func (f *File) RedisError(err error) error { return f.sectionError("store.redis", "redis", err) }

// sectionError is err, an error of a section several files share (a
// *configfile.FieldError: redisconfig's, leaseconfig's), at the line of
// its field under the section at ("store.redis"), its reason led by what
// ("redis"); other errors at the section's line.
func (f *File) sectionError(at, what string, err error) error {
	var fe *configfile.FieldError
	if errors.As(err, &fe) {
		return f.ErrorAt(at+"."+strings.Join(fe.Path, "."), fmt.Errorf("%s %w", what, fe))
	}
	return f.ErrorAt(at, err)
}

// HTTPRules are the rules as httplimit rules, for a validated File. A
// principal key is the value of a request header that an authenticating
// proxy in front sets (the gateway believes it only from trusted proxies);
// a charge_header charges the number the upstream wrote in that response
// header.
func (f *File) HTTPRules() []httplimit.Rule {
	rules := make([]httplimit.Rule, len(f.Rules))
	for i, r := range f.Rules {
		rules[i] = f.httpRule(r)
	}
	return rules
}

func (f *File) httpRule(r Rule) httplimit.Rule {
	rule := httplimit.Rule{Name: r.Name, Match: httplimit.Match{Methods: r.Match.Methods, Path: r.Match.Path}, Shadow: r.Shadow, OnError: r.OnError}
	if r.Mode == "rejections_count" {
		rule.Mode = sluice.RejectionsCount
	}
	for _, q := range r.Quotas {
		quota := httplimit.Quota{Limit: f.Limit(q.Limit), Cost: q.Cost}
		switch q.Key {
		case "ip":
			quota.Key.Kind = httplimit.IP
		case "global":
			quota.Key.Kind = httplimit.Global
		default: // header, principal: a header set by the client, or by an authenticating proxy
			quota.Key = httplimit.Key{Kind: httplimit.Header, Header: q.Header}
		}
		if h := q.ChargeHeader; h != "" {
			quota.Charge = chargeFromHeader(h)
		}
		rule.Quotas = append(rule.Quotas, quota)
	}
	return rule
}

// PrincipalHeaders are the headers of principal keys: the gateway drops
// them from requests that do not come through a trusted proxy.
func (f *File) PrincipalHeaders() []string {
	var hs []string
	for _, r := range f.Rules {
		for _, q := range r.Quotas {
			if q.Key == "principal" && !slices.Contains(hs, q.Header) {
				hs = append(hs, q.Header)
			}
		}
	}
	return hs
}

// maxCharge bounds a charge read from a response header.
const maxCharge = 4e9

// chargeFromHeader charges the number the upstream wrote in a response
// header (the tokens an answer used); an absent or invalid value charges
// nothing.
func chargeFromHeader(name string) func(*http.Request, int, http.Header) float64 {
	return func(_ *http.Request, _ int, h http.Header) float64 {
		v, err := strconv.ParseFloat(strings.TrimSpace(h.Get(name)), 64)
		if err != nil || !(v > 0) || v > maxCharge {
			return 0
		}
		return v
	}
}

// limitFields are the YAML keys of the fields a sluice.LimitError names.
var limitFields = map[string]string{"algorithm": "algorithm", "quota": "quota", "window": "window", "burst": "burst", "delay threshold": "delay_threshold"}

// limitError is err, limit i's validation error, at the line of the field
// it is about and with the value as the file writes it ("window 100000h",
// not Go's "100000h0m0s"); or at the limit's line.
func (f *File) limitError(i int, l Limit, err error) error {
	var le *sluice.LimitError
	if errors.As(err, &le) {
		if key, ok := limitFields[le.Field]; ok {
			path := []any{"limits", i, key}
			value := fmt.Sprint(le.Value)
			if n, found := f.node(path); found && n.Kind == yaml.ScalarNode {
				value = n.Value
			}
			if key == "algorithm" {
				value = strconv.Quote(value)
			}
			return f.errAt(path, "limit %q: %s %s: %s", l.Name, key, value, verbatim(le.Rule))
		}
	}
	return f.errAt([]any{"limits", i}, "limit %q: %s", l.Name, strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
}

// verbatim is an argument of errAt that is sluice's own text, not the
// file's: it is not shortened.
type verbatim string

// Sluice is the limit as a sluice.Limit, validated.
func (l Limit) Sluice() (sluice.Limit, error) {
	alg := sluice.TokenBucket
	if l.Algorithm != "" {
		if err := alg.UnmarshalText([]byte(l.Algorithm)); err != nil {
			return sluice.Limit{}, &sluice.LimitError{Limit: l.Name, Field: "algorithm", Value: l.Algorithm, Rule: algorithms()}
		}
	}
	sl := sluice.Limit{Name: l.Name, Algorithm: alg, Quota: l.Quota, Window: time.Duration(l.Window), Burst: l.Burst, DelayThreshold: l.DelayThreshold}
	return sl, sl.Validate()
}

// algorithms lists the algorithms' names, in words.
func algorithms() string {
	var names []string
	for a := sluice.Algorithm(0); ; a++ {
		b, err := a.MarshalText()
		if err != nil {
			break
		}
		names = append(names, string(b))
	}
	return oneOf(names)
}

// oneOf writes names as "a, b or c".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// The values a FailurePolicy field takes, in words.
const (
	onFailureValues = "fail_open, fail_closed or fail_local"
	onErrorValues   = "fail_open or fail_closed"
)

// CheckUpstream checks a gateway's upstream URL: http or https, a host, no
// user information. A host:port without a scheme (localhost:3000,
// 127.0.0.1:3000) is refused with the URL it probably means.
func CheckUpstream(u string) error {
	if hasUserInfo(u) { // a password, most likely: never repeated
		return errors.New("upstream: a URL with user information (not repeated here: it may hold a password); give the upstream's address alone")
	}
	if _, port, err := net.SplitHostPort(u); err == nil && port != "" && !strings.Contains(u, "/") {
		return fmt.Errorf("upstream %q: an http:// or https:// URL with a host (did you mean http://%s?)", short(u), short(u))
	}
	p, err := url.Parse(u)
	if uerr := (*url.Error)(nil); errors.As(err, &uerr) {
		return fmt.Errorf("upstream %q: %v", short(u), uerr.Err)
	}
	if err != nil || p.Scheme != "http" && p.Scheme != "https" || p.Host == "" {
		return fmt.Errorf("upstream %q: an http:// or https:// URL with a host", short(u))
	}
	return nil
}

// hasUserInfo reports whether u's authority (after "scheme://", up to the
// path, query or fragment) holds an "@".
func hasUserInfo(u string) bool {
	if _, rest, ok := strings.Cut(u, "://"); ok {
		u = rest
	}
	if i := strings.IndexAny(u, "/?#"); i >= 0 {
		u = u[:i]
	}
	return strings.Contains(u, "@")
}

// checkProxy checks a trusted proxy entry as the gateway's start reads it
// (clientip.ParseTrusted and clientip.New): an address or a prefix,
// without a zone or bits beyond the prefix's length, and not every peer.
func checkProxy(s string) error {
	const want = `an address ("192.0.2.1") or a prefix ("10.0.0.0/8")`
	if strings.Contains(s, "%") {
		return errors.New(want + ", without a zone (%eth0)")
	}
	if !strings.Contains(s, "/") {
		if _, err := netip.ParseAddr(strings.TrimSpace(s)); err != nil {
			return errors.New(want)
		}
		return nil
	}
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return errors.New(want)
	}
	if m := p.Masked(); m != p {
		return fmt.Errorf("bits set beyond the prefix length: did you mean %s or %s?", m, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
	}
	if p.Bits() == 0 || p.Addr().Is4In6() && p.Bits() <= 96 {
		return errors.New("trusts every peer, so any client could choose its own address; list the proxies' networks")
	}
	// What clientip refuses besides, in its words: the gateway starts
	// with it.
	ps, err := clientip.ParseTrusted([]string{s})
	if err == nil {
		_, err = clientip.New(clientip.Options{TrustedProxies: ps})
	}
	return err
}

// Limit returns the named limit as a sluice.Limit (the file is valid: the
// name was checked).
func (f *File) Limit(name string) sluice.Limit {
	for _, l := range f.Limits {
		if l.Name == name {
			sl, _ := l.Sluice()
			return sl
		}
	}
	return sluice.Limit{}
}
