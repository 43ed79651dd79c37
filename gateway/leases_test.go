package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// leasedGateway is a Redis store with the global limit, L = 20/s and
// B = 20, on leases (4 partitions of 5/s, burst 5; a 1 s lease, renewed
// every 333 ms; fail_closed, so that nothing is admitted but from the
// partitions held), and a per-tenant limit decided in Redis.
const leasedGateway = `
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0, token_file: %s}
store:
  kind: redis
  redis: {addrs: [%s], prefix: %s, key_hmac_file: %s, timeout: 2s}
  leases:
    prefix: "%[3]s:lease:"
    limits:
      - {name: global, partitions: 4, ttl: 1s, on_failure: fail_closed}
limits:
  - {name: global, quota: 20, window: 1s}
  - {name: per-tenant, quota: 3, window: 1h}
rules:
  - name: tenants
    match: {path: /tenant/}
    quotas: [{limit: per-tenant, key: header, header: X-Tenant}]
  - name: all
    quotas: [{limit: global, key: global}]
`

// A gateway puts store.leases' limit on leases in Redis: requests are
// admitted once its partitions are held and out of quarantine, never more
// than B + L×T in a window of T; the other limit is still Redis's; the
// leases' metrics and /admin/config name the limit; and Close ends the
// Holders' goroutines.
func TestGatewayLeasedLimit(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	dir := t.TempDir()
	hmac := filepath.Join(dir, "key-hmac")
	if err := os.WriteFile(hmac, []byte("a-key-hmac-secret-of-32-bytes-or-more\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, nil)
	prefix := fmt.Sprintf("gw-lease-test-%d", time.Now().UnixNano()) // a new group: quarantined once
	g, stop := start(t, fmt.Sprintf(leasedGateway, tokenFile(t), addr, prefix, hmac), up.URL)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	send := func(path string, header ...string) int {
		req, _ := http.NewRequest("GET", "http://"+g.Addr()+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		r, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		r.Body.Close()
		return r.StatusCode
	}

	// Ready once Redis answers: the leased limit fails closed (its own
	// limit does not).
	for deadline := time.Now().Add(15 * time.Second); ; {
		if r, _ := get(t, "http://"+g.AdminAddr()+"/readyz"); r.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz not 200 within 15 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The key's first requests wait for its partitions: a round, then the
	// quarantine of a new group (1 s + 50 ms), then their first tokens.
	first := time.Now()
	if code := send("/x"); code != 429 {
		t.Fatalf("the key's first request: %d; want 429 (no partition held yet: the limit is not Redis's)", code)
	}
	for send("/x") != 200 {
		if time.Since(first) > 15*time.Second {
			t.Fatal("the leased limit admitted nothing within 15 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("first request admitted %v after the first try", time.Since(first).Round(time.Millisecond))
	if n, _ := leaseGoroutines(); n == 0 {
		t.Fatal("no lease goroutine while the leased limit admits: the check below could not fail")
	}

	// Four clients as fast as they can for a second: at most B + L×T.
	const L, B = 20.0, 20.0
	var mu sync.Mutex
	codes := map[int]int{}
	begin := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Since(begin) < time.Second {
				c := send("/x")
				mu.Lock()
				codes[c]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	bound := B + L*elapsed.Seconds()
	t.Logf("%v: %d admitted, %d refused (bound B + L×T = %.1f)", elapsed.Round(time.Millisecond), codes[200], codes[429], bound)
	if float64(codes[200]) > bound || codes[200]+codes[429] != sumCounts(codes) {
		t.Errorf("in %v: %v; want only 200 and 429, at most %.1f admitted", elapsed, codes, bound)
	}
	if sent := sumCounts(codes); float64(sent) > bound && codes[429] == 0 {
		t.Errorf("%d sent, more than the bound %.1f, and none refused", sent, bound)
	}

	// The tenant limit is Redis's: 3 an hour.
	var tenant []int
	for range 4 {
		tenant = append(tenant, send("/tenant/a", "X-Tenant", "t-"+prefix))
	}
	if fmt.Sprint(tenant) != "[200 200 200 429]" {
		t.Errorf("per-tenant (Redis): %v, want [200 200 200 429]", tenant)
	}

	admin := "http://" + g.AdminAddr()
	_, m := get(t, admin+"/metrics")
	for _, series := range []string{`sluice_lease_keys{limit="global"} 1`, `sluice_lease_fallback_total{limit="global",policy="fail_open"} 0`,
		`sluice_lease_fallback_total{limit="global",policy="fail_local"} 0`} {
		if !strings.Contains(m, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	// Held: 1 to 4 (the Holder gives back what the demand, gone, no
	// longer needs).
	if !regexp.MustCompile(`(?m)^sluice_lease_partitions_held\{limit="global"\} [1-4]$`).MatchString(m) {
		t.Errorf("/metrics: no partition of global held:\n%s", m)
	}
	r, body := get(t, admin+"/admin/config", "Authorization", "Bearer an-admin-token-of-some-length")
	var desc struct {
		Store struct {
			Kind   string
			Leased []string
		}
	}
	if err := json.Unmarshal([]byte(body), &desc); r.StatusCode != 200 || err != nil || desc.Store.Kind != "redis" || fmt.Sprint(desc.Store.Leased) != "[global]" {
		t.Errorf("/admin/config: %d %s; want store.leased [global]", r.StatusCode, body)
	}

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// A goroutine that has signalled its end (a WaitGroup's Done) may
	// still be on its way out: wait a little, as goleak does.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, stacks := leaseGoroutines()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d lease goroutines 2 s after the gateway stopped; want none:\n%s", n, stacks)
			break
		}
	}
}

func sumCounts(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// leaseGoroutines counts the goroutines running the leases' code
// (leasestore's Run, the Holders): only a gateway with store.leases
// starts any, so the other tests running meanwhile do not count.
func leaseGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count, stacks := 0, ""
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/sluicehq/sluice/leasestore.") || strings.Contains(g, "github.com/sluicehq/sluice/lease.") {
			count++
			stacks += g + "\n\n"
		}
	}
	return count, stacks
}

// A leased limit that fails closed makes /readyz ask Redis, as a limit
// that fails closed does: with Redis unreachable, not ready; leased
// fail_open, ready.
func TestGatewayLeasedFailClosedReadiness(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	for _, c := range []struct {
		policy string
		code   int
	}{{"fail_closed", 503}, {"fail_open", 200}} {
		g, _ := start(t, fmt.Sprintf(`
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
store:
  kind: redis
  redis: {addrs: ["127.0.0.1:1"]}   # nothing listens there
  leases:
    limits: [{name: global, partitions: 4, on_failure: %s}]
limits:
  - {name: global, quota: 20, window: 1s}
rules:
  - name: all
    quotas: [{limit: global, key: global}]
`, c.policy), up.URL)
		if r, body := get(t, "http://"+g.AdminAddr()+"/readyz"); r.StatusCode != c.code {
			t.Errorf("leased %s, Redis unreachable: /readyz %d %q, want %d", c.policy, r.StatusCode, body, c.code)
		}
	}
}
