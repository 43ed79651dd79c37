package leasetest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// testRenew: a renewal keeps a partition under its epoch; one under
// another epoch, or by another member, renews nothing and leaves the
// holder's lease alone.
func testRenew(t *testing.T, c lease.Coordinator) {
	const p = 4
	g := newGroup(p, LongTTL)
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	held := grants(ra.Acquired)
	if len(held) != p {
		t.Fatalf("A acquires all %d: got %v", p, ra.Acquired)
	}
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: held})
	checkRenewed(t, "A renews all", r, held)
	checkAcquiredNone(t, "A renews all", r)

	wrong := make([]lease.Grant, p)
	for i, gr := range held {
		wrong[i] = lease.Grant{Partition: gr.Partition, Epoch: gr.Epoch + 1}
	}
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: wrong})
	checkRenewed(t, "A renews under epochs it was not granted", r, nil)
	mixed := []lease.Grant{held[0], wrong[1]}
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: mixed})
	checkRenewed(t, "A renews one right and one wrong epoch", r, held[:1])
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Held: held, Acquire: p})
	checkRenewed(t, "B renews A's grants", r, nil)
	checkAcquiredNone(t, "B renews A's grants and asks for more", r)

	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: held})
	checkRenewed(t, "A renews all after the others' attempts", r, held)
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Acquire: p})
	checkAcquiredNone(t, "B after A's renewal", r)
}

// testRenewExtends: renewing every TTL/4 keeps a partition well past its
// first TTL.
func testRenewExtends(t *testing.T, c lease.Coordinator) {
	const p = 2
	ttl := ShortTTL + 100*time.Millisecond
	g := newGroup(p, ttl)
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	held := grants(ra.Acquired)
	if len(held) != p {
		t.Fatalf("A acquires all %d: got %v", p, ra.Acquired)
	}
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); {
		time.Sleep(ttl / 4)
		r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: held})
		checkRenewed(t, "A renews", r, held)
	}
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Acquire: p})
	checkAcquiredNone(t, "B after A renewed for 3 TTLs", r)
}

// testStaleRenewDoesNotExtend: renewals under a wrong epoch or by another
// member do not keep a lease alive: it lapses as if no one had renewed.
func testStaleRenewDoesNotExtend(t *testing.T, c lease.Coordinator) {
	const p = 2
	g := newGroup(p, ShortTTL)
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	held := grants(ra.Acquired)
	if len(held) != p {
		t.Fatalf("A acquires all %d: got %v", p, ra.Acquired)
	}
	wrong := make([]lease.Grant, p)
	for i, gr := range held {
		wrong[i] = lease.Grant{Partition: gr.Partition, Epoch: gr.Epoch + 1}
	}
	for end := time.Now().Add(ShortTTL + Margin); time.Now().Before(end); time.Sleep(ShortTTL / 6) {
		r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: wrong})
		checkRenewed(t, "A renews under wrong epochs", r, nil)
		r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: p, Held: held})
		checkRenewed(t, "B renews A's grants", r, nil)
	}
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "c", Want: p, Acquire: p})
	if len(r.Acquired) != p {
		t.Fatalf("C a TTL after A's last valid renewal: acquired %v, want all %d", r.Acquired, p)
	}
	for _, a := range r.Acquired {
		if !a.TakenOver {
			t.Errorf("C took partition %d from A's lapsed lease: TakenOver false", a.Partition)
		}
	}
}

// testTakeover: a lease not renewed for its TTL goes to the next acquirer
// as a takeover under a larger epoch, and its old holder can no longer
// renew it.
func testTakeover(t *testing.T, c lease.Coordinator) {
	const p = 2
	g := newGroup(p, ShortTTL)
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	held := grants(ra.Acquired)
	if len(held) != p {
		t.Fatalf("A acquires all %d: got %v", p, ra.Acquired)
	}
	lapse(ShortTTL)
	rb := mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: p, Acquire: p})
	if len(rb.Acquired) != p {
		t.Fatalf("B after A's leases lapsed: acquired %v, want all %d", rb.Acquired, p)
	}
	old := map[int]uint64{}
	for _, gr := range held {
		old[gr.Partition] = gr.Epoch
	}
	for _, a := range rb.Acquired {
		if !a.TakenOver {
			t.Errorf("B took partition %d from A's lapsed lease: TakenOver false", a.Partition)
		}
		if a.Epoch <= old[a.Partition] {
			t.Errorf("B took partition %d under epoch %d, not above A's %d", a.Partition, a.Epoch, old[a.Partition])
		}
	}
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: held})
	checkRenewed(t, "A renews after B took its partitions", r, nil)
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: p, Held: grants(rb.Acquired)})
	checkRenewed(t, "B renews what it took", r, grants(rb.Acquired))
}

// testSelfReclaim: a holder whose lease lapsed, and whose partitions no
// one took meanwhile, renews them under the same epochs.
func testSelfReclaim(t *testing.T, c lease.Coordinator) {
	const p = 2
	g := newGroup(p, ShortTTL)
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	held := grants(ra.Acquired)
	if len(held) != p {
		t.Fatalf("A acquires all %d: got %v", p, ra.Acquired)
	}
	lapse(ShortTTL)
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: held})
	checkRenewed(t, "A renews after its leases lapsed untaken", r, held)
	rb := mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Acquire: p})
	checkAcquiredNone(t, "B after A renewed its lapsed leases", rb)
}

// testMemberLapse: a member that stops syncing leaves the list a TTL
// later; one that syncs again is back.
func testMemberLapse(t *testing.T, c lease.Coordinator) {
	g := newGroup(4, ShortTTL)
	mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 1})
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 2})
	checkWants(t, "B with A alive", r, []int{1, 2}, 1)
	for end := time.Now().Add(ShortTTL + Margin); time.Now().Before(end); time.Sleep(ShortTTL / 4) {
		mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 2})
	}
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 3})
	checkWants(t, "B a TTL after A's last sync", r, []int{3}, 0)
	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 1})
	checkWants(t, "A back", r, []int{1, 3}, 0)
}
