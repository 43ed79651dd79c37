package config_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/relay/config"
)

const good = `targets:
  - name: api
    origin: http://127.0.0.1:9000
    allow: [127.0.0.0/8]
    limits:
      - {name: per_second, quota: 50, window: 1s}
queues:
  - {name: jobs, target: api}
`

func TestExampleParses(t *testing.T) {
	f, err := config.Load("../../examples/relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o := f.Options()
	if len(o.Targets) != 1 || len(o.Queues) != 2 || o.Queues[1].Reserved != 0.2 || len(o.Targets[0].Limits) != 2 {
		t.Fatalf("%+v", o)
	}
	if f.Listen != config.DefaultListen && f.Listen != "127.0.0.1:8700" || f.Store.Bolt == nil || f.StateFile == "" {
		t.Fatalf("defaults: %+v", f)
	}
}

// TestRefused is the table of refused files: each with its line and a
// reason in the file's terms.
func TestRefused(t *testing.T) {
	cases := []struct {
		name, file string
		line       int
		reason     string
	}{
		{"unknown field", strings.Replace(good, "    origin:", "    orign: x\n    origin:", 1), 3, `unknown field "orign" in target`},
		{"wrong type", strings.Replace(good, "quota: 50", "quota: fifty", 1), 6, `a number is needed here, not "fifty"`},
		{"bad limit", strings.Replace(good, "quota: 50", "quota: -1", 1), 6, "quota -1"},
		{"bad duration", strings.Replace(good, "window: 1s", "window: 1d", 1), 6, "1d"},
		{"refused origin", strings.Replace(good, "    allow: [127.0.0.0/8]\n", "", 1), 2, "allow"},
		{"origin with a path", strings.Replace(good, "9000", "9000/api", 1), 2, "origin"},
		{"bad prefix", strings.Replace(good, "127.0.0.0/8", "127.0.0.1/8", 1), 4, "write 127.0.0.0/8"},
		{"no such target", strings.Replace(good, "target: api}", "target: nope}", 1), 8, `no target is named "nope"`},
		{"no queues", strings.Split(good, "queues:")[0], 1, "at least one queue"},
		{"reserved over 1", good + "  - {name: j2, target: api, reserved: 0.7}\n  - {name: j3, target: api, reserved: 0.7}\n", 10, "more than 1"},
		{"both stores", good + "store: {bolt: {dir: x}, nats: {url: nats://h:4222}}\n", 9, "not both"},
		{"nats without url", good + "store: {nats: {}}\n", 9, "url is required"},
		{"same listeners", good + "listen: 127.0.0.1:9\nadmin: 127.0.0.1:9\n", 10, "same address"},
		{"not a mapping", "- a\n- b\n", 1, "mapping"},
		{"not YAML", "targets: [\n", 1, "not valid YAML"},
	}
	for _, c := range cases {
		_, err := config.Parse("relay.yaml", []byte(c.file))
		var e *config.Error
		if !errors.As(err, &e) || e.Line != c.line || !strings.Contains(e.Reason, c.reason) {
			t.Errorf("%s: %v (want line %d saying %q)", c.name, err, c.line, c.reason)
		}
	}
}

// FuzzParse: whatever the bytes, Parse answers without panicking, and
// every refusal is an *Error naming the file, a line in it, and a reason
// without yaml.v3's Go words.
func FuzzParse(f *testing.F) {
	data, err := os.ReadFile("../../examples/relay.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	fleet, err := os.ReadFile("../../examples/relay-fleet.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fleet)
	f.Add([]byte(good))
	f.Add([]byte(fleetGood))
	f.Add([]byte(good + "fleet:\n  redis: {sentinel: {master: m, addrs: ['h:26379']}, tls: {ca_file: x}}\n  member: m\n"))
	f.Add([]byte(strings.Replace(fleetGood, "ttl: 2s", "ttl: 2s\n      drift: 0s\n      renew: x", 1)))
	f.Add([]byte(good + "store: {nats: {url: nats://h:4222, replicas: 3}}\nserver: {read_timeout: 1s, max_connections: 5}\n"))
	f.Add([]byte("targets: [{name: a, origin: 'http://[::1]:80', allow: ['::1'], retry: {retry_statuses: [408, 429]}}]\nqueues: [{name: q, target: a, weight: 2}]\n"))
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
