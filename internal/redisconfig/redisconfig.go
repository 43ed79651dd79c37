// Package redisconfig is how sluice's commands reach Redis, in one shape:
// the fields of a YAML file (the gateway's store.redis; the relay's to
// come) and sluice serve's --redis-* flags fill the same Connection, which
// is checked the same way (Validate, then Dial's options read from the
// secret files and variables and the TLS files) and described the same
// way (Describe: sluice check, the admin API). A password is never a
// field's value: password_file or password_env (package secret).
package redisconfig

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/secret"
	"github.com/sluicehq/sluice/internal/tlsconfig"
	"github.com/sluicehq/sluice/redisstore"
)

// DefaultAddr is the address of a Connection that names none (and no
// Sentinel).
const DefaultAddr = "127.0.0.1:6379"

// Connection is a Redis connection's settings. The zero Connection is
// Redis at DefaultAddr, in clear text, without AUTH.
type Connection struct {
	// Addrs is the Redis address, or several seed addresses of a Cluster.
	// Default [DefaultAddr], unless Sentinel is set (then it must be
	// empty).
	Addrs []string `yaml:"addrs"`
	// Username is the ACL user (Redis 6 and later); it needs a password.
	Username string `yaml:"username"`
	// PasswordFile and PasswordEnv say where Redis's password is kept: a
	// file, or an environment variable (one of them).
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// DB is the database of a single node. Default 0.
	DB int `yaml:"db"`
	// TLS, when present (tls: {} for the system's roots), encrypts every
	// connection, to Redis and to the Sentinels.
	TLS *tlsconfig.Client `yaml:"tls"`
	// Sentinel, when present, finds the master through Redis Sentinel.
	Sentinel *Sentinel `yaml:"sentinel"`
	// ConnectTimeout bounds one connection attempt (dial, TLS, AUTH).
	// Default 1 s.
	ConnectTimeout configfile.Duration `yaml:"connect_timeout"`
}

// Sentinel is a Redis Sentinel setup.
type Sentinel struct {
	// Master is the name the Sentinels monitor the master under.
	Master string `yaml:"master"`
	// Addrs are the Sentinels' addresses.
	Addrs []string `yaml:"addrs"`
	// Username, PasswordFile and PasswordEnv are the Sentinels' own AUTH,
	// when they ask for one.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
}

// FieldError is a setting refused: the path of its field under the
// connection (["tls", "ca_file"], ["sentinel", "addrs", "1"]), and why.
// It is configfile's, which the other shared sections (leaseconfig) use
// too.
type FieldError = configfile.FieldError

func fieldErr(err error, path ...string) *FieldError { return &FieldError{Path: path, Err: err} }

// Validate checks the settings without reading a file or connecting:
// addresses, the Sentinel's fields together, a password for a user, one
// source per password, a database a single node can have, the TLS
// fields. Every refusal is a *FieldError.
func (c Connection) Validate() error {
	for i, a := range c.Addrs {
		if err := checkAddr(a); err != nil {
			return fieldErr(err, "addrs", fmt.Sprint(i))
		}
	}
	if err := checkSecret(c.PasswordFile, c.PasswordEnv, c.Username, nil); err != nil {
		return err
	}
	if c.DB < 0 {
		return fieldErr(fmt.Errorf("%d: a database number is 0 or more", c.DB), "db")
	}
	if c.DB != 0 && len(c.Addrs) > 1 {
		return fieldErr(fmt.Errorf("%d with %d addresses (a Cluster): a Cluster has only database 0", c.DB, len(c.Addrs)), "db")
	}
	if c.ConnectTimeout < 0 {
		return fieldErr(fmt.Errorf("%v: must be positive (0 or absent: 1s)", time.Duration(c.ConnectTimeout)), "connect_timeout")
	}
	if s := c.Sentinel; s != nil {
		if len(c.Addrs) > 0 {
			return fieldErr(errors.New("addresses and a Sentinel are both given: give one (with a Sentinel, the Sentinels name the master)"), "sentinel")
		}
		if s.Master == "" {
			return fieldErr(errors.New("the master's name under the Sentinels (sentinel monitor NAME …) is required"), "sentinel", "master")
		}
		if len(s.Addrs) == 0 {
			return fieldErr(errors.New("the Sentinels' addresses are required (port 26379 by default)"), "sentinel", "addrs")
		}
		for i, a := range s.Addrs {
			if err := checkAddr(a); err != nil {
				return fieldErr(err, "sentinel", "addrs", fmt.Sprint(i))
			}
		}
		if err := checkSecret(s.PasswordFile, s.PasswordEnv, s.Username, []string{"sentinel"}); err != nil {
			return err
		}
	}
	if c.TLS != nil {
		if err := c.TLS.Validate(); err != nil {
			return tlsErr(err)
		}
	}
	return nil
}

// tlsErr is a tlsconfig error as a FieldError under tls: the reason alone
// when it is about the field (the path names it), the file's error as it
// is.
func tlsErr(err error) error {
	var e *tlsconfig.Error
	if errors.As(err, &e) && e.File == "" {
		return fieldErr(errors.New(e.Reason), "tls", e.Field)
	}
	return fieldErr(err, "tls", tlsconfig.FieldOf(err))
}

// checkAddr checks a Redis or Sentinel address: host:port. A URL, or an
// address with user information, is refused without being repeated (a
// password may be in it, as user information or in a query).
func checkAddr(a string) error {
	if strings.Contains(a, "://") {
		return errors.New("a URL (not repeated here: it may hold a password); give host:port, TLS in the tls settings, and the password in its file or variable")
	}
	if strings.Contains(a, "@") {
		return errors.New("an address with user information (not repeated here: it may hold a password); give host:port, and the password in its file or variable")
	}
	if err := configfile.CheckAddr(a); err != nil {
		return fmt.Errorf("%q: %w (Redis listens on 6379 by default)", a, err)
	}
	return nil
}

// checkSecret: one source for a password, and a password for a user.
func checkSecret(file, env, user string, at []string) error {
	path := func(p string) []string { return append(append([]string(nil), at...), p) }
	switch {
	case file != "" && env != "":
		return fieldErr(errors.New("the password is given twice, in a file and in a variable: give one"), path("password_env")...)
	case user != "" && file == "" && env == "":
		return fieldErr(fmt.Errorf("%q needs its password", user), path("username")...)
	}
	return nil
}

// DialOptions validates the settings, reads the passwords and the TLS
// files (checked at now: see tlsconfig) and returns redisstore.Dial's
// options. Every refusal is a *FieldError; none holds a password.
func (c Connection) DialOptions(now time.Time) (redisstore.DialOptions, error) {
	if err := c.Validate(); err != nil {
		return redisstore.DialOptions{}, err
	}
	o := redisstore.DialOptions{Addrs: c.Addrs, Username: c.Username, DB: c.DB, ConnectTimeout: time.Duration(c.ConnectTimeout)}
	if len(o.Addrs) == 0 && c.Sentinel == nil {
		o.Addrs = []string{DefaultAddr}
	}
	var err error
	if o.Password, err = readPassword(c.PasswordFile, c.PasswordEnv, secret.RedisPassword, nil); err != nil {
		return redisstore.DialOptions{}, err
	}
	if s := c.Sentinel; s != nil {
		o.Sentinel = redisstore.Sentinel{MasterName: s.Master, Addrs: s.Addrs, Username: s.Username}
		if o.Sentinel.Password, err = readPassword(s.PasswordFile, s.PasswordEnv, secret.SentinelPassword, []string{"sentinel"}); err != nil {
			return redisstore.DialOptions{}, err
		}
	}
	if c.TLS != nil {
		if o.TLS, err = c.TLS.Config(now); err != nil {
			return redisstore.DialOptions{}, tlsErr(err)
		}
	}
	return o, nil
}

func readPassword(file, env string, rule secret.Rule, at []string) (string, error) {
	src := secret.Source{File: file, Env: env}
	p, err := secret.Read(src, rule)
	if err != nil {
		return "", fieldErr(err, append(append([]string(nil), at...), "password_"+src.Kind())...)
	}
	return p, nil
}

// Description is a Connection as sluice check and the admin API show it:
// where Redis is, who connects, where each password comes from (never the
// password), what the TLS files hold.
type Description struct {
	Addrs          []string           `json:"addrs,omitempty"`
	Sentinel       *SentinelDesc      `json:"sentinel,omitempty"`
	Username       string             `json:"username,omitempty"`
	Password       string             `json:"password"`
	DB             int                `json:"db"`
	TLS            *tlsconfig.Summary `json:"tls,omitempty"`
	ConnectTimeout string             `json:"connect_timeout"`
}

// SentinelDesc describes a Sentinel setup.
type SentinelDesc struct {
	Master   string   `json:"master"`
	Addrs    []string `json:"addrs"`
	Username string   `json:"username,omitempty"`
	Password string   `json:"password"`
}

// Describe describes c (valid, its files read at now: a file that cannot
// be read leaves its TLS summary out).
func (c Connection) Describe(now time.Time) Description {
	d := Description{Addrs: c.Addrs, Username: c.Username, DB: c.DB, Password: secret.Source{File: c.PasswordFile, Env: c.PasswordEnv}.String(),
		ConnectTimeout: time.Duration(c.ConnectTimeout).String()}
	if c.ConnectTimeout == 0 {
		d.ConnectTimeout = redisstore.DefaultConnectTimeout.String()
	}
	if len(d.Addrs) == 0 && c.Sentinel == nil {
		d.Addrs = []string{DefaultAddr}
	}
	if s := c.Sentinel; s != nil {
		d.Sentinel = &SentinelDesc{Master: s.Master, Addrs: s.Addrs, Username: s.Username, Password: secret.Source{File: s.PasswordFile, Env: s.PasswordEnv}.String()}
	}
	if c.TLS != nil {
		sum, _ := c.TLS.Check(now)
		d.TLS = &sum
	}
	return d
}

// String is the description in one line.
func (d Description) String() string {
	var b strings.Builder
	if d.Sentinel != nil {
		fmt.Fprintf(&b, "master %q of the Sentinels at %s (their password: %s)", d.Sentinel.Master, strings.Join(d.Sentinel.Addrs, ", "), d.Sentinel.Password)
	} else {
		b.WriteString(strings.Join(d.Addrs, ", "))
	}
	if d.Username != "" {
		fmt.Fprintf(&b, ", user %q", d.Username)
	}
	fmt.Fprintf(&b, ", password: %s", d.Password)
	if d.DB != 0 {
		fmt.Fprintf(&b, ", database %d", d.DB)
	}
	switch {
	case d.TLS == nil:
		b.WriteString(", clear text")
	case d.TLS.CAFile == "" && d.TLS.CertFile == "":
		b.WriteString(", TLS (the system's roots)")
	case d.TLS.CAFile == "":
		b.WriteString(", TLS (the system's roots), client certificate " + d.TLS.String())
	case d.TLS.CertFile != "":
		b.WriteString(", TLS, client certificate " + d.TLS.String())
	default:
		b.WriteString(", TLS: " + d.TLS.String())
	}
	return b.String()
}
