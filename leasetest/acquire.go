package leasetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/lease"
)

// testAcquire: a member takes what it asks for and no more, a second one
// finds nothing free, and both are listed with their wants in the order
// of their IDs.
func testAcquire(t *testing.T, c lease.Coordinator) {
	const p = 8
	g := newGroup(p, LongTTL)
	// IDs in the reverse order of their arrival: the list is sorted, not
	// in the order members came.
	a, b := "zeta", "alpha"

	r1 := mustSync(t, c, lease.SyncRequest{Group: g, Member: a, Want: p, Acquire: 3})
	if len(r1.Acquired) != 3 {
		t.Fatalf("A acquires 3 of %d free: got %v", p, r1.Acquired)
	}
	checkPartitions(t, "A's first acquisition", r1.Acquired, p)
	checkRenewed(t, "A's first sync", r1, nil)
	checkWants(t, "A's first sync", r1, []int{p}, 0)

	held := grants(r1.Acquired)
	r2 := mustSync(t, c, lease.SyncRequest{Group: g, Member: a, Want: p, Held: held, Acquire: p})
	checkRenewed(t, "A renews its 3", r2, held)
	if len(r2.Acquired) != p-3 {
		t.Fatalf("A asks for %d more with %d free: got %v", p, p-3, r2.Acquired)
	}
	checkPartitions(t, "A's second acquisition", r2.Acquired, p)
	all := sorted(append(held, grants(r2.Acquired)...))
	for i, gr := range all {
		if gr.Partition != i {
			t.Fatalf("A's partitions after two acquisitions: %v, want each of 0 to %d once", all, p-1)
		}
	}

	rb := mustSync(t, c, lease.SyncRequest{Group: g, Member: b, Want: 2, Acquire: p})
	checkAcquiredNone(t, "B with every partition held by A", rb)
	checkWants(t, "B's sync", rb, []int{2, p}, 0)

	// A's renewal keeps every partition under its epoch; its new want
	// replaces the old one.
	r3 := mustSync(t, c, lease.SyncRequest{Group: g, Member: a, Want: 3, Held: all})
	checkRenewed(t, "A renews all", r3, all)
	checkWants(t, "A's third sync", r3, []int{2, 3}, 1)
}

// testExclusive: members acquiring at once never share a partition, and
// every partition goes to someone.
func testExclusive(t *testing.T, c lease.Coordinator) {
	const p, members, rounds = 8, 16, 20
	for round := range rounds {
		g := newGroup(p, LongTTL)
		replies := make([]lease.SyncReply, members)
		errs := make([]error, members)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range members {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
				defer cancel()
				<-start
				replies[i], errs[i] = c.Sync(ctx, lease.SyncRequest{Group: g, Member: memberID(i), Want: p, Acquire: p})
			})
		}
		close(start)
		wg.Wait()
		owner := map[int]string{}
		for i, r := range replies {
			if errs[i] != nil {
				t.Fatalf("round %d: %s: %v", round, memberID(i), errs[i])
			}
			checkPartitions(t, fmt.Sprintf("round %d: %s", round, memberID(i)), r.Acquired, p)
			for _, a := range r.Acquired {
				if o, ok := owner[a.Partition]; ok {
					t.Errorf("round %d: partition %d granted to %s and %s", round, a.Partition, o, memberID(i))
				}
				owner[a.Partition] = memberID(i)
			}
		}
		if len(owner) != p {
			t.Errorf("round %d: %d members asked for all %d free partitions at once; %d were granted", round, members, p, len(owner))
		}
		if round == rounds-1 {
			// Every member was recorded, although all wrote at once.
			r := mustSync(t, c, lease.SyncRequest{Group: g, Member: memberID(0), Want: 1})
			if len(r.Wants) != members {
				t.Errorf("after %d members synced at once: Wants %v, want %d entries", members, r.Wants, members)
			}
		}
	}
}

func memberID(i int) string { return fmt.Sprintf("m%02d", i) }

// testRelease: a partition given back goes to the next acquirer at once
// (TakenOver false) under a larger epoch; a release under another epoch
// gives nothing back.
func testRelease(t *testing.T, c lease.Coordinator) {
	const p, k = 4, 2
	g := newGroup(p, LongTTL)
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	held := grants(ra.Acquired)
	if len(held) != p {
		t.Fatalf("A acquires all %d: got %v", p, ra.Acquired)
	}
	rest := append(held[:k:k], held[k+1:]...)

	wrong := lease.Grant{Partition: k, Epoch: held[k].Epoch + 1}
	mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: rest, Release: []lease.Grant{wrong}})
	rb := mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Acquire: p})
	checkAcquiredNone(t, "B after A released partition "+fmt.Sprint(k)+" under a wrong epoch", rb)
	mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Release: []lease.Grant{held[k]}})
	rb = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Acquire: p})
	checkAcquiredNone(t, "B after releasing A's partition itself", rb)

	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: rest, Release: held[k : k+1]})
	checkRenewed(t, "A renews the rest as it releases one", r, rest)

	rb = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Acquire: p})
	if len(rb.Acquired) != 1 || rb.Acquired[0].Partition != k {
		t.Fatalf("B after A released %d: acquired %v, want partition %d alone", k, rb.Acquired, k)
	}
	got := rb.Acquired[0]
	if got.TakenOver {
		t.Errorf("B acquired partition %d given back by A: TakenOver true, want false", k)
	}
	if got.Epoch <= held[k].Epoch {
		t.Errorf("B acquired partition %d under epoch %d, not above A's %d", k, got.Epoch, held[k].Epoch)
	}

	r = mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: held})
	checkRenewed(t, "A renews all, the released one among them", r, rest)
}

// testLeave: Leave forgets the member at once and gives its partitions
// back; leaving again is harmless.
func testLeave(t *testing.T, c lease.Coordinator) {
	const p = 4
	g := newGroup(p, LongTTL)
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	held := grants(ra.Acquired)
	if len(held) != p {
		t.Fatalf("A acquires all %d: got %v", p, ra.Acquired)
	}
	rb := mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1})
	checkWants(t, "B's first sync", rb, []int{p, 1}, 1)

	mustLeave(t, c, g, "a", held)
	rb = mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Acquire: p})
	checkWants(t, "B after A left", rb, []int{1}, 0)
	if len(rb.Acquired) != p {
		t.Fatalf("B after A left with all %d: acquired %v", p, rb.Acquired)
	}
	byPartition := map[int]uint64{}
	for _, gr := range held {
		byPartition[gr.Partition] = gr.Epoch
	}
	for _, a := range rb.Acquired {
		if a.TakenOver {
			t.Errorf("B acquired partition %d that A gave back as it left: TakenOver true", a.Partition)
		}
		if a.Epoch <= byPartition[a.Partition] {
			t.Errorf("B acquired partition %d under epoch %d, not above A's %d", a.Partition, a.Epoch, byPartition[a.Partition])
		}
	}
	mustLeave(t, c, g, "a", held)
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: 2, Held: held})
	checkRenewed(t, "A renews after leaving", r, nil)
	checkWants(t, "A back after leaving", r, []int{2, 1}, 0)
}

// testGroups: the same member and partitions in two groups (one's name a
// prefix of the other's) are independent.
func testGroups(t *testing.T, c lease.Coordinator) {
	const p = 4
	base := newGroup(p, LongTTL)
	groups := []lease.Group{base, base, base}
	groups[1].Name += "/m"
	groups[2].Name += "/p/0"
	held := make([][]lease.Grant, len(groups))
	for i, g := range groups {
		r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "m", Want: p, Acquire: p})
		if len(r.Acquired) != p {
			t.Fatalf("group %s: m acquires all %d: got %v", g.Name, p, r.Acquired)
		}
		checkWants(t, "group "+g.Name, r, []int{p}, 0)
		held[i] = grants(r.Acquired)
	}
	rn := mustSync(t, c, lease.SyncRequest{Group: groups[1], Member: "n", Want: 1, Acquire: p})
	checkAcquiredNone(t, "n in "+groups[1].Name, rn)
	checkWants(t, "n in "+groups[1].Name, rn, []int{p, 1}, 1)

	// Giving back in one group frees nothing in the others.
	mustSync(t, c, lease.SyncRequest{Group: groups[0], Member: "m", Want: p, Held: held[0][1:], Release: held[0][:1]})
	rn = mustSync(t, c, lease.SyncRequest{Group: groups[1], Member: "n", Want: 1, Acquire: p})
	checkAcquiredNone(t, "n in "+groups[1].Name+" after m released in "+groups[0].Name, rn)
	for i, g := range groups {
		r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "m", Want: p, Held: held[i]})
		want := held[i]
		if i == 0 {
			want = held[0][1:]
		}
		checkRenewed(t, "m in "+g.Name, r, want)
		wants := []int{p}
		if i == 1 {
			wants = []int{p, 1}
		}
		checkWants(t, "m in "+g.Name, r, wants, 0)
	}
}
