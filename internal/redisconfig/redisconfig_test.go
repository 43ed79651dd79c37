package redisconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/certtest"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/tlsconfig"
)

const password = "the-redis-password-b7e"

// What Validate refuses, with the field's path and a reason that does
// not repeat what may be a password.
func TestValidate(t *testing.T) {
	t.Parallel()
	sentinel := &redisconfig.Sentinel{Master: "m", Addrs: []string{"127.0.0.1:26379"}}
	for _, c := range []struct {
		name  string
		conn  redisconfig.Connection
		field string
		says  string
	}{
		{"an address without a port", redisconfig.Connection{Addrs: []string{"redis"}}, "addrs[0]", `"redis": host:port`},
		{"a URL", redisconfig.Connection{Addrs: []string{"127.0.0.1:6379", "rediss://redis:6380"}}, "addrs[1]", "a URL (not repeated here: it may hold a password); give host:port"},
		{"a URL with a password", redisconfig.Connection{Addrs: []string{"redis://u:" + password + "@redis:6379"}}, "addrs[0]", "a URL (not repeated here"},
		{"a URL with a password in its query", redisconfig.Connection{Addrs: []string{"redis://redis:6379/?password=" + password}}, "addrs[0]", "a URL (not repeated here"},
		{"user information", redisconfig.Connection{Addrs: []string{":" + password + "@redis:6379"}}, "addrs[0]", "user information"},
		{"a user without password", redisconfig.Connection{Username: "sluice"}, "username", `"sluice" needs its password`},
		{"two password sources", redisconfig.Connection{PasswordFile: "/x", PasswordEnv: "X"}, "password_env", "give one"},
		{"a negative database", redisconfig.Connection{DB: -1}, "db", "0 or more"},
		{"a database on a Cluster", redisconfig.Connection{Addrs: []string{"a:1", "b:1"}, DB: 1}, "db", "only database 0"},
		{"a negative connect timeout", redisconfig.Connection{ConnectTimeout: configfile.Duration(-time.Second)}, "connect_timeout", "-1s: must be positive"},
		{"addresses and Sentinel", redisconfig.Connection{Addrs: []string{"a:1"}, Sentinel: sentinel}, "sentinel", "are both given"},
		{"Sentinel without master", redisconfig.Connection{Sentinel: &redisconfig.Sentinel{Addrs: []string{"a:1"}}}, "sentinel.master", "is required"},
		{"Sentinel without addresses", redisconfig.Connection{Sentinel: &redisconfig.Sentinel{Master: "m"}}, "sentinel.addrs", "are required"},
		{"a Sentinel URL with a password", redisconfig.Connection{Sentinel: &redisconfig.Sentinel{Master: "m", Addrs: []string{"redis://:" + password + "@s:26379"}}}, "sentinel.addrs[0]", "a URL (not repeated here"},
		{"a Sentinel user without password", redisconfig.Connection{Sentinel: &redisconfig.Sentinel{Master: "m", Addrs: []string{"a:1"}, Username: "s"}}, "sentinel.username", "needs its password"},
		{"TLS: a client key alone", redisconfig.Connection{TLS: &tlsconfig.Client{KeyFile: "/k"}}, "tls.cert_file", "needs its certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.conn.Validate()
			var fe *redisconfig.FieldError
			if !errors.As(err, &fe) || fe.Field() != c.field || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v; want field %s saying %q", err, c.field, c.says)
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("%v: holds the password", err)
			}
		})
	}
	if err := (redisconfig.Connection{}).Validate(); err != nil {
		t.Errorf("the zero Connection: %v", err)
	}
	if err := (redisconfig.Connection{Sentinel: sentinel, Username: "u", PasswordEnv: "P", DB: 2, TLS: &tlsconfig.Client{}}).Validate(); err != nil {
		t.Errorf("Sentinel with a user, a database and TLS: %v", err)
	}
}

// DialOptions reads the passwords and the TLS files; Describe says where
// each password is kept, never what it is.
func TestDialOptionsAndDescribe(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_SENTINEL_PASSWORD", "sentinel-"+password)
	ca := certtest.NewCA(t, "redis CA")
	files := ca.Write(t, dir, ca.Issue(t, certtest.Leaf{}))
	conn := redisconfig.Connection{Username: "sluice", PasswordFile: pw, DB: 2, TLS: &tlsconfig.Client{CAFile: files.CA, ServerName: "redis.internal"},
		Sentinel: &redisconfig.Sentinel{Master: "m", Addrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, PasswordEnv: "SLUICE_TEST_SENTINEL_PASSWORD"}}
	o, err := conn.DialOptions(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if o.Password != password || o.Username != "sluice" || o.DB != 2 || o.Sentinel.MasterName != "m" || o.Sentinel.Password != "sentinel-"+password ||
		o.TLS == nil || o.TLS.RootCAs == nil || o.TLS.ServerName != "redis.internal" || len(o.Addrs) != 0 {
		t.Errorf("DialOptions: %v", o)
	}
	d := conn.Describe(time.Now())
	line := d.String()
	for _, want := range []string{`master "m" of the Sentinels at 10.0.0.1:26379, 10.0.0.2:26379 (their password: environment variable SLUICE_TEST_SENTINEL_PASSWORD)`,
		`user "sluice"`, "password: file " + pw, "database 2", "TLS: CA " + files.CA} {
		if !strings.Contains(line, want) {
			t.Errorf("%s\nwant it to say %q", line, want)
		}
	}
	if strings.Contains(line, password) {
		t.Errorf("%s: holds the password", line)
	}
	if o, err := (redisconfig.Connection{}).DialOptions(time.Now()); err != nil || len(o.Addrs) != 1 || o.Addrs[0] != redisconfig.DefaultAddr || o.TLS != nil {
		t.Errorf("the zero Connection: %v, %v; want %s in clear text", o, err, redisconfig.DefaultAddr)
	}
	missing := conn
	missing.PasswordFile = filepath.Join(dir, "nope")
	_, err = missing.DialOptions(time.Now())
	var fe *redisconfig.FieldError
	if !errors.As(err, &fe) || fe.Field() != "password_file" || !strings.Contains(err.Error(), "Redis password (file "+filepath.Join(dir, "nope")+"): no such file") {
		t.Errorf("a missing password file: %v", err)
	}
	badCA := conn
	badCA.TLS = &tlsconfig.Client{CAFile: pw}
	if _, err := badCA.DialOptions(time.Now()); !errors.As(err, &fe) || fe.Field() != "tls.ca_file" || !strings.Contains(err.Error(), "CA file "+pw+": no certificate in it") {
		t.Errorf("a CA file that holds none: %v", err)
	}
}
