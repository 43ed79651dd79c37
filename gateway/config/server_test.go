package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway/config"
)

const minimal = "limits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"

// The server section: absent, every bound has its documented default; a
// value given is kept; read_header_timeout follows a shorter read_timeout.
func TestServerDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       config.Server
	}{
		{"absent", "", config.Server{
			ReadHeaderTimeout: config.Duration(10 * time.Second), ReadTimeout: config.Duration(time.Minute),
			WriteTimeout: config.Duration(time.Minute), IdleTimeout: config.Duration(75 * time.Second),
			MaxBodyBytes: 1 << 20, MaxConnections: 10000}},
		{"given", "server: {read_header_timeout: 2s, read_timeout: 30s, write_timeout: 5m, idle_timeout: 10s, max_body_bytes: 100, max_connections: 7}\n", config.Server{
			ReadHeaderTimeout: config.Duration(2 * time.Second), ReadTimeout: config.Duration(30 * time.Second),
			WriteTimeout: config.Duration(5 * time.Minute), IdleTimeout: config.Duration(10 * time.Second),
			MaxBodyBytes: 100, MaxConnections: 7}},
		{"short read_timeout", "server: {read_timeout: 3s}\n", config.Server{
			ReadHeaderTimeout: config.Duration(3 * time.Second), ReadTimeout: config.Duration(3 * time.Second),
			WriteTimeout: config.Duration(time.Minute), IdleTimeout: config.Duration(75 * time.Second),
			MaxBodyBytes: 1 << 20, MaxConnections: 10000}},
	} {
		f, err := config.Parse("t.yaml", []byte(tc.yaml+minimal))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if f.Server != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, f.Server, tc.want)
		}
	}
}

// What the server section cannot be is refused with its line and why.
func TestServerRefuses(t *testing.T) {
	for yaml, want := range map[string]string{
		"server: {read_timeout: -1s}\n":                             "t.yaml:1: server read_timeout -1s: must be positive",
		"server: {idle_timeout: -5s}\n":                             "t.yaml:1: server idle_timeout -5s: must be positive",
		"server:\n  read_header_timeout: 20s\n  read_timeout: 5s\n": "t.yaml:2: server read_header_timeout 20s is longer than read_timeout 5s",
		"server: {max_body_bytes: -1}\n":                            "t.yaml:1: server max_body_bytes -1: must be positive",
		"server: {max_connections: -3}\n":                           "t.yaml:1: server max_connections -3: must be positive",
		"server: {write_timeout: soon}\n":                           `t.yaml:1: write_timeout "soon": not a duration; write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h)`,
		"server: {max_conns: 3}\n":                                  `t.yaml:1: unknown field "max_conns" (did you mean "max_connections"?)`,
	} {
		_, err := config.Parse("t.yaml", []byte(yaml+minimal))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", yaml, err, want)
		}
	}
}
