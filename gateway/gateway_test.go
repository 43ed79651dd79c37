package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pseudonym is how a tenant is shown: its key's kind and 16 hex digits of
// a keyed hash, never the key.
var pseudonym = regexp.MustCompile(`^ip:[0-9a-f]{16}$`)

// upstream is a real HTTP server that records what reaches it.
type upstream struct {
	*httptest.Server
	hits atomic.Int64
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		fmt.Fprintf(w, "hello from upstream, %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

// start runs a gateway for the configuration and returns it with a
// cancel that stops it and waits for Run to return.
func start(t *testing.T, yaml, upstreamURL string) (*gateway.Gateway, func() error) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Config: cfg, Upstream: upstreamURL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	return g, stop
}

const twoPerMinute = `
listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
  token_file: %s
limits:
  - {name: per-ip, quota: 2, window: 1m}
rules:
  - name: api
    match: {path: /api/}
    quotas:
      - {limit: per-ip, key: ip}
`

func tokenFile(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("an-admin-token-of-some-length\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r, string(b)
}

// The gateway proxies what the rules allow, answers the rest itself with
// the rejection contract, and serves its metrics and, behind the token,
// the heaviest tenants.
func TestGateway(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	g, stop := start(t, fmt.Sprintf(twoPerMinute, tokenFile(t)), up.URL)
	base := "http://" + g.Addr()
	for i := range 2 {
		r, b := get(t, base+"/api/items")
		if r.StatusCode != 200 || b != "hello from upstream, GET /api/items" || r.Header.Get("RateLimit-Policy") != `"per-ip";q=2;w=60` {
			t.Fatalf("request %d: %d %q %v", i, r.StatusCode, b, r.Header)
		}
	}
	r, b := get(t, base+"/api/items")
	if r.StatusCode != 429 || r.Header.Get("Retry-After") != "30" || b != `{"error":"rate_limited","retryable":true}` ||
		r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("third: %d %q %v", r.StatusCode, b, r.Header)
	}
	if r, _ := get(t, base+"/other"); r.StatusCode != 200 {
		t.Fatalf("a path no rule covers: %d", r.StatusCode)
	}
	if n := up.hits.Load(); n != 3 {
		t.Fatalf("upstream saw %d requests, want 3 (2 allowed, 1 unlimited)", n)
	}

	admin := "http://" + g.AdminAddr()
	_, m := get(t, admin+"/metrics")
	for _, want := range []string{
		`sluice_decisions_total{outcome="allowed",rule="api"} 2`,
		`sluice_decisions_total{outcome="rejected",rule="api"} 1`,
		`sluice_memory_keys 1`,
		`sluice_decision_seconds_count{rule="api"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(m, "127.0.0.1") {
		t.Errorf("metrics carry a client address")
	}
	if r, _ := get(t, admin+"/admin/tenants"); r.StatusCode != 401 {
		t.Fatalf("tenants without the token: %d", r.StatusCode)
	}
	if r, _ := get(t, admin+"/admin/tenants", "Authorization", "Bearer wrong-token-of-some-length"); r.StatusCode != 401 {
		t.Fatalf("tenants with a wrong token: %d", r.StatusCode)
	}
	if r, _ := get(t, admin+"/admin/tenants", "Authorization", "an-admin-token-of-some-length"); r.StatusCode != 401 {
		t.Fatalf("tenants with the token but not as a Bearer credential: %d", r.StatusCode)
	}
	r, b = get(t, admin+"/admin/tenants?n=5", "Authorization", "Bearer an-admin-token-of-some-length")
	var tenants struct {
		Spent        float64                   `json:"spent_total"`
		BySpent      []struct{ Tenant string } `json:"by_spent"`
		ByRejections []struct{ Tenant string } `json:"by_rejections"`
	}
	if err := json.Unmarshal([]byte(b), &tenants); err != nil || r.StatusCode != 200 {
		t.Fatalf("tenants: %d %q %v", r.StatusCode, b, err)
	}
	if tenants.Spent != 2 || len(tenants.BySpent) != 1 || len(tenants.ByRejections) != 1 || !pseudonym.MatchString(tenants.BySpent[0].Tenant) || strings.Contains(b, "127.0.0.1") {
		t.Fatalf("tenants: %s", b)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A shutdown lets a request in flight finish, and refuses new ones.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done")
	})
	g, stop := start(t, fmt.Sprintf(twoPerMinute, tokenFile(t)), up.URL)
	got := make(chan string)
	go func() {
		r, err := http.Get("http://" + g.Addr() + "/api/slow")
		if err != nil {
			got <- err.Error()
			return
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
	}()
	<-entered
	stopped := make(chan error)
	go func() { stopped <- stop() }()
	// New connections are refused as soon as Shutdown has closed the
	// listener, while the request in flight is still running.
	for deadline := time.Now().Add(5 * time.Second); ; {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		r, err := c.Get("http://" + g.Addr() + "/api/new")
		if err != nil {
			break
		}
		r.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("new requests still served 5 s into the shutdown")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if b := <-got; b != "done" {
		t.Fatalf("the request in flight: %q", b)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A real client that nobody here wrote — hashicorp/go-retryablehttp —
// waits at least the Retry-After it is given before it tries again.
func TestRetryableHTTPHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	g, _ := start(t, `
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
limits:
  - {name: slow, quota: 1, window: 2s}
rules:
  - name: all
    quotas: [{limit: slow, key: ip}]
`, up.URL)
	var mu sync.Mutex
	var sent []time.Time
	var retryAfter []string
	c := retryablehttp.NewClient()
	c.Logger = nil
	c.RetryMax = 3
	c.RetryWaitMin, c.RetryWaitMax = 10*time.Millisecond, 10*time.Second
	c.RequestLogHook = func(_ retryablehttp.Logger, _ *http.Request, _ int) {
		mu.Lock()
		sent = append(sent, time.Now())
		mu.Unlock()
	}
	c.ResponseLogHook = func(_ retryablehttp.Logger, r *http.Response) {
		mu.Lock()
		retryAfter = append(retryAfter, r.Header.Get("Retry-After"))
		mu.Unlock()
	}
	for i := range 2 {
		r, err := c.Get("http://" + g.Addr() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("request %d ended %d", i, r.StatusCode)
		}
	}
	// The first request went through; the second was refused (Retry-After:
	// 2) and retried.
	if len(sent) != 3 || retryAfter[1] != "2" {
		t.Fatalf("%d attempts, Retry-After %q", len(sent), retryAfter)
	}
	gap := sent[2].Sub(sent[1])
	t.Logf("Retry-After 2 s; go-retryablehttp retried after %v", gap)
	if gap < 2*time.Second {
		t.Fatalf("retried after %v, before the Retry-After of 2 s", gap)
	}
}

// Two gateways sharing Redis enforce one limit between them: ten servers
// limiting 100/s each on their own let a client through at 1000/s; sharing
// the limit, at 100/s.
func TestGatewaysShareRedis(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	up := newUpstream(t, nil)
	yaml := fmt.Sprintf(`
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
store:
  kind: redis
  redis: {addrs: [%s], prefix: %s, timeout: 2s} # not the 50 ms default: a loaded machine must not fail open
limits:
  - {name: shared, quota: 10, window: 1h}
rules:
  - name: all
    quotas: [{limit: shared, key: global}]
`, addr, fmt.Sprintf("gw-test-%d", time.Now().UnixNano()))
	a, _ := start(t, yaml, up.URL)
	b, _ := start(t, yaml, up.URL)
	allowed := 0
	for i := range 30 {
		g := a
		if i%2 == 1 {
			g = b
		}
		if r, _ := get(t, "http://"+g.Addr()+"/x"); r.StatusCode == 200 {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("%d allowed through two gateways, want the shared 10", allowed)
	}
}

// Bad options are refused with what is wrong.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	cfg, _ := config.Parse("t.yaml", []byte("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\nlimits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"))
	for _, c := range []struct {
		opts gateway.Options
		want string
	}{
		{gateway.Options{}, "Config is required"},
		{gateway.Options{Config: cfg}, "no upstream"},
		{gateway.Options{Config: cfg, Upstream: "ftp://x"}, "http:// or https://"},
	} {
		if _, err := gateway.New(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opts, err, c.want)
		}
	}
}

// Only a trusted proxy's word is believed: from any other peer, the
// X-Forwarded-For chain is not passed on and a principal header is
// dropped (the request is limited by IP instead); from a trusted proxy,
// both go through.
func TestUntrustedPeersCannotSpeakForOthers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []http.Header
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
	})
	const conf = `
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
client_ip: {trusted_proxies: [%s]}
limits:
  - {name: per-user, quota: 100, window: 1m}
  - {name: per-ip, quota: 1, window: 1m}
rules:
  - name: users
    quotas: [{limit: per-user, key: principal, header: X-User}]
  - name: anonymous
    quotas: [{limit: per-ip, key: ip}]
`
	for _, c := range []struct {
		trusted string
		codes   []int
		xff     string
		user    string
	}{
		{"192.0.2.0/24", []int{200, 429}, "127.0.0.1", ""},                    // untrusted: per IP, header dropped, chain not passed on
		{"127.0.0.0/8", []int{200, 200}, "203.0.113.9, 127.0.0.1", "mallory"}, // trusted: per user
	} {
		seen = nil
		g, _ := start(t, fmt.Sprintf(conf, c.trusted), up.URL)
		var codes []int
		for range 2 {
			r, _ := get(t, "http://"+g.Addr()+"/", "X-User", "mallory", "X-Forwarded-For", "203.0.113.9")
			codes = append(codes, r.StatusCode)
		}
		mu.Lock()
		h := seen[0]
		mu.Unlock()
		if !slices.Equal(codes, c.codes) || h.Get("X-Forwarded-For") != c.xff || h.Get("X-User") != c.user {
			t.Errorf("trusting %s: codes %v, upstream saw X-Forwarded-For %q and X-User %q; want %v, %q, %q",
				c.trusted, codes, h.Get("X-Forwarded-For"), h.Get("X-User"), c.codes, c.xff, c.user)
		}
	}
}
