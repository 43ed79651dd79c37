package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// serveRedis starts a server on the Redis at addr with the api_key limit
// of quota a minute, and returns its HTTP address.
func serveRedis(t *testing.T, addr string, policy sluice.FailurePolicy, quota int, log *slog.Logger, keyHMAC []byte) string {
	t.Helper()
	dir := t.TempDir()
	// Per hour, not per minute: a fixed window's key expires at the
	// window's end, and a SCAN just after a minute's end would miss it.
	hourly := strings.Replace(config(quota), "unit: minute", "unit: hour", 1)
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(hourly), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Options{Load: server.EnvoyLoader(dir), Redis: &redisconfig.Connection{Addrs: []string{addr}}, RedisPolicy: policy, RedisTimeout: redisTimeout(), KeyHMAC: keyHMAC, Logger: log,
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("New with Redis %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return s.HTTPAddr()
}

// jsonCheck asks POST /json about descriptors of api_key=value (hits: a
// descriptor's own hits_addend, -1 for none) and returns the HTTP status
// and the descriptors' codes.
func jsonCheck(t *testing.T, addr string, hits []int, values ...string) (int, []string) {
	t.Helper()
	var ds []string
	for i, v := range values {
		h := ""
		if hits[i] >= 0 {
			h = fmt.Sprintf(`,"hits_addend":%d`, hits[i])
		}
		ds = append(ds, fmt.Sprintf(`{"entries":[{"key":"api_key","value":%q}]%s}`, v, h))
	}
	code, body := httpDo(t, "POST", "http://"+addr+"/json", `{"domain":"edge","descriptors":[`+strings.Join(ds, ",")+`]}`)
	var resp struct {
		Statuses []struct{ Code string }
	}
	_ = json.Unmarshal([]byte(body), &resp)
	var codes []string
	for _, st := range resp.Statuses {
		codes = append(codes, st.Code)
	}
	if len(codes) != len(values) {
		codes = []string{body}
	}
	return code, codes
}

// redisTimeout is the Redis store's timeout in these tests: the default
// (50 ms) under `make fault`; in the -race suite, on a shared machine where
// a Redis call that answers may take longer, one that only a Redis that
// does not answer exceeds (the outages here refuse connections: they fail
// at once).
func redisTimeout() time.Duration {
	if os.Getenv("SLUICE_FAULT") != "" {
		return 0
	}
	return 2 * time.Second
}

// reconnectBound is how soon the server must use a Redis that appeared:
// 5 s under `make fault` (SLUICE_FAULT=1), where the figure is measured on
// a quiet machine; in the -race suite, on a shared machine, a sanity
// bound that only a server that never reconnects misses.
func reconnectBound() time.Duration {
	if os.Getenv("SLUICE_FAULT") != "" {
		return 5 * time.Second
	}
	return 30 * time.Second
}

// sluice serve starts before its Redis: each policy decides while Redis
// is down, /readyz says not ready under fail_closed only; when Redis
// appears the server uses it by itself, within reconnectBound (a quota of
// 3 allows exactly 3, the key has a TTL, /readyz is ready); the log has
// one line per state change.
func TestStartWithoutRedis(t *testing.T) {
	t.Parallel()
	bound := reconnectBound()
	for _, c := range []struct {
		policy sluice.FailurePolicy
		want   []int // HTTP statuses of 4 calls on one key with Redis down
		ready  int
	}{
		{sluice.FailOpen, []int{200, 200, 200, 200}, 200},
		{sluice.FailClosed, []int{429, 429, 429, 429}, 503},
		{sluice.FailLocal, []int{200, 200, 200, 429}, 200},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			t.Parallel()
			redis := redistest.StartServer(t)
			redis.Kill() // its port, with nothing listening yet
			var logs logtest.Buffer
			addr := serveRedis(t, redis.Addr(), c.policy, 3, logs.Logger(), nil)
			for i, want := range c.want {
				if got, codes := jsonCheck(t, addr, []int{-1}, "down"); got != want {
					t.Fatalf("%v, Redis down at start, call %d: %d %v, want %d", c.policy, i, got, codes, want)
				}
			}
			if got, body := httpDo(t, "GET", "http://"+addr+"/readyz", ""); got != c.ready {
				t.Fatalf("%v, Redis down: /readyz %d %q, want %d", c.policy, got, body, c.ready)
			}

			redis.Start()
			appeared := time.Now()
			for n := 0; ; n++ { // a fresh key each time, until Redis holds one
				jsonCheck(t, addr, []int{-1}, fmt.Sprintf("probe-%d", n))
				if out, _ := redis.CLI("DBSIZE"); strings.TrimSpace(out) != "0" {
					break
				}
				if time.Since(appeared) > bound {
					t.Fatalf("%v: no decision reached Redis %v after it appeared; log:\n%s", c.policy, bound, logs.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("%v: the first decision by Redis %v after it appeared", c.policy, time.Since(appeared).Round(time.Millisecond))
			for i, want := range []int{200, 200, 200, 429} {
				if got, codes := jsonCheck(t, addr, []int{-1}, "back"); got != want {
					t.Fatalf("%v, Redis back, call %d: %d %v, want %d (a quota of 3 from Redis)", c.policy, i, got, codes, want)
				}
			}
			out, err := redis.CLI("--scan", "--pattern", "*back*")
			if err != nil || len(strings.Fields(out)) != 1 {
				t.Fatalf("SCAN: %q, %v; want the key of api_key=back", out, err)
			}
			if ttl, _ := redis.CLI("PTTL", strings.TrimSpace(out)); strings.HasPrefix(ttl, "-") {
				t.Fatalf("key %s: PTTL %s, want a TTL", out, ttl)
			}
			if got, body := httpDo(t, "GET", "http://"+addr+"/readyz", ""); got != 200 {
				t.Fatalf("%v, Redis back: /readyz %d %q, want 200", c.policy, got, body)
			}
			for _, msg := range []string{"redis unreachable", "redis back", "redis breaker opened", "redis breaker closed"} {
				if n := logs.Count(t, msg); n != 1 {
					t.Errorf("%v: %d log lines %q, want 1 (one per state change); log:\n%s", c.policy, n, msg, logs.String())
				}
			}
		})
	}
}

// During an outage, a request holding a descriptor that spends nothing
// (hits_addend 0) is answered by the policy, as a spending one is, rather
// than failing whole.
func TestCheckThatSpendsNothingObeysThePolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy sluice.FailurePolicy
		status int
		codes  []string // the spending descriptor's, the check's
	}{
		{sluice.FailOpen, 200, []string{"OK", "OK"}},
		{sluice.FailClosed, 429, []string{"OVER_LIMIT", "OVER_LIMIT"}},
		{sluice.FailLocal, 200, []string{"OK", "OK"}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			t.Parallel()
			redis := redistest.StartServer(t)
			addr := serveRedis(t, redis.Addr(), c.policy, 3, nil, nil)
			if got, codes := jsonCheck(t, addr, []int{-1, 0}, "spend", "look"); got != 200 {
				t.Fatalf("Redis up: %d %v", got, codes)
			}
			redis.Kill()
			got, codes := jsonCheck(t, addr, []int{-1, 0}, "spend", "look")
			if got != c.status || strings.Join(codes, " ") != strings.Join(c.codes, " ") {
				t.Fatalf("%v, Redis down, a spending descriptor and a hits_addend 0 one: %d %v, want %d %v", c.policy, got, codes, c.status, c.codes)
			}
		})
	}
}

// With KeyHMAC no descriptor value reaches a Redis key name; without it,
// the value is there in clear (the control: the SCAN can see it).
func TestKeyHMACHidesIdentity(t *testing.T) {
	t.Parallel()
	redis := redistest.StartServer(t)
	for _, c := range []struct {
		name    string
		keyHMAC []byte
		visible bool
	}{
		{"without", nil, true},
		{"with", []byte("a secret of sixteen or more"), false},
	} {
		var b [8]byte
		_, _ = rand.Read(b[:])
		marker := "MARKER-" + hex.EncodeToString(b[:])
		addr := serveRedis(t, redis.Addr(), sluice.FailOpen, 3, nil, c.keyHMAC)
		for range 2 {
			if got, codes := jsonCheck(t, addr, []int{-1}, marker); got != 200 {
				t.Fatalf("%s KeyHMAC: %d %v", c.name, got, codes)
			}
		}
		out, err := redis.CLI("--scan", "--pattern", "*"+marker+"*")
		if err != nil {
			t.Fatal(err)
		}
		if visible := strings.TrimSpace(out) != ""; visible != c.visible {
			t.Errorf("%s KeyHMAC: keys holding the marker: %q; want visible %v", c.name, out, c.visible)
		}
		if n, _ := redis.CLI("DBSIZE"); strings.TrimSpace(n) == "0" {
			t.Errorf("%s KeyHMAC: nothing in Redis: the calls did not reach it", c.name)
		}
	}
}

// The key HMAC secret is read with the gateway's rules: a file, trimmed,
// at least 16 characters.
