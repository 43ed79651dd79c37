package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway/config"
)

const good = `
listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
limits:
  - name: per-ip
    quota: 100
    window: 1m
    burst: 20
  - name: tokens
    algorithm: gcra
    quota: 10000
    window: 1h
    on_failure: fail_local
rules:
  - name: api
    match: {methods: [POST], path: /api/}
    quotas:
      - limit: per-ip
        key: ip
      - limit: tokens
        key: header
        header: X-API-Key
        charge_header: X-Tokens-Used
  - name: rest
    shadow: true
    quotas:
      - {limit: per-ip, key: ip, cost: 2}
`

func TestParseGood(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if f.Store.Kind != "memory" || *f.Store.Memory.MaxKeys != config.DefaultMaxKeys || f.Headers.Version != "draft-11" || f.ClientIP.Header != "x-forwarded-for" {
		t.Fatalf("defaults: %+v", f)
	}
	want := sluice.Limit{Name: "tokens", Algorithm: sluice.GCRA, Quota: 10000, Window: time.Hour}
	if got := f.Limit("tokens"); got != want {
		t.Fatalf("limit tokens: %+v, want %+v", got, want)
	}
	if q := f.Rules[0].Quotas[1]; q.Key != "header" || q.Header != "X-API-Key" || q.ChargeHeader != "X-Tokens-Used" {
		t.Fatalf("quota: %+v", q)
	}
}

// Every refusal names the file, the line and the reason.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"unknown field", "limits: []\nrules: []\nlisten: x:1\nlisen: 1\n", `bad.yaml:4: unknown field "lisen" (did you mean "listen"?)`},
		{"unknown nested field", good + "    quotass: []\n", `bad.yaml:29: unknown field "quotass" (did you mean "quotas"?)`},
		{"wrong type", "limits:\n  - name: a\n    quota: lots\n", `bad.yaml:3: limit "a": quota "lots": a number is expected`},
		{"bad duration", "limits:\n  - name: a\n    quota: 1\n    window: 1 minute\n", `bad.yaml:4: limit "a": window "1 minute": not a duration; write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h)`},
		{"impossible limit", "limits:\n  - name: a\n    quota: 0\n    window: 1s\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n", "bad.yaml:3: limit \"a\": quota 0: must be a positive"},
		{"unknown algorithm", "limits:\n  - name: a\n    algorithm: bucket\n    quota: 1\n    window: 1s\n", "bad.yaml:3: limit \"a\": algorithm \"bucket\""},
		{"twice", "limits:\n  - {name: a, quota: 1, window: 1s}\n  - {name: a, quota: 1, window: 1s}\nrules: []\n", "bad.yaml:3: limit \"a\" is defined twice"},
		{"no rules", "limits:\n  - {name: a, quota: 1, window: 1s}\n", "no rules"},
		{"unknown limit", "limits: []\nrules:\n  - name: r\n    quotas:\n      - {limit: nope, key: ip}\n", "bad.yaml:5: rule \"r\": limit \"nope\" is not defined"},
		{"unknown key kind", "limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    quotas:\n      - limit: a\n        key: cookie\n", "bad.yaml:6: rule \"r\": key \"cookie\""},
		{"header without name", "limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    quotas:\n      - limit: a\n        key: header\n", "bad.yaml:6: rule \"r\": a header key needs header"},
		{"charge on a log", "limits: [{name: a, algorithm: sliding_log, quota: 1, window: 1s}]\nrules:\n  - name: r\n    quotas:\n      - limit: a\n        key: ip\n        charge_header: X-Used\n", "bad.yaml:7: rule \"r\": limit \"a\" is a sliding_log"},
		{"bad mode", "limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    mode: sometimes\n    quotas: [{limit: a, key: ip}]\n", "bad.yaml:4: rule \"r\": mode \"sometimes\""},
		{"bad proxy", "client_ip:\n  trusted_proxies: [10.0.0.0/33]\nlimits: []\nrules: []\n", "bad.yaml:2: trusted proxy \"10.0.0.0/33\""},
		{"bad store", "store:\n  kind: etcd\n", "bad.yaml:2: store kind \"etcd\""},
		{"bad upstream", "upstream: ftp://x\n", "bad.yaml:1: upstream \"ftp://x\""},
		{"bad on_failure", "limits:\n  - {name: a, quota: 1, window: 1s, on_failure: maybe}\n", "bad.yaml:2: limit \"a\": on_failure \"maybe\""},
		{"not yaml", "limits: [\n", "bad.yaml:1: not valid YAML: did not find expected node content"},
		// What the middleware would refuse, refused here with the rule's line.
		{"relative path", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: r\n    match: {path: api/}\n    quotas: [{limit: a, key: ip}]\n", `bad.yaml:3: rule "r": path pattern "api/": must start with /`},
		{"bad wildcard", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: r\n    match: {path: \"/{x}{y}\"}\n    quotas: [{limit: a, key: ip}]\n", `bad.yaml:3: rule "r": path pattern "/{x}{y}"`},
		{"lower-case method", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: r\n    match: {methods: [get]}\n    quotas: [{limit: a, key: ip}]\n", `bad.yaml:3: rule "r": method "get"`},
		{"cost above capacity", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: r\n    quotas: [{limit: a, key: ip, cost: 1000}]\n", `bad.yaml:3: rule "r", quota 0 (a): cost 1000 exceeds the limit's capacity 10`},
		{"cost not a number", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: r\n    quotas: [{limit: a, key: ip, cost: .nan}]\n", `bad.yaml:3: rule "r", quota 0 (a): cost NaN`},
		{"cost below resolution", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: r\n    quotas: [{limit: a, key: ip, cost: 0.0000001}]\n", `bad.yaml:3: rule "r", quota 0 (a)`},
		{"limit twice in a rule", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: r\n    quotas: [{limit: a, key: ip}, {limit: a, key: global}]\n", `bad.yaml:3: rule "r": limit "a" is used twice`},
		{"header not a token", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: r\n    quotas: [{limit: a, key: header, header: X Api Key}]\n", `bad.yaml:3: rule "r", quota 0 (a): header "X Api Key": not a header name`},
		{"long rule name", "limits: [{name: a, quota: 10, window: 1s}]\nrules:\n  - name: rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr\n    quotas: [{limit: a, key: ip}]\n", `bad.yaml:3: rule "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr": the name must be 1 to 64 bytes`},
		{"max_keys 0", "store: {memory: {max_keys: 0}}\n", "bad.yaml:1: max_keys 0: at least 1"},
	} {
		_, err := config.Parse("bad.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant an error containing %q", c.name, err, c.want)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path + ".missing"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	os.WriteFile(big, make([]byte, config.MaxFileSize+1), 0o600)
	if _, err := config.Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("huge file: %v", err)
	}
}

// The client_ip header is a header's name: any case will do; another
// header is refused with the two there are.
func TestClientIPHeaderAnyCase(t *testing.T) {
	for _, h := range []string{"X-Forwarded-For", "FORWARDED", "x-forwarded-for"} {
		f, err := config.Parse("t.yaml", []byte("client_ip: {header: "+h+"}\n"+minimal))
		if err != nil || f.ClientIP.Header != strings.ToLower(h) {
			t.Fatalf("%s: %v, %+v", h, err, f)
		}
	}
	if _, err := config.Parse("t.yaml", []byte("client_ip: {header: X-Real-IP}\n"+minimal)); err == nil || err.Error() != `t.yaml:1: client_ip header "x-real-ip": x-forwarded-for or forwarded` {
		t.Fatalf("X-Real-IP: %v", err)
	}
}
