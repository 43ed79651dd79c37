package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway/config"
)

// Every refusal is an *Error: errors.As finds it, with the file, the line
// and the reason, and it reads "FILE:LINE: REASON".
func TestErrorIsTyped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		line       int
		reason     string
	}{
		{"unknown field", "listen: 127.0.0.1:0\nlimits:\n  - name: a\n    qouta: 1\n", 4, `unknown field "qouta" (did you mean "quota"?)`},
		{"wrong type", "limits:\n  - name: a\n    quota: lots\n", 3, `limit "a": quota "lots": a number is expected`},
		{"semantic", "limits:\n  - {name: a, quota: 1, window: 1s}\n  - {name: a, quota: 1, window: 1s}\n", 3, `limit "a" is defined twice`},
		{"syntax", "limits: [\n", 1, "not valid YAML: did not find expected node content"},
		{"whole file", "", 0, "no rules: a configuration needs at least one rule (and the limits it uses)"},
	} {
		_, err := config.Parse("f.yaml", []byte(c.yaml))
		var e *config.Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v (%T), want a *config.Error", c.name, err, err)
			continue
		}
		if e.File != "f.yaml" || e.Line != c.line || e.Reason != c.reason {
			t.Errorf("%s: file %q, line %d, reason %q; want f.yaml, %d, %q", c.name, e.File, e.Line, e.Reason, c.line, c.reason)
		}
		want := "f.yaml:" + strconv.Itoa(c.line) + ": " + c.reason
		if c.line == 0 {
			want = "f.yaml: " + c.reason
		}
		if err.Error() != want {
			t.Errorf("%s: %q, want %q", c.name, err, want)
		}
	}
}

// Load's refusals are *Error too; one that cannot read the file wraps the
// cause.
func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := config.Load(filepath.Join(dir, "missing.yaml"))
	var e *config.Error
	if !errors.As(err, &e) || !errors.Is(err, fs.ErrNotExist) || e.Line != 0 || e.Reason != "no such file" {
		t.Errorf("missing file: %v, want a *config.Error wrapping fs.ErrNotExist", err)
	}
	_, err = config.Load(dir)
	if !errors.As(err, &e) || e.File != dir || e.Reason != "a directory, not a file" {
		t.Errorf("a directory: %v, want a *config.Error saying so", err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(fifo) // opening it for reading would wait for a writer
	if !errors.As(err, &e) || e.File != fifo || !strings.HasPrefix(e.Reason, "not a regular file") {
		t.Errorf("a named pipe: %v, want a *config.Error saying it is not a regular file", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: 127.0.0.1:0\nlimts: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(bad); err == nil || err.Error() != bad+`:2: unknown field "limts" (did you mean "limits"?)` {
		t.Errorf("bad file: %v", err)
	}
}

const ok = "limits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"

// A person can act on every message: a misspelt field of any section gets
// the closest known one (or the list of them), a value of the wrong type
// says what the field takes, in words, and no message names a Go type.
func TestMessagesSayWhatToWrite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, want string }{
		// An unknown field, in every struct of the schema.
		{"lisen: x\n" + ok, `1: unknown field "lisen" (did you mean "listen"?)`},
		{"upstrem: http://x\n" + ok, `1: unknown field "upstrem" (did you mean "upstream"?)`},
		{"admin: {lsten: x}\n" + ok, `1: unknown field "lsten" (did you mean "listen"?)`},
		{"admin: {token: x}\n" + ok, `1: token: a secret is not written in the configuration file, which is copied, diffed and committed; give token_file (a file holding it) or token_env (an environment variable holding it)`},
		{"admin: {secret: x}\n" + ok, `1: secret: a secret is not written in the configuration file`},
		{"upstream: http://u:hunter2@127.0.0.1:1\n" + ok, `1: upstream: a URL with user information (not repeated here: it may hold a password)`},
		{"tls: {}\n" + ok, `1: tls: present but empty — give cert_file and key_file for TLS, or leave tls out for clear text`},
		{"admin: {tls: {cert_file: ''}}\n" + ok, `1: admin tls: present but empty`},
		{"admin: {sekret: x}\n" + ok, `1: unknown field "sekret" (the fields here: listen, token_file, token_env, tls)`},
		{"store: {kind: redis, redis: {password: hunter2}}\n" + ok, `1: password: a secret is not written in the configuration file, which is copied, diffed and committed; give password_file (a file holding it) or password_env`},
		{"store: {kind: redis, redis: {sentinel: {master: m, addrs: ['127.0.0.1:26379'], password: x}}}\n" + ok, `1: password: a secret is not written in the configuration file`},
		{"store: {kind: redis, redis: {key_hmac: x}}\n" + ok, `1: key_hmac: a secret is not written in the configuration file, which is copied, diffed and committed; give key_hmac_file`},
		{"server: {idle_timout: 1s}\n" + ok, `1: unknown field "idle_timout" (did you mean "idle_timeout"?)`},
		{"store: {knd: memory}\n" + ok, `1: unknown field "knd" (did you mean "kind"?)`},
		{"store: {memory: {maxkeys: 1}}\n" + ok, `1: unknown field "maxkeys" (did you mean "max_keys"?)`},
		{"store: {redis: {adrs: []}}\n" + ok, `1: unknown field "adrs" (did you mean "addrs"?)`},
		{"headers: {Version: draft-06}\n" + ok, `1: unknown field "Version" (did you mean "version"?)`},
		{"client_ip: {trusted_proxy: []}\n" + ok, `1: unknown field "trusted_proxy" (did you mean "trusted_proxies"?)`},
		{"request: {path_parameter: keep}\n" + ok, `1: unknown field "path_parameter" (did you mean "path_parameters"?)`},
		{"limits:\n  - name: a\n    qouta: 1\n", `3: unknown field "qouta" (did you mean "quota"?)`},
		{"limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    macth: {}\n", `4: unknown field "macth" (did you mean "match"?)`},
		{"limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    match: {method: [GET]}\n", `4: unknown field "method" (did you mean "methods"?)`},
		{"limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    quotas:\n      - {limit: a, kee: ip}\n", `5: unknown field "kee" (did you mean "key"?)`},
		// The decision service's file, given to the gateway.
		{"domain: api\ndescriptors:\n  - key: remote_address\n", `1: unknown field "domain": this looks like a decision-service configuration (sluice serve --config)`},
		{"descriptors: []\n", `1: unknown field "descriptors": this looks like a decision-service configuration (sluice serve --config)`},
		// Values of the wrong type, in words.
		{"limits:\n  - name: a\n    quota: [1]\n", `3: limit "a": quota: a number is expected, not a list`},
		{"store: {memory: {max_keys: lots}}\n" + ok, `1: max_keys "lots": a whole number is expected`},
		{"store: {memory: {max_keys: 1.5}}\n" + ok, `1: max_keys "1.5": a whole number is expected`},
		{"store: {memory: {max_keys: 1" + strings.Repeat("0", 99) + "}}\n" + ok, `1: max_keys "1` + strings.Repeat("0", 63) + `…": out of range`},
		{"limits:\n  - {name: a, quota: 1e999, window: 1s}\n", `2: limit "a": quota "1e999": out of range`},
		{strings.Repeat("x", 100) + ": 1\n", `1: unknown field "` + strings.Repeat("x", 64) + `…" (the fields here: listen,`},
		{ok + "rules: x\n", `3: "rules" is set twice (first at line 2)`},
		{"limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    shadow: maybe\n", `4: rule "r": shadow "maybe": true or false is expected`},
		{"listen: [a, b]\n" + ok, `1: listen: text is expected, not a list`},
		{"limits: {name: a}\n", `1: limits: a list is expected, not a mapping`},
		{"admin: 127.0.0.1:9090\n" + ok, `1: admin: a mapping is expected (field: value lines, or {field: value}), not "127.0.0.1:9090"`},
		{"- listen: x\n", `1: the file must be a mapping of fields (listen:, limits:, rules: …), not a list`},
		// Durations, failure policies, algorithms: the valid ones listed.
		{"limits:\n  - {name: a, quota: 1, window: 1 minute}\n", `2: limit "a": window "1 minute": not a duration; write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h)`},
		{"limits:\n  - {name: a, quota: 1, window: 1d}\n", `2: limit "a": window "1d": not a duration; write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h); a day is 24h`},
		{"limits:\n  - {name: a, quota: 1, window: 60}\n", `2: limit "a": window "60": not a duration; write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h); a number needs its unit`},
		{"limits:\n  - {name: a, quota: 1, window: {s: 1}}\n", `2: limit "a": window: a duration such as 50ms, 1s, 1m30s or 2h is expected, not a mapping`},
		{"limits:\n  - {name: a, quota: 1, window: 1s, on_failure: closed}\n", `2: limit "a": on_failure "closed": fail_open, fail_closed or fail_local`},
		{"limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    on_error: closed\n", `4: rule "r": on_error "closed": fail_open or fail_closed`},
		{"limits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    on_error: fail_local\n    quotas: [{limit: a, key: ip}]\n", `4: rule "r": on_error fail_local: fail_open or fail_closed (a rule has no local fallback`},
		{"limits:\n  - name: a\n    algorithm: bucket\n", `3: limit "a": algorithm "bucket": token_bucket, gcra, fixed_window, sliding_log, sliding_window, leaky_bucket or concurrency`},
		{"limits:\n  - name: a\n    quota: 1\n    window: 100000h\n", `4: limit "a": window 100000h: must be a whole number of microseconds, from 1µs to ten years`},
		{"limits:\n  - name: a\n    quota: -3\n    window: 1m\n", `3: limit "a": quota -3: must be a positive finite number`},
		{"listen: 127.0.0.1:8080\nadmin: {listen: 127.0.0.1:8080}\n" + ok, `2: admin listen "127.0.0.1:8080": the gateway's own listen address`},
		{"store: {kind: redis, redis: {prefix: 'app{1}'}}\n" + ok, `1: redis prefix "app{1}": at most 64 bytes, without { or }`},
		// Trusted proxies, as the gateway's start reads them.
		{"client_ip: {trusted_proxies: [1.0.0.0/0]}\n" + ok, `1: trusted proxy "1.0.0.0/0": bits set beyond the prefix length: did you mean 0.0.0.0/0 or 1.0.0.0/32?`},
		{"client_ip:\n  trusted_proxies: ['fe80::1%eth0']\n" + ok, `2: trusted proxy "fe80::1%eth0": an address ("192.0.2.1") or a prefix ("10.0.0.0/8"), without a zone (%eth0)`},
		{"client_ip: {trusted_proxies: [0.0.0.0/0]}\n" + ok, `1: trusted proxy "0.0.0.0/0": trusts every peer, so any client could choose its own address; list the proxies' networks`},
		{"client_ip: {trusted_proxies: ['::ffff:0.0.0.0/96']}\n" + ok, `1: trusted proxy "::ffff:0.0.0.0/96": trusts every peer`},
		{"client_ip: {trusted_proxies: [10.0.0.0/33]}\n" + ok, `1: trusted proxy "10.0.0.0/33": an address ("192.0.2.1") or a prefix ("10.0.0.0/8")`},
		{"client_ip: {trusted_proxies: [proxy.internal]}\n" + ok, `1: trusted proxy "proxy.internal": an address ("192.0.2.1") or a prefix ("10.0.0.0/8")`},
		// An upstream without its scheme, whatever its host.
		{"upstream: localhost:3000\n" + ok, `1: upstream "localhost:3000": an http:// or https:// URL with a host (did you mean http://localhost:3000?)`},
		{"upstream: 127.0.0.1:3000\n" + ok, `1: upstream "127.0.0.1:3000": an http:// or https:// URL with a host (did you mean http://127.0.0.1:3000?)`},
		{"upstream: '[::1]:3000'\n" + ok, `1: upstream "[::1]:3000": an http:// or https:// URL with a host (did you mean http://[::1]:3000?)`},
		{"upstream: 'http://[::1'\n" + ok, `1: upstream "http://[::1": missing ']' in host`},
	} {
		_, err := config.Parse("t.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), "t.yaml:"+c.want) {
			t.Errorf("%q: %v\nwant an error containing %q", c.yaml, err, "t.yaml:"+c.want)
			continue
		}
		for _, goish := range []string{"config.", "float64", "int64", "!!", "unmarshal", "not found in type", "sluice:"} {
			if strings.Contains(err.Error(), goish) {
				t.Errorf("%q: %v: names Go's %q", c.yaml, err, goish)
			}
		}
	}
}

// on_failure and on_error are sluice.FailurePolicy values, fail_open when
// absent; the rule's reaches the middleware's rule.
func TestFailurePolicies(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("t.yaml", []byte(`
limits:
  - {name: a, quota: 1, window: 1s}
  - {name: b, quota: 1, window: 1s, on_failure: fail_open}
  - {name: c, quota: 1, window: 1s, on_failure: fail_closed}
  - {name: d, quota: 1, window: 1s, on_failure: fail_local}
rules:
  - {name: open, quotas: [{limit: a, key: ip}]}
  - {name: closed, on_error: fail_closed, quotas: [{limit: a, key: ip}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []sluice.FailurePolicy{sluice.FailOpen, sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		if got := f.Limits[i].OnFailure; got != want {
			t.Errorf("limit %s: on_failure %v, want %v", f.Limits[i].Name, got, want)
		}
	}
	rules := f.HTTPRules()
	if rules[0].OnError != sluice.FailOpen || rules[1].OnError != sluice.FailClosed {
		t.Errorf("rules' OnError: %v, %v; want fail_open, fail_closed", rules[0].OnError, rules[1].OnError)
	}
}

// Anchors, aliases and merge keys are YAML, read as such; what they bring
// in is checked as if written out.
func TestAliasesAndMergeKeys(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("t.yaml", []byte(`
limits:
  - &base {name: a, quota: 10, window: 1m}
  - <<: *base
    name: b
  - <<: [*base]
    name: c
    burst: 5
rules:
  - name: r
    quotas: &q [{limit: a, key: ip}]
  - name: s
    quotas: *q
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Limit("b"); got.Quota != 10 || got.Name != "b" {
		t.Errorf("merged limit b: %+v", got)
	}
	if got := f.Limit("c"); got.Burst != 5 || got.Quota != 10 {
		t.Errorf("merged limit c: %+v", got)
	}
	_, err = config.Parse("t.yaml", []byte("x: &bad {qouta: 1}\n"))
	if err == nil || !strings.Contains(err.Error(), `unknown field "x"`) {
		t.Errorf("unknown anchored field: %v", err)
	}
	_, err = config.Parse("t.yaml", []byte("limits:\n  - &l {name: a, quota: 1, window: 1s}\n  - <<: *l\n    qouta: 2\n"))
	if err == nil || !strings.Contains(err.Error(), `t.yaml:4: unknown field "qouta" (did you mean "quota"?)`) {
		t.Errorf("a merged mapping's typo: %v", err)
	}
	_, err = config.Parse("t.yaml", []byte("base: &b {wndow: 1s}\n"))
	if err == nil || !strings.Contains(err.Error(), `t.yaml:1: unknown field "base"`) {
		t.Errorf("an unknown top-level field holding an anchor: %v", err)
	}
	_, err = config.Parse("t.yaml", []byte("limits:\n  - <<: {wndow: 1s}\n    name: a\n"))
	if err == nil || !strings.Contains(err.Error(), `t.yaml:2: unknown field "wndow" (did you mean "window"?)`) {
		t.Errorf("a merged literal's typo: %v", err)
	}
}

// ErrorAt places what the gateway finds when it acts on a field at the
// field's line, or at its parent's when the file leaves it to a default.
func TestErrorAt(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("t.yaml", []byte("listen: 127.0.0.1:0\nadmin:\n  token_file: /x\nlimits: [{name: a, quota: 1, window: 1s}]\nrules:\n  - name: r\n    quotas:\n      - {limit: a, key: ip}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("the cause")
	for field, line := range map[string]int{
		"admin.token_file":          3,
		"admin.listen":              3, // absent: where its section starts
		"store.redis.key_hmac_file": 1, // no store section: the file's first line
		"rules.0.quotas.0":          8,
		"rules.3":                   6, // no such rule: where the list starts
		"":                          1,
	} {
		err := f.ErrorAt(field, cause)
		var e *config.Error
		if !errors.As(err, &e) || e.Line != line || e.File != "t.yaml" || e.Reason != "the cause" || !errors.Is(err, cause) {
			t.Errorf("ErrorAt(%q): %v (line %d), want line %d wrapping the cause", field, err, e.Line, line)
		}
	}
}
