package etcdlease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/etcdlease"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/leasetest"
)

func TestConformance(t *testing.T) {
	s := sharedServer(t)
	leasetest.Run(t, func(t *testing.T) lease.Coordinator {
		return newCoordinator(t, newClient(t, s), etcdlease.Options{})
	})
}

func newCoordinator(t *testing.T, cli *clientv3.Client, o etcdlease.Options) *etcdlease.Coordinator {
	t.Helper()
	o.Client = cli
	c, err := etcdlease.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func groupName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "etcdlease-" + hex.EncodeToString(b[:])
}

func mustSync(t *testing.T, c lease.Coordinator, req lease.SyncRequest) lease.SyncReply {
	t.Helper()
	r, err := c.Sync(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewRefusesBadOptions(t *testing.T) {
	// A client that is never used: New does not contact etcd.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, c := range []struct {
		name string
		o    etcdlease.Options
	}{
		{"no client", etcdlease.Options{}},
		{"prefix ending in /", etcdlease.Options{Client: cli, Prefix: "sluice/"}},
		{"negative timeout", etcdlease.Options{Client: cli, Timeout: -time.Second}},
	} {
		if _, err := etcdlease.New(c.o); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New with %s: error %v, want one wrapping lease.ErrInvalid", c.name, err)
		}
	}
	if _, err := etcdlease.New(etcdlease.Options{Client: cli}); err != nil {
		t.Errorf("New with a client alone: %v", err)
	}
}

// TestKeys checks the layout the package documents: operators read it
// with etcdctl.
func TestKeys(t *testing.T) {
	s := sharedServer(t)
	cli := newClient(t, s)
	c := newCoordinator(t, cli, etcdlease.Options{Prefix: "keys-test"})
	g := lease.Group{Name: groupName(), Partitions: 2, TTL: 10 * time.Second}
	before := time.Now()
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 2, Acquire: 1})
	if len(r.Acquired) != 1 {
		t.Fatalf("acquired %v, want one partition", r.Acquired)
	}
	a := r.Acquired[0]
	base := "keys-test/" + g.Name + "/@"

	get := func(key string) *clientv3.GetResponse {
		t.Helper()
		resp, err := cli.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("key %s: %d found, want 1", key, len(resp.Kvs))
		}
		return resp
	}
	p := base + "p/" + strconv.Itoa(a.Partition) + "/"
	if h := get(p + "holder").Kvs[0]; string(h.Value) != "a" || uint64(h.ModRevision) != a.Epoch {
		t.Errorf("%sholder: %q at revision %d, want \"a\" at the epoch %d", p, h.Value, h.ModRevision, a.Epoch)
	}
	until, err := strconv.ParseInt(string(get(p + "until").Kvs[0].Value), 10, 64)
	if lo, hi := before.Add(g.TTL).UnixMilli(), time.Now().Add(g.TTL).UnixMilli(); err != nil || until < lo || until > hi {
		t.Errorf("%suntil: %d (%v), want Unix milliseconds between %d and %d", p, until, err, lo, hi)
	}
	m := get(base + "m/a").Kvs[0]
	if u, w, _ := strings.Cut(string(m.Value), " "); u != strconv.FormatInt(until, 10) || w != "2" {
		t.Errorf("%sm/a: %q, want \"%d 2\"", base, m.Value, until)
	}
	ttl, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(m.Lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL < 60 {
		t.Errorf("the member key's etcd lease: granted for %d s, want at least 60", ttl.GrantedTTL)
	}

	// Given back: the holder and until keys go, the given key comes.
	mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 2, Release: []lease.Grant{a.Grant}})
	for _, k := range []string{"holder", "until"} {
		if resp, err := cli.Get(t.Context(), p+k); err != nil || len(resp.Kvs) != 0 {
			t.Errorf("%s%s after the release: %v, %v", p, k, resp, err)
		}
	}
	get(p + "given")
}

// TestMaxPartitions: a group of lease.MaxPartitions fits etcd's bound on
// the operations of a transaction (128 by default).
func TestMaxPartitions(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := newCoordinator(t, newClient(t, s), etcdlease.Options{Timeout: 10 * time.Second})
	const p = lease.MaxPartitions
	g := lease.Group{Name: groupName(), Partitions: p, TTL: 10 * time.Second}
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	if len(r.Acquired) != p {
		t.Fatalf("acquired %d of %d", len(r.Acquired), p)
	}
	held := make([]lease.Grant, 0, p)
	for _, a := range r.Acquired {
		held = append(held, a.Grant)
	}
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: held})
	if len(r.Renewed) != p {
		t.Fatalf("renewed %d of %d", len(r.Renewed), p)
	}
	if err := c.Leave(t.Context(), g, "a", held); err != nil {
		t.Fatal(err)
	}
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: p, Acquire: p})
	if len(r.Acquired) != p || slices.ContainsFunc(r.Acquired, func(a lease.Acquired) bool { return a.TakenOver }) {
		t.Fatalf("after A left: acquired %d of %d, want all given back", len(r.Acquired), p)
	}
}

// TestClockAhead: leases are judged on the caller's clock (Options.Now),
// so a member whose clock runs a TTL ahead takes over early — the
// documented cost of etcd's lack of a clock, which the Holder's
// quarantine of takeovers makes safe.
func TestClockAhead(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	cli := newClient(t, s)
	c := newCoordinator(t, cli, etcdlease.Options{})
	ahead := newCoordinator(t, cli, etcdlease.Options{Now: func() time.Time { return time.Now().Add(time.Minute) }})
	g := lease.Group{Name: groupName(), Partitions: 2, TTL: 10 * time.Second}
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 2, Acquire: 2})
	if len(ra.Acquired) != 2 {
		t.Fatalf("A acquired %v", ra.Acquired)
	}
	rb := mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 2, Acquire: 2})
	if len(rb.Acquired) != 0 {
		t.Fatalf("B on the same clock as A acquired %v", rb.Acquired)
	}
	rb = mustSync(t, ahead, lease.SyncRequest{Group: g, Member: "b", Want: 2, Acquire: 2})
	if len(rb.Acquired) != 2 || !rb.Acquired[0].TakenOver || !rb.Acquired[1].TakenOver {
		t.Fatalf("B a minute ahead: acquired %v, want both taken over", rb.Acquired)
	}
	if !slices.Equal(rb.Wants, []int{2}) || rb.Self != 0 {
		t.Errorf("B a minute ahead: Wants %v Self %d, want A lapsed", rb.Wants, rb.Self)
	}
}

// TestOutage kills etcd: calls fail within the Timeout, and succeed again
// once etcd is back, with what it held before.
func TestOutage(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	const timeout = 500 * time.Millisecond
	c := newCoordinator(t, newClient(t, s), etcdlease.Options{Timeout: timeout})
	g := lease.Group{Name: groupName(), Partitions: 2, TTL: 30 * time.Second}
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 2, Acquire: 1})
	if len(r.Acquired) != 1 {
		t.Fatalf("acquired %v, want one partition", r.Acquired)
	}
	held := []lease.Grant{r.Acquired[0].Grant}

	s.kill()
	bound := timeout + time.Second
	errorWithin(t, "a renewal", bound, func(ctx context.Context) error {
		_, err := c.Sync(ctx, lease.SyncRequest{Group: g, Member: "a", Want: 2, Held: held})
		return err
	})
	errorWithin(t, "an acquisition", bound, func(ctx context.Context) error {
		_, err := c.Sync(ctx, lease.SyncRequest{Group: g, Member: "a", Want: 2, Held: held, Acquire: 1})
		return err
	})
	errorWithin(t, "a leave", bound, func(ctx context.Context) error {
		return c.Leave(ctx, g, "b", nil)
	})

	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	// The client reconnects on its own, after its backoff.
	var err error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if r, err = c.Sync(t.Context(), lease.SyncRequest{Group: g, Member: "a", Want: 2, Held: held, Acquire: 1}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("etcd back for 30 s: %v", err)
	}
	if !slices.Equal(r.Renewed, held) {
		t.Errorf("after the restart: renewed %v, want %v (etcd keeps its data)", r.Renewed, held)
	}
	if len(r.Acquired) != 1 || r.Acquired[0].Epoch <= held[0].Epoch {
		t.Errorf("after the restart: acquired %v, want the other partition under a larger epoch than %d", r.Acquired, held[0].Epoch)
	}
}

// TestReaperLost: when etcd no longer has the etcd lease the member keys
// are bound to (revoked here; a wiped cluster alike), one Sync fails and
// the next grants another.
func TestReaperLost(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	cli := newClient(t, s)
	c := newCoordinator(t, cli, etcdlease.Options{Prefix: "reaper-test"})
	g := lease.Group{Name: groupName(), Partitions: 2, TTL: 10 * time.Second}
	mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 1})
	resp, err := cli.Get(t.Context(), "reaper-test/"+g.Name+"/@m/a")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the member key: %v, %v", resp, err)
	}
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sync(t.Context(), lease.SyncRequest{Group: g, Member: "a", Want: 1, Acquire: 1}); err == nil {
		t.Fatal("Sync with the member keys' etcd lease revoked: no error")
	}
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 1, Acquire: 1})
	if len(r.Acquired) != 1 {
		t.Errorf("the Sync after: acquired %v, want one partition (the failed Sync applied nothing)", r.Acquired)
	}
}
