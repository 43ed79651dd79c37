package redisscript_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
)

var ctx = context.Background()

// counting wraps a real Client and counts the calls that reach Redis; it
// can also tamper with what goes out or comes back, to play a misbehaving
// client or server.
type counting struct {
	redisscript.Client
	calls  atomic.Int64
	argv   func([]string) []string
	answer func([]int64) []int64
}

func (c *counting) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	c.calls.Add(1)
	if c.argv != nil {
		args = c.argv(args)
	}
	v, err := c.Client.EvalSHA(ctx, sha, keys, args)
	if err == nil && c.answer != nil {
		v = c.answer(v)
	}
	return v, err
}

func (c *counting) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	c.calls.Add(1)
	if c.argv != nil {
		args = c.argv(args)
	}
	v, err := c.Client.Eval(ctx, script, keys, args)
	if err == nil && c.answer != nil {
		v = c.answer(v)
	}
	return v, err
}

func sharedClient(t *testing.T) redisscript.Client {
	t.Helper()
	return redisstore.NewRueidis(newRueidis(t, redistest.Addr(t)))
}

// patient is the Timeout of the tests that are not about timeouts: long
// enough that a loaded machine (the -race suite, other packages' tests at
// once) never turns a slow answer into a policy decision.
const patient = 5 * time.Second

// unique is a key unique to this test run.
func unique(t *testing.T, k string) string {
	return fmt.Sprintf("%s/%d/%s", t.Name(), time.Now().UnixNano(), k)
}

// One decision is exactly one round trip, whatever it decides; several
// limits sharing a hash slot are one too.
func TestOneRoundTripPerDecision(t *testing.T) {
	t.Parallel()
	c := &counting{Client: sharedClient(t)}
	s := newStore(t, redisscript.Options{Client: c, Timeout: patient})
	limit := sluice.Limit{Name: "rt", Quota: 10, Window: time.Minute}
	key := unique(t, "k")
	s.Allow(ctx, key, limit, 1) // the script is loaded now, if it was not
	c.calls.Store(0)
	for range 1000 {
		s.Allow(ctx, key, limit, 1) // 9 allowed, then rejected
	}
	if n := c.calls.Load(); n != 1000 {
		t.Fatalf("1000 decisions made %d calls", n)
	}
	c.calls.Store(0)
	perDay := sluice.Limit{Name: "rt-day", Quota: 1000, Window: 24 * time.Hour}
	if _, err := s.AllowAll(ctx, []sluice.Request{{Key: key, Limit: limit, Cost: 1}, {Key: key, Limit: perDay, Cost: 1}}, sluice.AllOrNothing, nil); err != nil {
		t.Fatal(err)
	}
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("a two-limit decision on one key made %d calls", n)
	}
}

// Bad input is refused before any call to Redis.
func TestBadInputMakesNoCall(t *testing.T) {
	t.Parallel()
	c := &counting{Client: sharedClient(t)}
	s := newStore(t, redisscript.Options{Client: c})
	good := sluice.Limit{Name: "good", Quota: 5, Window: time.Second}
	for _, call := range []struct {
		key   string
		limit sluice.Limit
		cost  float64
		want  error
	}{
		{"k", sluice.Limit{Name: "bad", Quota: -1, Window: time.Second}, 1, sluice.ErrInvalidLimit},
		{"k", good, 0, sluice.ErrInvalidCost},
		{"", good, 1, sluice.ErrInvalidKey},
		{strings.Repeat("k", sluice.MaxKeyLen+1), good, 1, sluice.ErrInvalidKey},
	} {
		if _, err := s.Allow(ctx, call.key, call.limit, call.cost); !errors.Is(err, call.want) {
			t.Errorf("%+v: err = %v, want %v", call.limit, err, call.want)
		}
	}
	if n := c.calls.Load(); n != 0 {
		t.Fatalf("bad input made %d calls to Redis", n)
	}
}

// A reply the script never sends, or a script of another protocol, is an
// error that names the problem: never an allow.
func TestGarbageIsAnError(t *testing.T) {
	t.Parallel()
	limit := sluice.Limit{Name: "garbage", Quota: 5, Window: time.Second}
	for _, c := range []struct {
		name   string
		client *counting
		says   string
	}{
		{"old client protocol", &counting{argv: func(a []string) []string { a = append([]string(nil), a...); a[0] = "0"; return a }}, "script protocol 3, client protocol 0"},
		{"foreign protocol in the reply", &counting{answer: func(v []int64) []int64 { v[0] = 9; return v }}, "script protocol 9"},
		{"short reply", &counting{answer: func(v []int64) []int64 { return v[:3] }}, "3 values for 1 keys"},
		{"impossible remaining", &counting{answer: func(v []int64) []int64 { v[3] = 1 << 60; return v }}, "remaining"},
		{"allowed and never", &counting{answer: func(v []int64) []int64 { v[2], v[4] = 1, -1; return v }}, "wait -1"},
		{"allowed but unspent", &counting{answer: func(v []int64) []int64 { v[2], v[4] = 5, 0; return v }}, "unspent in a call allowed whole"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.client.Client = sharedClient(t)
			s := newStore(t, redisscript.Options{Client: c.client, Timeout: patient})
			d, err := s.Allow(ctx, unique(t, "k"), limit, 1)
			if err == nil || d.Allowed || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("(%+v, %v); want an error saying %q and no allow", d, err, c.says)
			}
		})
	}
	// A key that holds something else than a state: Redis's own error.
	rc := newRueidis(t, redistest.Addr(t))
	s := newStore(t, redisscript.Options{Client: redisstore.NewRueidis(rc), Prefix: "garbage", Timeout: patient})
	key := unique(t, "k")
	// The state key of (limit, key): found by deciding once, then spoiled.
	s.Allow(ctx, key, limit, 1)
	keys, err := rc.Do(ctx, rc.B().Keys().Pattern("garbage:*"+key+"}").Build()).AsStrSlice()
	if err != nil || len(keys) != 1 {
		t.Fatalf("KEYS: %v, %v", keys, err)
	}
	if err := rc.Do(ctx, rc.B().Set().Key(keys[0]).Value("not msgpack \xc1").Px(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Allow(ctx, key, limit, 1); err == nil || d.Allowed {
		t.Fatalf("a spoiled state: (%+v, %v); want an error", d, err)
	}
}

// Raw keys never reach Redis with KeyHMAC.
func TestKeyHMAC(t *testing.T) {
	t.Parallel()
	rc := newRueidis(t, redistest.Addr(t))
	prefix := fmt.Sprintf("hmac%d", time.Now().UnixNano())
	s := newStore(t, redisscript.Options{Client: redisstore.NewRueidis(rc), Prefix: prefix, KeyHMAC: []byte("secret"), Timeout: patient})
	identity := "alice@example.com"
	limit := sluice.Limit{Name: "h", Quota: 1, Window: time.Minute}
	if d, _ := s.Allow(ctx, identity, limit, 1); !d.Allowed {
		t.Fatal("first call rejected")
	}
	if d, _ := s.Allow(ctx, identity, limit, 1); d.Allowed {
		t.Fatal("second call of 1 per minute allowed: the HMAC'd key does not keep state")
	}
	keys, err := rc.Do(ctx, rc.B().Keys().Pattern(prefix+":*").Build()).AsStrSlice()
	if err != nil || len(keys) != 1 {
		t.Fatalf("KEYS: %v, %v", keys, err)
	}
	if strings.Contains(keys[0], "alice") {
		t.Fatalf("the raw identity is in Redis: %q", keys[0])
	}
}

// A Cluster call across hash slots that is rejected undoes what the other
// slots spent.
func TestCrossSlotRejectionIsUndone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	nodes := redistest.StartCluster(t, 3)
	addrs := []string{nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()}
	frozen := time.Now()
	s := newStore(t, redisscript.Options{Client: redisstore.NewRueidis(newRueidis(t, addrs...)), TestNow: func() time.Time { return frozen }, Timeout: patient})
	perIP := sluice.Limit{Name: "ip", Quota: 1, Window: time.Hour}
	perUser := sluice.Limit{Name: "user", Quota: 5, Window: time.Hour}
	slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
	reqs := []sluice.Request{{Key: "user-1", Limit: perUser, Cost: 1}, {Key: "ip-1", Limit: perIP, Cost: 1}, {Key: "user-9", Limit: slots, Cost: 1}}
	each := make([]sluice.Decision, 3)
	if d, err := s.AllowAll(ctx, reqs, sluice.AllOrNothing, each); err != nil || !d.Allowed {
		t.Fatalf("first: %+v, %v", d, err)
	}
	if err := s.Release(ctx, "user-9", slots, each[2].Ticket); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []sluice.Mode{sluice.AllOrNothing, sluice.RejectionsCount} {
		before := s.Stats().Compensations
		d, err := s.AllowAll(ctx, reqs, mode, each) // ip is spent: rejected
		if err != nil || d.Allowed || d.Limit.Name != "ip" {
			t.Fatalf("%v: %+v, %v; want rejected by ip", mode, d, err)
		}
		if s.Stats().Compensations == before {
			t.Fatalf("%v: nothing undone", mode)
		}
		if !each[2].Allowed || each[2].Ticket != 0 || each[2].Remaining != 1 {
			t.Fatalf("%v: the concurrency slot: %+v; want it free, no ticket", mode, each[2])
		}
	}
	// AllOrNothing undid user's spend, RejectionsCount kept it: 5 − 1 − 1.
	if d, _ := s.Allow(ctx, "user-1", perUser, 1); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("user after both: %+v; want 2 left", d)
	}
}
