package redislease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/leasetest"
	"github.com/sluicehq/sluice/redislease"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dial(t *testing.T, addr string) *redisstore.Conn {
	t.Helper()
	c, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	addr := redistest.Addr(t)
	leasetest.Run(t, func(t *testing.T) lease.Coordinator {
		c, err := redislease.New(redislease.Options{Client: dial(t, addr), Prefix: "sluice:test:lease:"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// After a SCRIPT FLUSH (or a restart) the script is sent again, once.
func TestScriptReloaded(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := redislease.New(redislease.Options{Client: dial(t, srv.Addr())})
	if err != nil {
		t.Fatal(err)
	}
	g := lease.Group{Name: "reload", Partitions: 2, TTL: time.Second}
	for i := range 2 {
		r, err := c.Sync(context.Background(), lease.SyncRequest{Group: g, Member: "m", Want: 2, Acquire: 2})
		if err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
		if i == 0 && len(r.Acquired) != 2 {
			t.Fatalf("acquired %v, want both partitions", r.Acquired)
		}
		if out, err := srv.CLI("SCRIPT", "FLUSH"); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v %s", err, out)
		}
	}
}

// Redis's clock stepped back is taken as the latest the group saw, so a
// lease never outlives its TTL in Redis's view (DEBUG SET-ACTIVE-EXPIRE
// cannot move TIME; the clamp is read back from the clock key instead).
func TestClockKeyKept(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := redislease.New(redislease.Options{Client: dial(t, srv.Addr()), Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	g := lease.Group{Name: "clock", Partitions: 1, TTL: time.Second}
	// A clock key far ahead stands for a TIME that stepped back.
	future := time.Now().Add(time.Hour).UnixMilli()
	if out, err := srv.CLI("SET", "p:{clock}:clock", itoa(future)); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	r, err := c.Sync(context.Background(), lease.SyncRequest{Group: g, Member: "m", Want: 1, Acquire: 1})
	if err != nil || len(r.Acquired) != 1 {
		t.Fatalf("sync: %v %v", r, err)
	}
	// The holder's expiry is counted from the clamped clock: an hour ahead.
	out, _ := srv.CLI("HGET", "p:{clock}:holders", "0")
	if want := itoa(future + 1000); !contains(out, "|"+want) {
		t.Fatalf("holder record %q, want expiry %s (the clamped clock + TTL)", out, want)
	}
}

// Bad options and an unreachable Redis are errors, never a grant.
func TestErrors(t *testing.T) {
	if _, err := redislease.New(redislease.Options{}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("no client: %v", err)
	}
	srv := redistest.StartServer(t)
	conn := dial(t, srv.Addr())
	if _, err := redislease.New(redislease.Options{Client: conn, Prefix: "a{b}"}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("prefix with braces: %v", err)
	}
	c, _ := redislease.New(redislease.Options{Client: conn, Timeout: 200 * time.Millisecond})
	srv.Kill()
	g := lease.Group{Name: "down", Partitions: 1, TTL: time.Second}
	start := time.Now()
	_, err := c.Sync(context.Background(), lease.SyncRequest{Group: g, Member: "m", Want: 1, Acquire: 1})
	if err == nil {
		t.Fatal("sync against a dead Redis succeeded")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("sync took %v against a dead Redis, timeout 200ms", el)
	}
}

// A member cutting the group otherwise than its live members is refused;
// once they are gone, the new shape is taken.
func TestShapeMismatchRefused(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := redislease.New(redislease.Options{Client: dial(t, srv.Addr())})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g8 := lease.Group{Name: "shape", Partitions: 8, TTL: 200 * time.Millisecond}
	g4 := lease.Group{Name: "shape", Partitions: 4, TTL: 200 * time.Millisecond}
	if _, err := c.Sync(ctx, lease.SyncRequest{Group: g8, Member: "a", Want: 8, Acquire: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sync(ctx, lease.SyncRequest{Group: g4, Member: "b", Want: 4, Acquire: 4}); err == nil || !contains(err.Error(), "MISMATCH") {
		t.Fatalf("a member with 4 partitions beside one with 8: err %v, want MISMATCH", err)
	}
	time.Sleep(300 * time.Millisecond) // a's heartbeat lapses
	r, err := c.Sync(ctx, lease.SyncRequest{Group: g4, Member: "b", Want: 4, Acquire: 4})
	if err != nil || len(r.Acquired) != 4 {
		t.Fatalf("after a left: %+v %v, want the 4 partitions", r, err)
	}
}
