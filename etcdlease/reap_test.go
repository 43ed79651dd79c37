package etcdlease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// grants is a client that only grants leases, numbered from 1.
type grants struct {
	client
	n   clientv3.LeaseID
	ttl []int64
	err error
}

func (g *grants) Grant(_ context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	if g.err != nil {
		return nil, g.err
	}
	g.n++
	g.ttl = append(g.ttl, ttl)
	return &clientv3.LeaseGrantResponse{ID: g.n, TTL: ttl}, nil
}

// TestReapersRotate: a reaper is granted on first use, kept for a third
// of its TTL, replaced after, kept apart per TTL and forgotten on demand.
func TestReapersRotate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &grants{}
		r := reapers{byTTL: map[int64]reaper{}}
		get := func(ttl int64) clientv3.LeaseID {
			t.Helper()
			id, err := r.get(t.Context(), kv, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		steps := []struct {
			after time.Duration
			ttl   int64
			want  clientv3.LeaseID
		}{
			{0, 60, 1},                // granted on first use
			{19 * time.Second, 60, 1}, // kept for a third of 60 s
			{0, 90, 2},                // another TTL, another reaper
			{time.Second, 60, 3},      // 20 s: replaced
			{19 * time.Second, 60, 3},
			{0, 90, 2}, // 20 s of 90: kept
			{10 * time.Second, 90, 4},
		}
		for i, s := range steps {
			time.Sleep(s.after)
			if got := get(s.ttl); got != s.want {
				t.Fatalf("step %d (%v later, ttl %d): lease %d, want %d", i, s.after, s.ttl, got, s.want)
			}
		}
		r.forget(3)
		if got := get(60); got != 5 {
			t.Fatalf("after forgetting lease 3: lease %d, want a new one, 5", got)
		}
		kv.err = errors.New("etcd down")
		r.forget(5)
		if _, err := r.get(t.Context(), kv, 60); !errors.Is(err, kv.err) {
			t.Fatalf("grant failing: error %v, want %v", err, kv.err)
		}
	})
}

func TestReapTTL(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want int64
	}{
		{50 * time.Millisecond, 60},
		{20 * time.Second, 60},
		{20*time.Second + time.Millisecond, 61},
		{time.Minute, 180},
	} {
		if got := reapTTL(c.ttl); got != c.want {
			t.Errorf("reapTTL(%v) = %d s, want %d", c.ttl, got, c.want)
		}
	}
}
