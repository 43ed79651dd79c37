package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gateway/config"
)

// A listen or Redis address is host:port with a port number; an IPv6 host
// is in brackets. A bare "::1" (which the check took for host ":" and port
// "1") is refused with the form to use.
func TestAddresses(t *testing.T) {
	t.Parallel()
	file := func(listen, redis string) string {
		return "listen: " + listen + "\nadmin: {listen: '127.0.0.1:0'}\nstore: {kind: redis, redis: {addrs: ['" + redis + "']}}\nlimits: []\nrules: []\n"
	}
	for _, a := range []string{"127.0.0.1:8080", "[::1]:8080", ":8080", "localhost:0", "x:1", "[fe80::1%eth0]:80"} {
		if _, err := config.Parse("ok.yaml", []byte(file("'"+a+"'", a))); err != nil && !strings.Contains(err.Error(), "no rules") {
			t.Errorf("%q refused: %v", a, err)
		}
	}
	for _, c := range []struct{ addr, want string }{
		{"::1", `listen "::1": an IPv6 address goes in brackets with a port, e.g. [::1]:8080`},
		{"fe80::1:80", `listen "fe80::1:80": an IPv6 address goes in brackets with a port, e.g. [::1]:8080`},
		{"[::1]", `listen "[::1]": host:port, e.g. 127.0.0.1:8080 or [::1]:8080`},
		{"127.0.0.1", `listen "127.0.0.1": host:port, e.g. 127.0.0.1:8080 or [::1]:8080`},
		{"127.0.0.1:", `listen "127.0.0.1:": host:port, e.g. 127.0.0.1:8080 or [::1]:8080`},
		{"127.0.0.1:http", `listen "127.0.0.1:http": the port must be a number from 0 to 65535`},
		{"127.0.0.1:65536", `listen "127.0.0.1:65536": the port must be a number from 0 to 65535`},
	} {
		_, err := config.Parse("bad.yaml", []byte(file("'"+c.addr+"'", "127.0.0.1:6379")))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("listen %q: %v\nwant an error containing %q", c.addr, err, c.want)
		}
		_, err = config.Parse("bad.yaml", []byte(file("'127.0.0.1:0'", c.addr)))
		if want := strings.Replace(c.want, "listen", "redis addrs[0]:", 1); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("redis %q: %v\nwant an error containing %q", c.addr, err, want)
		}
	}
}
