package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The gateway starts before its Redis: a fail_closed limit refuses and
// /readyz says not ready while Redis is down; once Redis appears the
// gateway uses it by itself within 5 s (a quota of 3 allows exactly 3,
// the key is in Redis with a TTL) and is ready.
func TestGatewayStartsWithoutRedis(t *testing.T) {
	t.Parallel()
	redis := redistest.StartServer(t)
	redis.Kill() // its port, with nothing listening yet
	up := newUpstream(t, nil)
	g, _ := start(t, fmt.Sprintf(`
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
store:
  kind: redis
  redis: {addrs: [%s]}
limits:
  - {name: closed, quota: 3, window: 1h, on_failure: fail_closed}
rules:
  - name: all
    quotas: [{limit: closed, key: header, header: X-Probe}]
`, redis.Addr()), up.URL)
	if r, body := get(t, "http://"+g.Addr()+"/x", "X-Probe", "down"); r.StatusCode != 429 {
		t.Fatalf("fail_closed, Redis down at start: %d %s, want 429", r.StatusCode, body)
	}
	if r, body := get(t, "http://"+g.AdminAddr()+"/readyz"); r.StatusCode != 503 || strings.Contains(body, redis.Addr()) {
		t.Fatalf("fail_closed, Redis down: /readyz %d %q, want 503 without the cause (Redis's address is for the log)", r.StatusCode, body)
	}

	redis.Start()
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; ; n++ {
		get(t, "http://"+g.Addr()+"/x", "X-Probe", fmt.Sprintf("probe-%d", n))
		if out, _ := redis.CLI("DBSIZE"); strings.TrimSpace(out) != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no decision reached Redis 5 s after it appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, want := range []int{200, 200, 200, 429} {
		if r, body := get(t, "http://"+g.Addr()+"/x", "X-Probe", "back"); r.StatusCode != want {
			t.Fatalf("Redis back, call %d: %d %s, want %d (a quota of 3 from Redis)", i, r.StatusCode, body, want)
		}
	}
	out, err := redis.CLI("--scan", "--pattern", "*back*")
	if err != nil || len(strings.Fields(out)) != 1 {
		t.Fatalf("SCAN: %q, %v; want the key of X-Probe: back", out, err)
	}
	if ttl, _ := redis.CLI("PTTL", strings.TrimSpace(out)); strings.HasPrefix(ttl, "-") {
		t.Fatalf("key %s: PTTL %s, want a TTL", out, ttl)
	}
	if r, body := get(t, "http://"+g.AdminAddr()+"/readyz"); r.StatusCode != 200 {
		t.Fatalf("Redis back: /readyz %d %q, want 200", r.StatusCode, body)
	}
}
