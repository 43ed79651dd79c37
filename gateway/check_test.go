package gateway_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/config"
)

// checkRules completes a file whose first lines a case writes.
const checkRules = "limits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"

// Check refuses what starting the gateway refuses, with the same message:
// sluice check runs config.Load then gateway.Check, sluice gateway
// config.Load then gateway.New, and for each case both fail alike. (Check
// said ok to a short admin token file or a missing key_hmac_file, which
// only New read.)
func TestCheckRefusesWhatNewRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	short := file("short", "tooshort\n")
	spaced := file("spaced", "an admin token with spaces\n")
	missing := filepath.Join(dir, "missing")
	redis := "127.0.0.1:6379" // connected in the background by New, never by Check
	const listeners = "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\n"
	for _, c := range []struct {
		name, yaml, upstream, want string
	}{
		{"short admin token file", "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, token_file: " + short + "}\n", "",
			"t.yaml:2: admin token (file " + short + "): must be one word of at least 16 characters, visible ASCII without white space inside (it travels in an HTTP header)"},
		{"admin token file with spaces", "listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\n  token_file: " + spaced + "\n", "",
			"t.yaml:4: admin token (file " + spaced + "): must be one word of at least 16 characters, visible ASCII without white space inside (it travels in an HTTP header)"},
		{"missing admin token file", "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, token_file: " + missing + "}\n", "",
			"t.yaml:2: admin token (file " + missing + "): no such file"},
		{"missing key_hmac_file", listeners + "store:\n  kind: redis\n  redis:\n    addrs: [" + redis + "]\n    key_hmac_file: " + missing + "\n", "",
			"t.yaml:7: key HMAC secret (file " + missing + "): no such file"},
		{"short key_hmac_file", listeners + "store:\n  kind: redis\n  redis:\n    key_hmac_file: " + short + "\n", "",
			"t.yaml:6: key HMAC secret (file " + short + "): must be at least 16 characters (surrounding white space is not counted)"},
		{"redis prefix the store refuses", listeners + "store:\n  kind: redis\n  redis: {addrs: [" + redis + "], prefix: 'a{b}'}\n", "",
			`t.yaml:5: redis prefix "a{b}": at most 64 bytes, without { or } (the store writes the keys' Cluster hash tags itself)`},
		{"listen port out of range", "listen: 127.0.0.1:99999\nadmin: {listen: 127.0.0.1:0}\n", "",
			`t.yaml:1: listen "127.0.0.1:99999": the port must be a number from 0 to 65535`},
		{"admin listen not host:port", "listen: 127.0.0.1:0\nadmin: {listen: localhost}\n", "",
			`t.yaml:2: admin listen "localhost": host:port, e.g. 127.0.0.1:8080 or [::1]:8080`},
		{"upstream in the file without its scheme", listeners + "upstream: 127.0.0.1:3000\n", "",
			`t.yaml:3: upstream "127.0.0.1:3000": an http:// or https:// URL with a host (did you mean http://127.0.0.1:3000?)`},
		{"--upstream without its scheme", listeners, "localhost:3000",
			`gateway: upstream "localhost:3000": an http:// or https:// URL with a host (did you mean http://localhost:3000?)`},
		{"--upstream not http", listeners, "ftp://x",
			`gateway: upstream "ftp://x": an http:// or https:// URL with a host`},
	} {
		yaml := c.yaml + checkRules
		upstream := c.upstream
		if upstream == "" {
			upstream = "http://127.0.0.1:1" // never called
		}
		checkErr, startErr := checkAndStart(t, yaml, upstream)
		if checkErr == nil || startErr == nil || checkErr.Error() != startErr.Error() {
			t.Errorf("%s:\ncheck: %v\nstart: %v\nwant both %q", c.name, checkErr, startErr, c.want)
			continue
		}
		if checkErr.Error() != c.want {
			t.Errorf("%s: %q, want %q", c.name, checkErr, c.want)
		}
		if line := checkErr.Error(); strings.HasPrefix(line, "t.yaml:") {
			var e *config.Error
			if !errors.As(checkErr, &e) || e.File != "t.yaml" || !strings.HasPrefix(line, fmt.Sprintf("t.yaml:%d: ", e.Line)) {
				t.Errorf("%s: %v: not a *config.Error with its line", c.name, checkErr)
			}
		}
	}
}

// checkAndStart is what sluice check and sluice gateway do with a file:
// load it, then Check, or New (closing what it starts).
func checkAndStart(t *testing.T, yaml, upstream string) (checkErr, startErr error) {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(yaml))
	if err != nil {
		return err, err
	}
	opts := gateway.Options{Config: cfg, Upstream: upstream}
	checkErr = gateway.Check(opts)
	g, startErr := gateway.New(opts)
	if startErr == nil {
		g.Close()
	}
	return checkErr, startErr
}

// A file Check accepts starts; one that leaves the upstream to --upstream
// is checked whole, then reported as ErrNoUpstream, which New refuses.
func TestCheckAccepts(t *testing.T) {
	t.Parallel()
	token := tokenFile(t)
	yaml := "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, token_file: " + token + "}\n" + checkRules
	if checkErr, startErr := checkAndStart(t, yaml, "http://127.0.0.1:1"); checkErr != nil || startErr != nil {
		t.Fatalf("check: %v, start: %v; want both nil", checkErr, startErr)
	}
	// A limit on leases: Check builds the leased store without Redis (New
	// connects in the background), and both release it.
	leased := "store:\n  kind: redis\n  redis: {addrs: [127.0.0.1:6379]}\n  leases:\n    limits: [{name: a, partitions: 1}]\n" + yaml
	if checkErr, startErr := checkAndStart(t, leased, "http://127.0.0.1:1"); checkErr != nil || startErr != nil {
		t.Fatalf("store.leases: check: %v, start: %v; want both nil", checkErr, startErr)
	}
	if checkErr, startErr := checkAndStart(t, "upstream: http://127.0.0.1:1\n"+yaml, ""); checkErr != nil || startErr != nil {
		t.Fatalf("the file's upstream: check %v, start %v; want both nil", checkErr, startErr)
	}
	checkErr, startErr := checkAndStart(t, yaml, "")
	if !errors.Is(checkErr, gateway.ErrNoUpstream) || !errors.Is(startErr, gateway.ErrNoUpstream) {
		t.Fatalf("no upstream: check %v, start %v; want ErrNoUpstream", checkErr, startErr)
	}
	// Without an upstream, the rest is still checked.
	checkErr, _ = checkAndStart(t, strings.Replace(yaml, token, token+".missing", 1), "")
	if checkErr == nil || errors.Is(checkErr, gateway.ErrNoUpstream) || !strings.Contains(checkErr.Error(), "admin token (file "+token+".missing): no such file") {
		t.Fatalf("no upstream, a missing token file: %v, want the token file's error", checkErr)
	}
	if err := gateway.Check(gateway.Options{}); err == nil || !strings.Contains(err.Error(), "Config is required") {
		t.Fatalf("no Config: %v", err)
	}
}

// What only binding can tell, New tells with the field's line: an address
// already in use.
func TestNewAddressInUse(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct{ yaml, field string }{
		{"listen: " + busy.Addr().String() + "\nadmin: {listen: 127.0.0.1:0}\n", "listen"},
		{"listen: 127.0.0.1:0\nadmin:\n  listen: " + busy.Addr().String() + "\n", "admin listen"},
	} {
		cfg, err := config.Parse("t.yaml", []byte(c.yaml+checkRules))
		if err != nil {
			t.Fatal(err)
		}
		opts := gateway.Options{Config: cfg, Upstream: "http://127.0.0.1:1"}
		if err := gateway.Check(opts); err != nil {
			t.Errorf("%s: Check %v: it binds nothing", c.field, err)
		}
		_, err = gateway.New(opts)
		var e *config.Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), "address already in use") {
			t.Errorf("%s in use: %v, want a *config.Error saying so", c.field, err)
			continue
		}
		if want := strings.Count(c.yaml[:strings.Index(c.yaml, busy.Addr().String())], "\n") + 1; e.Line != want {
			t.Errorf("%s in use: line %d, want %d", c.field, e.Line, want)
		}
	}
}
