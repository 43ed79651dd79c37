package config_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gateway/config"
)

// FuzzParse: whatever the bytes, Parse answers without panicking, and
// every refusal is an *Error naming the file, a line that is in it, and a
// reason in the file's terms (no Go type, no yaml.v3 decoding jargon).
func FuzzParse(f *testing.F) {
	for _, path := range []string{"../../examples/gateway.yaml", "../../bench/gateway.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("limits: [{name: a, quota: 1, window: 1s, on_failure: fail_local}]\nrules: [{name: r, on_error: fail_closed, quotas: [{limit: a, key: ip}]}]\n"))
	f.Add([]byte("limits:\n  - &l {name: a, quota: 1, window: 1s}\n  - <<: *l\n    name: b\nrules: [{name: r, quotas: [{limit: b, key: ip}]}]\n"))
	f.Add([]byte("domain: api\ndescriptors: []\n"))
	f.Add([]byte("store: {memory: {max_keys: 1.5}}\nserver: {read_timeout: 1d}\n"))
	f.Add([]byte("tls: {cert_file: a.crt, key_file: a.key, client_ca_file: ca.crt, min_version: '1.3'}\nadmin: {token_env: T, tls: {cert_file: a, key_file: b}}\n" +
		"store: {kind: redis, redis: {username: u, password_env: P, db: 1, tls: {ca_file: c, server_name: r.internal}, connect_timeout: 2s,\n" +
		"  sentinel: {master: m, addrs: ['127.0.0.1:26379'], password_file: /p}, key_hmac_env: K}}\nlimits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"))
	f.Add([]byte("store: {kind: redis, redis: {addrs: ['redis://u:p@h:1'], password: x}}\n"))
	f.Add([]byte("fence: {groups: [a, b/c], required: true}\nlimits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := config.Parse("fuzz.yaml", data)
		if err == nil {
			return
		}
		var e *config.Error
		if !errors.As(err, &e) {
			t.Fatalf("%v (%T): not a *config.Error", err, err)
		}
		if e.File != "fuzz.yaml" || e.Line < 0 || e.Line > strings.Count(string(data), "\n")+strings.Count(string(data), "\r")+1 || e.Reason == "" {
			t.Fatalf("%q: file %q, line %d, reason %q", err, e.File, e.Line, e.Reason)
		}
		for _, goish := range []string{"not found in type", "cannot unmarshal", "into config."} {
			if strings.Contains(e.Reason, goish) {
				t.Fatalf("%q: yaml.v3's words", err)
			}
		}
	})
}
