package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/server"
)

// tenantsView is GET /admin/tenants as a client reads it.
type tenantsView struct {
	Spent      float64 `json:"spent_total"`
	Rejections float64 `json:"rejections_total"`
	BySpent    []struct {
		Tenant string  `json:"tenant"`
		Weight float64 `json:"weight"`
	} `json:"by_spent"`
	ByRejections []struct {
		Tenant string  `json:"tenant"`
		Weight float64 `json:"weight"`
	} `json:"by_rejections"`
}

// The poisoning sequence through a real sluice serve: a tenant spends 60,
// then 20 others each ask for hits_addend 4294967295 (all refused,
// nothing spent). The real tenant still ranks first by spend, and the 20
// rank by their rejections, one each.
func TestTenantsNotPoisoned(t *testing.T) {
	t.Parallel()
	f := start(t, map[string]string{"edge.yaml": config(100)})
	real := request("real-tenant")
	real.HitsAddend = 20
	for i := range 3 {
		if resp, err := f.client.ShouldRateLimit(context.Background(), real); err != nil || resp.OverallCode != rlpb.RateLimitResponse_OK {
			t.Fatalf("real tenant, call %d: %v %v", i, resp, err)
		}
	}
	for i := range 20 {
		req := request(fmt.Sprintf("attacker-%d", i))
		req.HitsAddend = 4294967295
		if resp, err := f.client.ShouldRateLimit(context.Background(), req); err != nil || resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("attacker %d: %v %v, want OVER_LIMIT", i, resp, err)
		}
	}
	code, body := httpDo(t, "GET", "http://"+f.s.AdminAddr()+"/admin/tenants", "", "Authorization", "Bearer "+token)
	var v tenantsView
	if err := json.Unmarshal([]byte(body), &v); err != nil || code != 200 {
		t.Fatalf("/admin/tenants: %d %s %v", code, body, err)
	}
	if len(v.BySpent) == 0 || v.BySpent[0].Weight != 60 || v.Spent != 60 {
		t.Fatalf("by spent: %s\nwant the real tenant first, 60 spent in all", body)
	}
	if v.Rejections != 20 || len(v.ByRejections) != 20 || v.ByRejections[0].Weight != 1 {
		t.Fatalf("by rejections: %s\nwant 20 tenants of one rejection each", body)
	}
	for _, r := range v.ByRejections {
		if r.Tenant == v.BySpent[0].Tenant {
			t.Fatalf("the real tenant was never refused, yet ranks by rejections: %s", body)
		}
	}
}

// ?n= on serve's /admin/tenants, as on the gateway's: 1 to 1000, default
// 20, else 400 with a JSON reason.
func TestAdminTenantsN(t *testing.T) {
	t.Parallel()
	f := start(t, map[string]string{"edge.yaml": config(100)})
	for i := range 30 {
		if _, err := f.client.ShouldRateLimit(context.Background(), request(fmt.Sprintf("k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	admin := "http://" + f.s.AdminAddr()
	for _, c := range []struct {
		query string
		code  int
		n     int
	}{{"", 200, 20}, {"?n=3", 200, 3}, {"?n=1000", 200, 30}, {"?n=0", 400, 0}, {"?n=1001", 400, 0}, {"?n=x", 400, 0}} {
		code, body := httpDo(t, "GET", admin+"/admin/tenants"+c.query, "", "Authorization", "Bearer "+token)
		if code != c.code {
			t.Errorf("%q: %d %s, want %d", c.query, code, body, c.code)
			continue
		}
		if code != 200 {
			if !strings.HasPrefix(body, `{"error":"n `) {
				t.Errorf("%q: %s, want a JSON reason", c.query, body)
			}
			continue
		}
		var v tenantsView
		if err := json.Unmarshal([]byte(body), &v); err != nil || len(v.BySpent) != c.n {
			t.Errorf("%q: %d tenants by spend (%v), want %d", c.query, len(v.BySpent), err, c.n)
		}
	}
}

// Without a token the admin listener is off: 403, and a JSON body that
// says how to turn it on. With one, a missing or wrong credential is 401
// with WWW-Authenticate and a JSON body that says so.
func TestAdminOffWithoutAToken(t *testing.T) {
	t.Parallel()
	s, err := server.New(server.Options{Load: server.EnvoyLoader(adminConfigDir(t, config(2))),
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	for _, path := range []string{"/admin/config", "/admin/tenants", "/debug/pprof/", "/admin/nothing"} {
		for _, auth := range []string{"", "Bearer " + token} {
			resp, body := adminGet(t, "http://"+s.AdminAddr()+path, auth)
			if resp.StatusCode != 403 || resp.Header.Get("WWW-Authenticate") != "" || resp.Header.Get("Content-Type") != "application/json" ||
				body != `{"error":"admin endpoints are off: no admin token is configured (start sluice serve with --admin-token-file or --admin-token-env)"}` {
				t.Errorf("%s with %q and no token configured: %d %v %s", path, auth, resp.StatusCode, resp.Header, body)
			}
		}
	}

	f := start(t, map[string]string{"edge.yaml": config(2)})
	for _, auth := range []string{"", "Bearer wrong-token-of-length", token} {
		resp, body := adminGet(t, "http://"+f.s.AdminAddr()+"/admin/tenants", auth)
		if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Bearer realm="sluice admin"` || resp.Header.Get("Content-Type") != "application/json" ||
			body != `{"error":"unauthorized: send Authorization: Bearer and the admin token"}` {
			t.Errorf("with %q: %d %v %s", auth, resp.StatusCode, resp.Header, body)
		}
	}
}

func adminGet(t *testing.T, url, auth string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, strings.TrimSuffix(string(b), "\n")
}

// adminConfigDir writes content as the one file of a configuration
// directory.
func adminConfigDir(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
