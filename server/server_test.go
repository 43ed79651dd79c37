package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "a-token-of-some-length"

// config is an envoyproxy/ratelimit file whose api_key limit is n a
// minute.
func config(n int) string {
	return fmt.Sprintf(`domain: edge
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: %d
  - key: path
    value: /healthz
    rate_limit:
      unlimited: true
`, n)
}

type fixture struct {
	s      *server.Server
	dir    string
	client rlpb.RateLimitServiceClient
	hup    chan struct{}
	stop   func() error
}

func start(t *testing.T, files map[string]string) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), hup: make(chan struct{}, 1)}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := server.New(server.Options{
		Load: server.EnvoyLoader(f.dir), Watch: []string{f.dir},
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", AdminToken: token,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.s = s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, f.hup) }()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	f.client = rlpb.NewRateLimitServiceClient(conn)
	f.stop = sync.OnceValue(func() error { conn.Close(); cancel(); return <-done })
	t.Cleanup(func() { f.stop() })
	return f
}

func request(key string) *rlpb.RateLimitRequest {
	return &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "api_key", Value: key}}}}}
}

func httpDo(t *testing.T, method, url, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The service end to end: gRPC RLS and JSON share the counters; health,
// readiness and metrics answer.
func TestServe(t *testing.T) {
	t.Parallel()
	f := start(t, map[string]string{"edge.yaml": config(2)})
	for i, want := range []rlpb.RateLimitResponse_Code{rlpb.RateLimitResponse_OK, rlpb.RateLimitResponse_OK, rlpb.RateLimitResponse_OVER_LIMIT} {
		resp, err := f.client.ShouldRateLimit(context.Background(), request("k"))
		if err != nil || resp.OverallCode != want {
			t.Fatalf("call %d: %v %v, want %v", i, resp, err, want)
		}
	}
	base := "http://" + f.s.HTTPAddr()
	code, body := httpDo(t, "POST", base+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`)
	if code != 429 || !strings.Contains(body, `"overall_code":"OVER_LIMIT"`) {
		t.Fatalf("/json over the limit: %d %s", code, body)
	}
	code, body = httpDo(t, "POST", base+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"other"}]}]}`)
	if code != 200 || !strings.Contains(body, `"limit_remaining":1`) {
		t.Fatalf("/json: %d %s", code, body)
	}
	for _, c := range []struct{ body, want string }{
		{`{"domain":"edge"`, "not an RLS request in JSON"},
		{`{"domain":"edge","descriptors":[]}`, "descriptor list must not be empty"},
		{`{"domain":"edge","nope":1}`, "not an RLS request in JSON"},
		{strings.Repeat(" ", rls.MaxJSONBody+1), "at most"},
	} {
		if code, body := httpDo(t, "POST", base+"/json", c.body); code/100 != 4 || !strings.Contains(body, c.want) {
			t.Errorf("%.30q: %d %s, want a 4xx saying %q", c.body, code, body, c.want)
		}
	}
	if code, _ := httpDo(t, "GET", base+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	if code, body := httpDo(t, "GET", base+"/readyz", ""); code != 200 || !strings.Contains(body, f.s.Version()) {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if _, body := httpDo(t, "GET", base+"/metrics", ""); !strings.Contains(body, `sluice_decisions_total{outcome="rejected",rule="edge.api_key"} 2`) {
		t.Fatalf("/metrics lacks the rejections:\n%s", body)
	}
	if err := f.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Every admin route answers 401 without the token (or with a wrong one).
func TestAdminNeedsTheToken(t *testing.T) {
	t.Parallel()
	f := start(t, map[string]string{"edge.yaml": config(2)})
	admin := "http://" + f.s.AdminAddr()
	routes := []struct{ method, path string }{{"GET", "/admin/config"}, {"POST", "/admin/reload"}, {"GET", "/admin/keys?domain=edge&entry=api_key=k"},
		{"POST", "/admin/keys/reset?domain=edge&entry=api_key=k"}, {"GET", "/debug/pprof/"}, {"GET", "/admin/tenants"}, {"POST", "/admin/tenants/reset"}, {"GET", "/admin/nothing"}}
	for _, r := range routes {
		for _, auth := range []string{"", "Bearer wrong-token-of-length", token, "Basic " + token} {
			if code, _ := httpDo(t, r.method, admin+r.path, "", "Authorization", auth); code != 401 {
				t.Errorf("%s %s with %q: %d, want 401", r.method, r.path, auth, code)
			}
		}
	}
	code, body := httpDo(t, "GET", admin+"/admin/config", "", "Authorization", "Bearer "+token)
	if code != 200 || !strings.Contains(body, `"version":"`+f.s.Version()+`"`) {
		t.Fatalf("/admin/config with the token: %d %s", code, body)
	}
}

// The admin API inspects a descriptor's counter without spending, and
// resets it.
func TestAdminKeys(t *testing.T) {
	t.Parallel()
	f := start(t, map[string]string{"edge.yaml": config(5)})
	for range 3 {
		if _, err := f.client.ShouldRateLimit(context.Background(), request("k")); err != nil {
			t.Fatal(err)
		}
	}
	admin := "http://" + f.s.AdminAddr()
	auth := []string{"Authorization", "Bearer " + token}
	for range 2 {
		code, body := httpDo(t, "GET", admin+"/admin/keys?domain=edge&entry=api_key=k", "", auth...)
		if code != 200 || !strings.Contains(body, `"remaining":2`) || !strings.Contains(body, `"limit":"edge.api_key"`) {
			t.Fatalf("inspect: %d %s", code, body)
		}
	}
	if code, _ := httpDo(t, "POST", admin+"/admin/keys/reset?domain=edge&entry=api_key=k", "", auth...); code != 204 {
		t.Fatalf("reset: %d", code)
	}
	if _, body := httpDo(t, "GET", admin+"/admin/keys?domain=edge&entry=api_key=k", "", auth...); !strings.Contains(body, `"remaining":5`) {
		t.Fatalf("after reset: %s", body)
	}
	for _, c := range []struct {
		query string
		code  int
	}{
		{"domain=edge&entry=path=/healthz", 404}, // unlimited
		{"domain=nope&entry=api_key=k", 404},
		{"domain=edge", 400},
		{"domain=edge&entry=novalue", 400},
	} {
		if code, body := httpDo(t, "GET", admin+"/admin/keys?"+c.query, "", auth...); code != c.code {
			t.Errorf("%s: %d %s, want %d", c.query, code, body, c.code)
		}
	}
}

// A bad file at start is refused with its reason.
func TestRefusesABadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := server.New(server.Options{Load: server.EnvoyLoader(dir), HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:4") || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("%v", err)
	}
}

// A gateway configuration given to sluice serve is refused saying so, in
// the one "file:line: reason" format.
func TestRefusesAGatewayConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:8080\nupstream: http://127.0.0.1:3000\nlimits: [{name: a, quota: 1, window: 1s}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := server.New(server.Options{Load: server.EnvoyLoader(path), HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	if err == nil || !strings.HasPrefix(err.Error(), path+":1: ") || !strings.Contains(err.Error(), "this looks like a gateway configuration (sluice gateway --config)") {
		t.Fatalf("%v, want %s:1: and the hint", err, path)
	}
}

// Reload under load: about 2000 decisions a second while the file is
// replaced 20 times, good and bad versions in turn — no call fails, every
// good version is applied (its limit is what the next calls see), every
// bad one refused (the previous limit stays) and counted.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	f := start(t, map[string]string{"edge.yaml": config(1000)})
	ctx, cancel := context.WithCancel(context.Background())
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			tick := time.NewTicker(8 * time.Millisecond) // 16 × 125/s
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if _, err := f.client.ShouldRateLimit(ctx, request(fmt.Sprintf("load-%d-%d", w, i))); err != nil && ctx.Err() == nil {
					failed.Add(1)
				}
				calls.Add(1)
			}
		})
	}
	path := filepath.Join(f.dir, "edge.yaml")
	replace := func(content string) {
		tmp := filepath.Join(f.dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // atomic, as a deploy does
			t.Fatal(err)
		}
	}
	admin := "http://" + f.s.AdminAddr()
	refused := 0
	begin := time.Now()
	for i := range 20 {
		before := f.s.Version()
		if i%2 == 0 {
			n := 10 + i // a limit of its own, so the version changes and the effect shows
			replace(config(n))
			waitFor(t, func() bool { return f.s.Version() != before })
			// The new limit is in force: the key's n+1st call is over it.
			// The limit is a fixed window of a minute: a probe that
			// straddles a minute's end is tried again on a fresh key.
			for try := 0; ; try++ {
				key := fmt.Sprintf("probe-%d-%d", i, try)
				window := time.Now().Truncate(time.Minute)
				for j := range n {
					if resp, err := f.client.ShouldRateLimit(context.Background(), request(key)); err != nil || resp.OverallCode != rlpb.RateLimitResponse_OK {
						t.Fatalf("version %d (limit %d), call %d: %v %v", i, n, j, resp, err)
					}
				}
				resp, _ := f.client.ShouldRateLimit(context.Background(), request(key))
				if resp.GetOverallCode() == rlpb.RateLimitResponse_OVER_LIMIT {
					break
				}
				if !time.Now().Truncate(time.Minute).Equal(window) && try < 2 {
					continue // the window turned during the probe
				}
				t.Fatalf("version %d: call %d not over its limit of %d", i, n+1, n)
			}
		} else {
			replace("domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: fortnight}\n")
			if i%4 == 1 {
				f.hup <- struct{}{} // SIGHUP, as well as the watcher
			}
			code, body := httpDo(t, "POST", admin+"/admin/reload", "", "Authorization", "Bearer "+token)
			if code != 422 || !strings.Contains(body, "fortnight") || f.s.Version() != before {
				t.Fatalf("bad version %d: reload answered %d %s; version %s, was %s", i, code, body, f.s.Version(), before)
			}
			refused++
		}
	}
	elapsed := time.Since(begin)
	cancel()
	wg.Wait()
	_, metrics := httpDo(t, "GET", "http://"+f.s.HTTPAddr()+"/metrics", "")
	t.Logf("%d calls in %v (%.0f/s), %d failed; %d bad versions refused", calls.Load(), elapsed, float64(calls.Load())/elapsed.Seconds(), failed.Load(), refused)
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed during the reloads", failed.Load())
	}
	if !strings.Contains(metrics, `sluice_config_reloads_total{result="refused"}`) {
		t.Fatalf("no refused reload counted:\n%s", metrics)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for a reload")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A Kubernetes ConfigMap is updated by swapping a symlink: the visible
// file points through ..data, which is renamed to point at a new
// directory. The server sees it and loads the new version.
func TestReloadOnSymlinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(version string, n int) {
		d := filepath.Join(dir, version)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "edge.yaml"), []byte(config(n)), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write("..v1", 1)
	if err := os.Symlink(filepath.Join("..data", "edge.yaml"), filepath.Join(dir, "edge.yaml")); err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Options{Load: server.EnvoyLoader(dir), Watch: []string{dir}, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	before := s.Version()
	write("..v2", 5)
	waitFor(t, func() bool { return s.Version() != before })
}

// The loader reads sluice's on_failure extension as the limits' failure
// policies (what a Redis store decides when Redis cannot answer).
func TestLoaderReadsFailurePolicies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 5, on_failure: fail_closed}\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := server.EnvoyLoader(dir)()
	if err != nil {
		t.Fatal(err)
	}
	if len(l.FailurePolicies) != 1 || l.FailurePolicies["edge.api_key"] != sluice.FailClosed {
		t.Fatalf("%v", l.FailurePolicies)
	}
}

// The loader refuses what is not a configuration: a missing path, a
// directory without YAML files, a file beyond the size bound, a domain
// defined twice; each error names the path.
func TestLoaderRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("empty/notes.txt", "not a configuration")
	write("twice/a.yaml", config(1))
	write("twice/b.yaml", config(2))
	for _, c := range []struct{ path, says string }{
		{filepath.Join(dir, "missing"), "missing"},
		{filepath.Join(dir, "empty"), "empty: no *.yaml or *.yml file"},
		{write("big.yaml", "domain: edge\n"+strings.Repeat("#", 1<<20)), "big.yaml: larger than 1048576 bytes"},
		{filepath.Join(dir, "twice"), "b.yaml:1: duplicate domain 'edge'"},
	} {
		if _, err := server.EnvoyLoader(c.path)(); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error saying %q", c.path, err, c.says)
		}
	}
}

// slow is a real store whose decisions wait until released: calls in
// flight when the server is asked to stop.
type slow struct {
	*memstore.Store
	entered chan struct{}
	release chan struct{}
}

func (s *slow) Allow(ctx context.Context, key string, l sluice.Limit, cost float64) (sluice.Decision, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.Allow(ctx, key, l, cost)
}

// A shutdown drains: a call in flight is answered, then Run returns.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(config(5)), 0o600); err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	st := &slow{Store: ms, entered: make(chan struct{}), release: make(chan struct{})}
	s, err := server.New(server.Options{Load: server.EnvoyLoader(dir), Limiter: st, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	answered := make(chan error, 1)
	go func() {
		resp, err := rlpb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), request("k"))
		if err == nil && resp.OverallCode != rlpb.RateLimitResponse_OK {
			err = fmt.Errorf("%v", resp)
		}
		answered <- err
	}()
	<-st.entered
	cancel() // stop while the call is in flight
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) with a call in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(st.release)
	if err := <-answered; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// on_failure applies end to end, also to a rule whose full key carries the
// request's values (detailed_metric): Redis gone, the fail_closed rule
// refuses while the server's default (fail_open) lets the other through.
func TestOnFailureWithRedisDown(t *testing.T) {
	t.Parallel()
	redis := redistest.StartServer(t)
	dir := t.TempDir()
	file := `domain: edge
descriptors:
  - key: api_key
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100, on_failure: fail_closed}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Options{Load: server.EnvoyLoader(dir), Redis: &redisconfig.Connection{Addrs: []string{redis.Addr()}}, RedisTimeout: redisTimeout(), HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlpb.NewRateLimitServiceClient(conn)
	ask := func(key, value string) rlpb.RateLimitResponse_Code {
		resp, err := client.ShouldRateLimit(context.Background(), &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return resp.OverallCode
	}
	if ask("api_key", "a") != rlpb.RateLimitResponse_OK || ask("ip", "b") != rlpb.RateLimitResponse_OK {
		t.Fatal("Redis up: not OK")
	}
	redis.Kill()
	if got := ask("api_key", "c"); got != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("fail_closed rule, Redis down: %v, want OVER_LIMIT", got)
	}
	if got := ask("ip", "d"); got != rlpb.RateLimitResponse_OK {
		t.Errorf("default (fail_open) rule, Redis down: %v, want OK", got)
	}
}
