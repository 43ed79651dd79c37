package etcdlease

import (
	"context"
	"math"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The member keys are bound to an etcd lease so that etcd deletes the key
// of a member that stopped syncing without leaving: a reaper. It does not
// time the protocol's leases (the stamps in the keys do); it only has to
// outlive every live member's key by enough, and to end eventually.
//
// A Coordinator grants one reaper per TTL class and never keeps it alive:
// it grants a new one once a third of the old one's life is gone and binds
// the keys it writes from then on to the new one. A key written under a
// reaper therefore lives at least two thirds of the reaper's TTL, at least
// twice the group's TTL (reapTTL) — long past the stamp in it — and at
// most the reaper's TTL after its member's last Sync. That costs one
// LeaseGrant round trip per class every third of a reaper's TTL, where a
// KeepAlive would cost a stream or a round trip per Sync.

// minReapTTL is the shortest reaper, in seconds.
const minReapTTL = 60

// reapTTL is the TTL, in seconds, of the reaper of a group of ttl.
func reapTTL(ttl time.Duration) int64 {
	return max(minReapTTL, int64(math.Ceil(3*ttl.Seconds())))
}

// reapers are a Coordinator's reapers by TTL. Safe for concurrent use.
type reapers struct {
	mu    sync.Mutex
	byTTL map[int64]reaper // mu
}

type reaper struct {
	id      clientv3.LeaseID
	granted time.Time // on this process's monotonic clock, before the grant was sent
}

// get returns a reaper of ttl seconds with at least two thirds of its
// life ahead, granting one when it has none. Calls that find none at once
// each grant one; the last kept wins and the others expire unused.
func (r *reapers) get(ctx context.Context, kv client, ttl int64) (clientv3.LeaseID, error) {
	r.mu.Lock()
	cur, ok := r.byTTL[ttl]
	r.mu.Unlock()
	if ok && time.Since(cur.granted) < time.Duration(ttl)*time.Second/3 {
		return cur.id, nil
	}
	start := time.Now()
	resp, err := kv.Grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	if old, ok := r.byTTL[ttl]; !ok || old.granted.Before(start) {
		r.byTTL[ttl] = reaper{id: resp.ID, granted: start}
	}
	r.mu.Unlock()
	return resp.ID, nil
}

// forget drops id, which etcd no longer has.
func (r *reapers) forget(id clientv3.LeaseID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ttl, cur := range r.byTTL {
		if cur.id == id {
			delete(r.byTTL, ttl)
		}
	}
}
