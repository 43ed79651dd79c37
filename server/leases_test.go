package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// leasedConfig has a global token bucket of 100000 a second (the leased
// one) and a per-tenant fixed window (decided in Redis).
const leasedConfig = `domain: edge
descriptors:
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 100000, algorithm: token_bucket, burst: 100000}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
`

const leasesFile = `limits:
  - name: edge.generic_key_global
    partitions: 8
    ttl: 300ms
`

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// evalCalls is how many scripts Redis ran (EVALSHA and EVAL), from INFO
// commandstats.
func evalCalls(t *testing.T, r *redistest.Server) int {
	t.Helper()
	out, err := r.CLI("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`).FindAllStringSubmatch(out, -1) {
		c, _ := strconv.Atoi(m[1])
		n += c
	}
	return n
}

func ask(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	return httpDo(t, "POST", "http://"+addr+"/json", body)
}

const globalReq = `{"domain":"edge","descriptors":[{"entries":[{"key":"generic_key","value":"global"}]}]}`

// A leased limit is decided in process: 1000 decisions cost Redis the
// Holder's rounds (one script every TTL/3), not a script each; the limit
// beside it is still Redis's; the leases' metrics are served.
func TestLeasedLimitWithoutARedisCallPerDecision(t *testing.T) {
	t.Parallel()
	redis := redistest.StartServer(t)
	dir := writeFiles(t, map[string]string{"edge.yaml": leasedConfig})
	leases, err := server.ParseLeases("leases.yaml", []byte(leasesFile))
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Options{Load: server.EnvoyLoader(dir), Redis: &redisconfig.Connection{Addrs: []string{redis.Addr()}}, RedisTimeout: redisTimeout(),
		Leases: leases, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", AdminToken: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// The key's first requests wait for its partitions (a round, then the
	// quarantine of a new group: 300 ms + 50 ms) and their first tokens.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := ask(t, s.HTTPAddr(), globalReq); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leased limit allowed nothing within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before, start := evalCalls(t, redis), time.Now()
	allowed := 0
	for range 1000 {
		if code, _ := ask(t, s.HTTPAddr(), globalReq); code == 200 {
			allowed++
		}
	}
	calls, took := evalCalls(t, redis)-before, time.Since(start)
	// A round every 100 ms (one script each, a second one when the
	// allotment moved), and a few to spare.
	bound := 2*int(took/(100*time.Millisecond)) + 5
	t.Logf("1000 decisions in %v: %d allowed, %d scripts in Redis (bound %d)", took.Round(time.Millisecond), allowed, calls, bound)
	if calls > bound || calls >= 1000 {
		t.Errorf("1000 leased decisions cost %d scripts in Redis over %v; want the Holder's rounds, at most %d", calls, took, bound)
	}
	if allowed < 990 {
		t.Errorf("%d of 1000 allowed on a limit of 100000/s; want nearly all", allowed)
	}
	// The tenant limit is Redis's: 5 a minute, each a script.
	before = evalCalls(t, redis)
	codes := []int{}
	for range 6 {
		code, _ := ask(t, s.HTTPAddr(), `{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"t1"}]}]}`)
		codes = append(codes, code)
	}
	if want := []int{200, 200, 200, 200, 200, 429}; !equalInts(codes, want) {
		t.Errorf("tenant (Redis): %v, want %v", codes, want)
	}
	if n := evalCalls(t, redis) - before; n < 6 {
		t.Errorf("tenant decisions ran %d scripts, want a script each (6 or more)", n)
	}
	_, body := httpDo(t, "GET", "http://"+s.HTTPAddr()+"/metrics", "")
	for _, series := range []string{`sluice_lease_keys{limit="edge.generic_key_global"} 1`, `sluice_lease_partitions_held{limit="edge.generic_key_global"} 8`,
		`sluice_lease_fallback_total{limit="edge.generic_key_global",policy="fail_open"} 0`} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	if strings.Contains(body, "global\"") && regexp.MustCompile(`sluice_lease_\w+\{[^}]*key=`).MatchString(body) {
		t.Error("a lease series is labelled by key")
	}
	code, cfg := httpDo(t, "GET", "http://"+s.AdminAddr()+"/admin/config", "", "Authorization", "Bearer "+token)
	var desc struct {
		Store struct{ Leased []string }
	}
	if err := json.Unmarshal([]byte(cfg), &desc); code != 200 || err != nil || len(desc.Store.Leased) != 1 || desc.Store.Leased[0] != "edge.generic_key_global" {
		t.Errorf("/admin/config: %d %s; want store.leased [edge.generic_key_global]", code, cfg)
	}
	code, _ = httpDo(t, "GET", "http://"+s.AdminAddr()+"/admin/keys?domain=edge&entry=generic_key=global", "", "Authorization", "Bearer "+token)
	if code != 501 {
		t.Errorf("/admin/keys on a leased limit: %d, want 501 (not inspectable)", code)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Leases that do not fit the configuration are refused at start, and a
// reload that would break them is refused (the previous configuration
// stays).
func TestLeasesRefused(t *testing.T) {
	t.Parallel()
	redis := redistest.StartServer(t)
	for _, c := range []struct {
		config, leases, says string
	}{
		{leasedConfig, "limits:\n  - name: edge.nothing\n", "no rule of the configuration (version"},
		{leasedConfig, "limits:\n  - name: edge.tenant\n", "a leased limit is a token_bucket or gcra"},
		{strings.Replace(leasedConfig, "100000, algorithm", "4, algorithm", 1), "limits:\n  - name: edge.generic_key_global\n", "partitions 8 exceed the quota 4"},
		{leasedConfig, "limits:\n  - name: edge.generic_key_global\n    outage_share: 0.995\n    partitions: 1000\n", "partitions 1000 exceed"},
	} {
		leases, err := server.ParseLeases("leases.yaml", []byte(c.leases))
		if err != nil {
			t.Fatal(err)
		}
		_, err = server.New(server.Options{Load: server.EnvoyLoader(writeFiles(t, map[string]string{"edge.yaml": c.config})), Redis: &redisconfig.Connection{Addrs: []string{redis.Addr()}},
			Leases: leases, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("leases %q: New = %v; want an error saying %q", c.leases, err, c.says)
		}
	}
	leases, _ := server.ParseLeases("leases.yaml", []byte(leasesFile))
	if _, err := server.New(server.Options{Load: server.EnvoyLoader(writeFiles(t, map[string]string{"edge.yaml": leasedConfig})), Leases: leases}); err == nil || !strings.Contains(err.Error(), "Options.Redis") {
		t.Errorf("leases without Redis: %v; want refused", err)
	}

	dir := writeFiles(t, map[string]string{"edge.yaml": leasedConfig})
	s, err := server.New(server.Options{Load: server.EnvoyLoader(dir), Redis: &redisconfig.Connection{Addrs: []string{redis.Addr()}},
		Leases: leases, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	version := s.Version()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(strings.Replace(leasedConfig, "algorithm: token_bucket, burst: 100000", "algorithm: fixed_window", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "token_bucket or gcra") || s.Version() != version {
		t.Errorf("a reload that makes the leased limit a fixed window: %v (version %s, was %s); want refused, the previous one in force", err, s.Version(), version)
	}
}

func TestParseLeases(t *testing.T) {
	t.Parallel()
	l, err := server.ParseLeases("l.yaml", []byte(`member: fleet-a1
max_keys: 10
prefix: "x:"
limits:
  - name: edge.a
    partitions: 4
    ttl: 1s
    on_failure: fail_local
    outage_share: 0.25
    idle: 1m
  - name: edge.b
`))
	if err != nil {
		t.Fatal(err)
	}
	a := l.Limits[0]
	if l.Member != "fleet-a1" || l.MaxKeys != 10 || l.Prefix != "x:" || len(l.Limits) != 2 || a.Name != "edge.a" || a.Partitions != 4 || a.TTL != time.Second ||
		a.Policy.String() != "fail_local" || a.OutageShare != 0.25 || a.Idle != time.Minute || l.Limits[1].Name != "edge.b" {
		t.Fatalf("%+v", l)
	}
	for _, c := range []struct {
		file string
		line int
		says string
	}{
		{"limits: []\n", 1, "limits: none: list the limits"},
		{"max_keys: 3\n", 0, "limits: none: list the limits"},
		{"limits:\n  - name: a\n    partition: 3\n", 3, "field partition not found"},
		{"limits:\n  - partitions: 3\n", 2, "limits[0].name: required"},
		{"limits:\n  - name: a\n  - name: b\n    ttl: soon\n", 4, `limits[1].ttl: "soon": not a duration`},
		{"limits:\n  - name: a\n    ttl: 10ms\n", 2, "ttl 10ms"},
		{"limits:\n  - name: a\n    ttl: -1s\n", 3, "limits[0].ttl: -1s: must be positive"},
		{"limits:\n  - name: a\n    partitions: -2\n", 3, "limits[0].partitions: -2: must be positive"},
		{"limits:\n  - name: a\n    partitions: 100000\n", 2, "partitions 100000"},
		{"limits:\n  - name: a\n    on_failure: fail_maybe\n", 3, `limits[0].on_failure: unknown failure policy "fail_maybe"`},
		{"limits:\n  - name: a\n    outage_share: 1\n", 3, "limits[0].outage_share: 1: want 0 to less than 1"},
		{"limits:\n  - name: a\n  - name: a\n", 3, `limits[1].name: "a" is leased twice (first as limits[0])`},
		{"limits:\n  - name: bad name\n", 2, "name"},
		{"member: \"bad member\"\nlimits:\n  - name: a\n", 1, "member: "},
		{"max_keys: -1\nlimits:\n  - name: a\n", 1, "max_keys: -1: must be positive"},
		{"prefix: \"{x}\"\nlimits:\n  - name: a\n", 1, "prefix: "},
		{"limits: [\n", 1, "did not find expected node content"},
	} {
		_, err := server.ParseLeases("l.yaml", []byte(c.file))
		var fe *configfile.Error
		if !errors.As(err, &fe) || fe.File != "l.yaml" || fe.Line != c.line || !strings.Contains(fe.Reason, c.says) {
			t.Errorf("%q: %v; want l.yaml:%d saying %q", c.file, err, c.line, c.says)
		}
	}
}
