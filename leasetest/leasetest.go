// Package leasetest is the conformance suite of [lease.Coordinator]: every
// implementation (redislease, etcdlease, memlease) runs Run unchanged, as
// River's drivers run riverdrivertest.
//
// The cases: acquisition up to what is asked and free; 16 members
// acquiring at once, 20 times, never sharing a partition; renewal under
// the acquisition's epoch only, by its holder only, and keeping the lease
// alive; release, Leave and lapse handing partitions on under larger
// epochs, TakenOver exactly for lapses; a holder re-claiming its lapsed
// lease no one took; a random walk of syncs, releases, leaves and lapses
// by three members checking that epochs only grow and only the newest is
// renewed; members leaving the list a TTL after their last Sync or at
// once on Leave; groups that share a prefix kept apart; every invalid
// request refused with lease.ErrInvalid and without effect; a cancelled
// context refused.
//
// The suite keeps real time, because leases lapse on the Coordinator's
// clock (a server's, or the caller's wall clock): the cases that wait for
// a lapse use TTLs of 200 to 400 ms and wait TTL + 150 ms before they
// look, and no case bounds how long a call takes tighter than several
// TTLs. The cases that must not see a lapse use a TTL of 10 s, so that a
// slow machine cannot make them fail.
//
// Each case uses groups of its own, named "lt-" and random hex, so runs
// against a shared server never collide and need no cleanup; the cases
// run in parallel.
//
// What the suite leaves open, because the contract does:
//   - whether the first acquisition of a partition in a brand-new group is
//     TakenOver. A Coordinator that cannot tell a new group from one whose
//     state it lost (etcdlease after a data loss, redislease after a
//     restart without persistence) reports true, the safe answer; one that
//     can may report false. Partitions given back by Release or Leave must
//     be acquired with TakenOver false, and partitions whose holder's
//     lease lapsed with TakenOver true.
//   - whether a Sync may acquire a partition that its own Held or Release
//     names (etcdlease does not).
//   - the order of Renewed and Acquired.
//   - whether a Sync that races others acquires all that was free when it
//     began: uncontended, it must acquire min(Acquire, free).
//
// What it asks beyond the letter of the contract: Leave of a member that
// already left is no error.
package leasetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// Timing of the cases that wait for leases to lapse.
const (
	// ShortTTL is the TTL of the groups whose leases the suite lets lapse.
	ShortTTL = 300 * time.Millisecond
	// Margin is how long after a lease's TTL the suite looks at it.
	Margin = 150 * time.Millisecond
	// LongTTL is the TTL of the groups whose leases must not lapse while
	// a case runs.
	LongTTL = 10 * time.Second
)

// Run runs the conformance suite against the Coordinators newCoordinator
// returns. Each case calls newCoordinator once, from its own goroutine,
// and drives every member through the Coordinator it got (a Coordinator
// is safe for concurrent use); newCoordinator registers its own cleanup
// (t.Cleanup) and fails t when it cannot make one.
func Run(t *testing.T, newCoordinator func(t *testing.T) lease.Coordinator) {
	t.Helper()
	cases := []struct {
		name string
		run  func(*testing.T, lease.Coordinator)
	}{
		{"Acquire", testAcquire},
		{"Exclusive", testExclusive},
		{"Renew", testRenew},
		{"RenewExtends", testRenewExtends},
		{"StaleRenewDoesNotExtend", testStaleRenewDoesNotExtend},
		{"Release", testRelease},
		{"Takeover", testTakeover},
		{"SelfReclaim", testSelfReclaim},
		{"Epochs", testEpochs},
		{"MemberLapse", testMemberLapse},
		{"Leave", testLeave},
		{"Groups", testGroups},
		{"BadInput", testBadInput},
		{"Cancelled", testCancelled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newCoordinator(t))
		})
	}
}

// newGroup returns a group no other test uses.
func newGroup(p int, ttl time.Duration) lease.Group {
	return lease.Group{Name: groupName(), Partitions: p, TTL: ttl}
}

func groupName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "lt-" + hex.EncodeToString(b[:])
}

// callTimeout bounds one call: several TTLs, so that only a Coordinator
// that hangs fails on it.
const callTimeout = 10 * time.Second

// mustSync runs one Sync and fails t on an error.
func mustSync(t *testing.T, c lease.Coordinator, req lease.SyncRequest) lease.SyncReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	r, err := c.Sync(ctx, req)
	if err != nil {
		t.Fatalf("Sync(%s): %v", describe(req), err)
	}
	return r
}

// mustLeave runs one Leave and fails t on an error.
func mustLeave(t *testing.T, c lease.Coordinator, g lease.Group, member string, held []lease.Grant) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := c.Leave(ctx, g, member, held); err != nil {
		t.Fatalf("Leave(%s, %v): %v", member, held, err)
	}
}

func describe(r lease.SyncRequest) string {
	return fmt.Sprintf("%s want %d held %v release %v acquire %d", r.Member, r.Want, r.Held, r.Release, r.Acquire)
}

// grants returns the grants of acquired partitions, sorted by partition.
func grants(acquired []lease.Acquired) []lease.Grant {
	out := make([]lease.Grant, 0, len(acquired))
	for _, a := range acquired {
		out = append(out, a.Grant)
	}
	return sorted(out)
}

// sorted returns a copy of gs sorted by partition (the contract orders
// neither Renewed nor Acquired).
func sorted(gs []lease.Grant) []lease.Grant {
	out := slices.Clone(gs)
	slices.SortFunc(out, func(a, b lease.Grant) int { return a.Partition - b.Partition })
	if out == nil {
		out = []lease.Grant{}
	}
	return out
}

// checkRenewed fails t unless the reply renewed exactly want.
func checkRenewed(t *testing.T, what string, r lease.SyncReply, want []lease.Grant) {
	t.Helper()
	if got, want := sorted(r.Renewed), sorted(want); !slices.Equal(got, want) {
		t.Errorf("%s: Renewed %v, want %v", what, got, want)
	}
}

// checkAcquiredNone fails t if the reply acquired anything.
func checkAcquiredNone(t *testing.T, what string, r lease.SyncReply) {
	t.Helper()
	if len(r.Acquired) != 0 {
		t.Errorf("%s: Acquired %v, want none", what, r.Acquired)
	}
}

// checkWants fails t unless the reply lists exactly these wants, in the
// order of the members' IDs, with the caller at self.
func checkWants(t *testing.T, what string, r lease.SyncReply, wants []int, self int) {
	t.Helper()
	if !slices.Equal(r.Wants, wants) || r.Self != self {
		t.Errorf("%s: Wants %v Self %d, want %v Self %d", what, r.Wants, r.Self, wants, self)
	}
}

// checkPartitions fails t unless the acquired partitions are distinct, in
// [0, p) and under nonzero epochs.
func checkPartitions(t *testing.T, what string, acquired []lease.Acquired, p int) {
	t.Helper()
	seen := map[int]bool{}
	for _, a := range acquired {
		if a.Partition < 0 || a.Partition >= p {
			t.Errorf("%s: acquired partition %d, outside [0, %d)", what, a.Partition, p)
		}
		if seen[a.Partition] {
			t.Errorf("%s: acquired partition %d twice in one reply", what, a.Partition)
		}
		seen[a.Partition] = true
		if a.Epoch == 0 {
			t.Errorf("%s: partition %d acquired under epoch 0", what, a.Partition)
		}
	}
}

// lapse waits until every lease of a group of ttl granted or renewed
// before the call has lapsed, with Margin to spare.
func lapse(ttl time.Duration) { time.Sleep(ttl + Margin) }
