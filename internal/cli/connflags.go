package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/secret"
	"github.com/sluicehq/sluice/internal/tlsconfig"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/server"
)

// This file holds the flags by which sluice serve reaches Redis, serves
// TLS and reads its secrets: the same shapes as the gateway's YAML
// (redisconfig.Connection, tlsconfig.Server, secret.Source), filled from
// flags. sluice check takes them too, to check what serve would.

// Flag groups, in the order help lists them.
const (
	groupListeners = "Listeners"
	groupTLS       = "TLS on the listeners"
	groupRedis     = "Redis (default: none, the in-process memory store)"
	groupSecrets   = "Secrets (each from a file or an environment variable, never the command line)"
	groupLimits    = "Bounds and behaviour"
)

// groupOrder is the order help lists the groups in.
var groupOrder = []string{groupListeners, groupTLS, groupRedis, groupSecrets, groupLimits}

// groupAnnotation is the flag annotation naming its group in help.
const groupAnnotation = "sluice_group"

// inGroup puts the flags named into group, for help.
func inGroup(fs *pflag.FlagSet, group string, names ...string) {
	for _, n := range names {
		_ = fs.SetAnnotation(n, groupAnnotation, []string{group})
	}
}

// secretFlags is a secret's pair of flags: --NAME-file and --NAME-env.
type secretFlags struct {
	name string
	src  secret.Source
}

func (s *secretFlags) register(fs *pflag.FlagSet, name, what string, rule secret.Rule, unset string) {
	s.name = name
	fs.StringVar(&s.src.File, name+"-file", "", fmt.Sprintf("a `FILE` holding %s%s (default: none, %s)", what, ruleText(rule), unset))
	fs.StringVar(&s.src.Env, name+"-env", "", fmt.Sprintf("an environment `VAR`iable holding %s, instead of --%s-file (default: none)", what, name))
	// The flag that would take the secret itself exists only to refuse it
	// with the reason, whatever its value (which is never repeated).
	fs.String(name, "", "refused: "+what+" is never given on the command line")
	_ = fs.MarkHidden(name)
}

func ruleText(r secret.Rule) string {
	switch {
	case r.OneWord:
		return fmt.Sprintf(": one word of at least %d characters (surrounding white space is trimmed)", r.MinLength)
	case r.MinLength > 1:
		return fmt.Sprintf(" of at least %d characters (surrounding white space is trimmed)", r.MinLength)
	}
	return " (surrounding white space is trimmed)"
}

// inline refuses a secret given on the command line.
func (s *secretFlags) inline(fs *pflag.FlagSet) error {
	if fs.Changed(s.name) {
		return usage(secret.Inline("--"+s.name, "--"+s.name+"-file", "--"+s.name+"-env"))
	}
	if s.src.File != "" && s.src.Env != "" {
		return usagef("--%s-file and --%s-env: give one", s.name, s.name)
	}
	return nil
}

// read reads the secret, "" when none is given.
func (s *secretFlags) read(rule secret.Rule) (string, error) {
	v, err := secret.Read(s.src, rule)
	if err != nil {
		return "", fmt.Errorf("--%s-%s: %w", s.name, s.src.Kind(), err)
	}
	return v, nil
}

// connFlags are serve's flags of TLS, Redis and secrets.
type connFlags struct {
	tls           tlsconfig.Server
	clientAuth    []string
	redisAddrs    []string
	redis         redisconfig.Connection
	redisTLS      bool
	redisTLSFiles tlsconfig.Client
	sentinel      redisconfig.Sentinel
	redisPassword secretFlags
	sentinelPass  secretFlags
	redisTimeout  time.Duration
	keyHMAC       secretFlags
	adminToken    secretFlags
}

func (c *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.tls.CertFile, "tls-cert-file", "", "serve every listener (gRPC, HTTP, admin) over TLS with the certificate of this PEM `FILE` (and its intermediates); reloaded when it changes or on SIGHUP (default: none, clear text)")
	fs.StringVar(&c.tls.KeyFile, "tls-key-file", "", "the PEM `FILE` of --tls-cert-file's key, not encrypted (required with --tls-cert-file)")
	fs.StringVar(&c.tls.ClientCAFile, "tls-client-ca-file", "", "require client certificates signed by the CAs of this PEM `FILE` (mTLS) on the listeners of --tls-client-auth (default: none, no client certificate asked)")
	fs.StringSliceVar(&c.clientAuth, "tls-client-auth", nil, "the `LISTENERS` that require a client certificate under --tls-client-ca-file: grpc, http, admin, comma-separated (default: all three; a Kubernetes probe presents none)")
	fs.StringVar(&c.tls.MinVersion, "tls-min-version", "", "the oldest TLS `VERSION` the listeners accept: 1.2 or 1.3 (default 1.2)")
	inGroup(fs, groupTLS, "tls-cert-file", "tls-key-file", "tls-client-ca-file", "tls-client-auth", "tls-min-version")

	fs.StringSliceVar(&c.redisAddrs, "redis", nil, "the Redis server's `HOST:PORT`, or several, comma-separated, for a Redis Cluster (default: none, the in-process memory store)")
	fs.StringVar(&c.redis.Username, "redis-username", "", "the Redis ACL `USER` (Redis 6 and later); needs a password (default: none, the default user)")
	c.redisPassword.register(fs, "redis-password", "Redis's password", secret.RedisPassword, "no AUTH")
	fs.IntVar(&c.redis.DB, "redis-db", 0, "the database `NUMBER` of a single Redis node (default 0)")
	fs.BoolVar(&c.redisTLS, "redis-tls", false, "connect to Redis over TLS, verified with the system's roots unless --redis-tls-ca-file (any --redis-tls-* flag turns TLS on) (default false, clear text)")
	fs.StringVar(&c.redisTLSFiles.CAFile, "redis-tls-ca-file", "", "the PEM `FILE` of the CAs that may sign Redis's certificate (default: the system's roots)")
	fs.StringVar(&c.redisTLSFiles.CertFile, "redis-tls-cert-file", "", "a client certificate's PEM `FILE`, for a Redis with tls-auth-clients yes (default: none)")
	fs.StringVar(&c.redisTLSFiles.KeyFile, "redis-tls-key-file", "", "the PEM `FILE` of --redis-tls-cert-file's key (required with --redis-tls-cert-file)")
	fs.StringVar(&c.redisTLSFiles.ServerName, "redis-tls-server-name", "", "the `NAME` Redis's certificate must hold (default: the host dialled)")
	fs.StringVar(&c.sentinel.Master, "redis-sentinel-master", "", "find the Redis master by this `NAME` through Redis Sentinel (instead of --redis), and follow its failovers (default: none)")
	fs.StringSliceVar(&c.sentinel.Addrs, "redis-sentinel-addrs", nil, "the Sentinels' `HOST:PORT`s, comma-separated, usually on port 26379 (required with --redis-sentinel-master)")
	fs.StringVar(&c.sentinel.Username, "redis-sentinel-username", "", "the Sentinels' own ACL `USER`, when they ask for one (default: none)")
	c.sentinelPass.register(fs, "redis-sentinel-password", "the Sentinels' own password", secret.SentinelPassword, "no AUTH")
	fs.DurationVar((*time.Duration)(&c.redis.ConnectTimeout), "redis-connect-timeout", redisstore.DefaultConnectTimeout, "bound one connection attempt to Redis (dial, TLS, AUTH); positive")
	fs.DurationVar(&c.redisTimeout, "redis-timeout", redisscript.DefaultTimeout, "bound each Redis command; past it the limit's failure policy decides; positive")
	inGroup(fs, groupRedis, "redis", "redis-username", "redis-password-file", "redis-password-env", "redis-db", "redis-tls", "redis-tls-ca-file",
		"redis-tls-cert-file", "redis-tls-key-file", "redis-tls-server-name", "redis-sentinel-master", "redis-sentinel-addrs", "redis-sentinel-username",
		"redis-sentinel-password-file", "redis-sentinel-password-env", "redis-connect-timeout", "redis-timeout")

	c.keyHMAC.register(fs, "key-hmac", "the secret Redis keys are HMAC'd with, so that no API key or IP appears in a Redis key name (needs Redis)", secret.KeyHMAC, "keys as they are")
	c.adminToken.register(fs, "admin-token", "the admin API's bearer token", secret.AdminToken, "the admin API is off and every route answers 403")
	inGroup(fs, groupSecrets, "key-hmac-file", "key-hmac-env", "admin-token-file", "admin-token-env")
}

// redisFlags are the flags that configure the Redis connection: any of
// them needs --redis or --redis-sentinel-master.
var redisFlags = []string{"redis-username", "redis-password-file", "redis-password-env", "redis-db", "redis-tls", "redis-tls-ca-file",
	"redis-tls-cert-file", "redis-tls-key-file", "redis-tls-server-name", "redis-sentinel-addrs", "redis-sentinel-username",
	"redis-sentinel-password-file", "redis-sentinel-password-env", "redis-connect-timeout", "redis-timeout", "key-hmac-file", "key-hmac-env"}

// options checks the flags and reads what they name: it fills opts'
// TLS, Redis and secrets. A flag that breaks a rule is a usage error; a
// file or variable that cannot be read, or holds what is refused, is an
// error naming the flag and the file.
func (c *connFlags) options(fs *pflag.FlagSet, opts *server.Options) error {
	for _, s := range []*secretFlags{&c.redisPassword, &c.sentinelPass, &c.keyHMAC, &c.adminToken} {
		if err := s.inline(fs); err != nil {
			return err
		}
	}
	// A flag given empty (a template's unset variable) would quietly mean
	// clear text, or no secret: refused.
	var empty string
	fs.Visit(func(f *pflag.Flag) {
		if empty == "" && f.Value.Type() == "string" && f.Value.String() == "" && (strings.HasSuffix(f.Name, "-file") || strings.HasSuffix(f.Name, "-env")) {
			empty = f.Name
		}
	})
	if empty != "" {
		return usagef("--%s is given empty: give a file or a variable, or leave the flag out", empty)
	}
	conn, err := c.connection(fs)
	if err != nil {
		return err
	}
	if err := c.tls.Validate(); err != nil {
		return usagef("%s: %v", tlsFlag(err), tlsReason(err))
	}
	for _, l := range c.clientAuth {
		if !server.IsListener(l) {
			return usagef("--tls-client-auth %q: grpc, http or admin", l)
		}
	}
	if fs.Changed("tls-client-auth") && c.tls.ClientCAFile == "" {
		return usagef("--tls-client-auth needs --tls-client-ca-file, the CA of the client certificates")
	}
	if c.redisTimeout <= 0 {
		return usagef("--redis-timeout %v: must be positive (a bound cannot be switched off)", c.redisTimeout)
	}
	opts.TLS, opts.ClientAuth, opts.Redis, opts.RedisTimeout = c.tls, c.clientAuth, conn, c.redisTimeout
	opts.SecretSources = map[string]string{}
	if opts.Redis != nil {
		// Redis's passwords and TLS files are read by the server (New,
		// Check); a refusal is said with its flag by redisFlagError.
		k, err := c.keyHMAC.read(secret.KeyHMAC)
		if err != nil {
			return err
		}
		opts.KeyHMAC = []byte(k)
		if !c.keyHMAC.src.IsZero() {
			opts.SecretSources["key_hmac"] = c.keyHMAC.src.String()
		}
	}
	if opts.AdminToken, err = c.adminToken.read(secret.AdminToken); err != nil {
		return err
	}
	if !c.adminToken.src.IsZero() {
		opts.SecretSources["admin_token"] = c.adminToken.src.String()
	}
	return nil
}

// connection is the Redis connection the flags describe, nil for none.
func (c *connFlags) connection(fs *pflag.FlagSet) (*redisconfig.Connection, error) {
	if len(c.redisAddrs) == 0 && c.sentinel.Master == "" {
		for _, name := range redisFlags {
			if fs.Changed(name) {
				return nil, usagef("--%s configures the Redis connection: give --redis (or --redis-sentinel-master) too", name)
			}
		}
		return nil, nil
	}
	conn := c.redis
	conn.Addrs = c.redisAddrs
	conn.PasswordFile, conn.PasswordEnv = c.redisPassword.src.File, c.redisPassword.src.Env
	// Any Sentinel flag makes a Sentinel, which Validate checks whole: a
	// flag alone is refused, never ignored.
	if c.sentinel.Master != "" || len(c.sentinel.Addrs) > 0 || c.sentinel.Username != "" || !c.sentinelPass.src.IsZero() {
		s := c.sentinel
		s.PasswordFile, s.PasswordEnv = c.sentinelPass.src.File, c.sentinelPass.src.Env
		conn.Sentinel = &s
	}
	if c.redisTLS || c.redisTLSFiles != (tlsconfig.Client{}) {
		files := c.redisTLSFiles
		conn.TLS = &files
	}
	if err := conn.Validate(); err != nil {
		return nil, usage(redisFlagError(err))
	}
	return &conn, nil
}

// redisFlagError says a redisconfig error — the flags' own, or one the
// server met reading the files they name — with the flag of its field;
// any other error as it is.
func redisFlagError(err error) error {
	var fe *redisconfig.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	return fmt.Errorf("%s: %w", redisFlag(fe.Path), fe.Err)
}

// redisFlag is the flag of a redisconfig field: addrs is --redis,
// sentinel.addrs --redis-sentinel-addrs, tls.ca_file --redis-tls-ca-file.
func redisFlag(path []string) string {
	var words []string
	for _, p := range path {
		if p != "" && p[0] >= '0' && p[0] <= '9' {
			continue // an index into a list: the flag is the list's
		}
		words = append(words, strings.ReplaceAll(p, "_", "-"))
	}
	switch strings.Join(words, "-") {
	case "addrs":
		return "--redis"
	case "sentinel":
		return "--redis-sentinel-master"
	}
	return "--redis-" + strings.Join(words, "-")
}

// tlsFlag is the --tls-* flag of a tlsconfig error's field.
func tlsFlag(err error) string {
	return "--tls-" + strings.ReplaceAll(tlsconfig.FieldOf(err), "_", "-")
}

// tlsReason is a tlsconfig error without its field name (the flag says
// it).
func tlsReason(err error) string {
	var e *tlsconfig.Error
	if errors.As(err, &e) && e.File == "" {
		return e.Reason
	}
	return err.Error()
}
