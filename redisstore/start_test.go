package redisstore_test

import (
	"errors"
	"net"
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
		Policies: map[string]sluice.FailurePolicy{"start-closed": sluice.FailClosed, "start-local": sluice.FailLocal},
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

// Dial refuses bad options, and nothing else: a Redis that is not there
// is not an error.
func TestDialRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts redisstore.DialOptions
		says string
	}{
		{"no address", redisstore.DialOptions{}, "Addrs is required"},
		{"no port", redisstore.DialOptions{Addrs: []string{"127.0.0.1"}}, `address "127.0.0.1"`},
		{"negative backoff", redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}, MaxBackoff: -time.Second}, "MaxBackoff -1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := redisstore.Dial(c.opts)
			if err == nil {
				conn.Close()
				t.Fatalf("Dial(%+v): no error", c.opts)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Dial(%+v): %v; want it to say %q", c.opts, err, c.says)
			}
		})
	}
}

// Before it connects, a Conn answers every call with ErrNotConnected
// (with the last attempt's error), says it may be a Cluster (so that a
// call's keys are grouped by slot), and a server that is not Redis does
// not count as connected. Close is idempotent.
func TestConnBeforeConnecting(t *testing.T) {
	t.Parallel()
	// A server that answers, but not as Redis does.
	addr := redistest.Impostor(t, func(c net.Conn) { _, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n")) })
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{addr}, MaxBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if conn.Connected() {
		t.Fatal("connected to a server that is not Redis")
	}
	if !conn.Cluster() {
		t.Error("Cluster() = false before connecting; want true (keys grouped by slot, right on either)")
	}
	for name, call := range map[string]func() ([]int64, error){
		"EvalSHA": func() ([]int64, error) { return conn.EvalSHA(ctx, "0", nil, nil) },
		"Eval":    func() ([]int64, error) { return conn.Eval(ctx, "return {1}", nil, nil) },
	} {
		if _, err := call(); !errors.Is(err, redisstore.ErrNotConnected) || !strings.Contains(err.Error(), "not Redis") {
			t.Errorf("%s before connecting: %v; want ErrNotConnected with the attempt's error", name, err)
		}
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// Once connected, a Conn is a Client like NewRueidis's: single node here.
func TestConnConnected(t *testing.T) {
	t.Parallel()
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{redistest.Addr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if !conn.Connected() || conn.Cluster() {
		t.Fatalf("Connected %v, Cluster %v; want a connected single node", conn.Connected(), conn.Cluster())
	}
	if v, err := conn.Eval(ctx, "return {tonumber(ARGV[1]) + 1}", nil, []string{"41"}); err != nil || len(v) != 1 || v[0] != 42 {
		t.Fatalf("Eval: %v, %v", v, err)
	}
	var got []error
	stop := conn.WatchConnection(func(err error) { got = append(got, err) })
	stop()
	if len(got) != 1 || got[0] != nil {
		t.Fatalf("WatchConnection on a connected Conn reported %v; want one nil (connected), at once", got)
	}
}
