package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// A store on a Conn starts with Redis down: New succeeds, every decision
// is its policy's, Check included; when Redis appears the store switches
// to it by itself (a quota of 3 allows exactly 3, the key has a TTL); the
// log has one line per state change; Close leaves no goroutine (goleak).
func TestDialStartsWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	srv.Kill() // its port, with nothing listening yet
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{srv.Addr()}, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var logs logtest.Buffer
	open := sluice.Limit{Name: "start-open", Quota: 3, Window: time.Hour}
	closed := sluice.Limit{Name: "start-closed", Quota: 3, Window: time.Hour}
	local := sluice.Limit{Name: "start-local", Quota: 3, Window: time.Hour}
	s := newStore(t, redisstore.Options{
		Client: conn, Logger: logs.Logger(), BreakerCooldown: 50 * time.Millisecond,
		Policies: map[string]redisstore.Policy{"start-closed": redisstore.FailClosed, "start-local": redisstore.FailLocal},
	})
	if conn.Connected() {
		t.Fatal("connected with nothing listening")
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping answered with Redis down")
	}
	for range 5 {
		if d, err := s.Allow(ctx, "k", open, 1); err != nil || !d.Allowed {
			t.Fatalf("fail_open, Redis down at start: %+v, %v", d, err)
		}
		if d, err := s.Allow(ctx, "k", closed, 1); err != nil || d.Allowed {
			t.Fatalf("fail_closed, Redis down at start: %+v, %v", d, err)
		}
	}
	for i := range 4 {
		if d, err := s.Allow(ctx, "k", local, 1); err != nil || d.Allowed != (i < 3) {
			t.Fatalf("fail_local call %d, Redis down at start: %+v, %v", i, d, err)
		}
	}
	if st := s.Stats(); !st.Unreachable || !st.BreakerOpen {
		t.Fatalf("Stats = %+v; want Redis unreachable and the breaker open", st)
	}

	srv.Start()
	key := "after-" + strings.ReplaceAll(t.Name(), "/", "-")
	deadline := time.Now().Add(5 * time.Second)
	for s.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Redis not used 5 s after it appeared; Stats %+v", s.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 4 {
		d, err := s.Allow(ctx, key, closed, 1)
		if err != nil || d.Allowed != (i < 3) {
			t.Fatalf("Redis back, call %d: %+v, %v; want exactly 3 allowed", i, d, err)
		}
	}
	out, err := srv.CLI("--scan", "--pattern", "*"+key+"*")
	if err != nil || len(strings.Fields(out)) != 1 {
		t.Fatalf("SCAN for %s: %q, %v; want one key", key, out, err)
	}
	if ttl, _ := srv.CLI("PTTL", strings.TrimSpace(out)); strings.HasPrefix(ttl, "-") {
		t.Fatalf("key %s: PTTL %s, want a TTL", out, ttl)
	}
	if st := s.Stats(); st.Unreachable || st.BreakerOpen {
		t.Fatalf("Stats = %+v; want Redis reachable and the breaker closed", st)
	}

	msgs := logs.Messages(t)
	for _, c := range []struct {
		prefix string
		want   int
	}{{"redis unreachable", 1}, {"redis back", 1}, {"redis breaker opened", 1}, {"redis breaker closed", 1}} {
		if got := logs.Count(t, c.prefix); got != c.want {
			t.Errorf("%d log lines %q, want %d; the log: %q", got, c.prefix, c.want, msgs)
		}
	}
	if len(msgs) != 4 {
		t.Errorf("log %q: want exactly the 4 state changes", msgs)
	}
}

// A check that spends nothing obeys the policy during an outage, as a
// spending call does: fail_open allows, fail_closed rejects, fail_local
// reports the local state.
func TestCheckObeysThePolicy(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := newStore(t, redisstore.Options{
		Client: redisstore.NewRueidis(newRueidis(t, srv.Addr())), Timeout: 30 * time.Millisecond,
		Policies: map[string]redisstore.Policy{"check-closed": redisstore.FailClosed, "check-local": redisstore.FailLocal},
	})
	open := sluice.Limit{Name: "check-open", Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Hour}
	closed := sluice.Limit{Name: "check-closed", Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Hour}
	local := sluice.Limit{Name: "check-local", Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Hour}
	s.Allow(ctx, "k", open, 1)
	if d, err := s.Check(ctx, "k", open); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("Redis up: %+v, %v; want allowed, 2 left, nothing spent", d, err)
	}
	if d, _ := s.Check(ctx, "k", open); d.Remaining != 2 {
		t.Fatalf("a second check: %+v; a check spends nothing", d)
	}
	srv.Kill()
	if d, err := s.Check(ctx, "k", open); err != nil || !d.Allowed {
		t.Errorf("fail_open, Redis down: %+v, %v; want allowed", d, err)
	}
	if d, err := s.Check(ctx, "k", closed); err != nil || d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("fail_closed, Redis down: %+v, %v; want rejected, RetryAfter 1 s", d, err)
	}
	s.Allow(ctx, "k", local, 1) // spent locally
	if d, err := s.Check(ctx, "k", local); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Errorf("fail_local, Redis down: %+v, %v; want the local state, 2 left", d, err)
	}
	if _, err := s.Check(ctx, "", open); err == nil {
		t.Error("an empty key: no error; bad input is an error whatever the policy")
	}
}
