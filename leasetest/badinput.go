package leasetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// testBadInput: every invalid request is refused with an error wrapping
// lease.ErrInvalid and changes nothing — neither the member list nor what
// is held.
func testBadInput(t *testing.T, c lease.Coordinator) {
	const p = 4
	g := newGroup(p, LongTTL)
	ra := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Acquire: p})
	held := grants(ra.Acquired)
	if len(held) != p {
		t.Fatalf("A acquires all %d: got %v", p, ra.Acquired)
	}

	// Each request is A's giving everything back with a new want, broken
	// in one field: accepted, it would show in A's want or free A's
	// partitions.
	cases := []struct {
		name   string
		mutate func(r *lease.SyncRequest)
	}{
		{"empty member", func(r *lease.SyncRequest) { r.Member = "" }},
		{"member too long", func(r *lease.SyncRequest) { r.Member = strings.Repeat("a", lease.MaxMemberLen+1) }},
		{"member with a space", func(r *lease.SyncRequest) { r.Member = "a b" }},
		{"empty group name", func(r *lease.SyncRequest) { r.Group.Name = "" }},
		{"group name too long", func(r *lease.SyncRequest) { r.Group.Name = strings.Repeat("g", 129) }},
		{"group name with a space", func(r *lease.SyncRequest) { r.Group.Name += " x" }},
		{"group name with a brace", func(r *lease.SyncRequest) { r.Group.Name += "{x}" }},
		{"no partitions", func(r *lease.SyncRequest) { r.Group.Partitions = 0 }},
		{"negative partitions", func(r *lease.SyncRequest) { r.Group.Partitions = -1 }},
		{"partitions over MaxPartitions", func(r *lease.SyncRequest) { r.Group.Partitions = lease.MaxPartitions + 1 }},
		{"zero TTL", func(r *lease.SyncRequest) { r.Group.TTL = 0 }},
		{"TTL below MinTTL", func(r *lease.SyncRequest) { r.Group.TTL = lease.MinTTL - time.Millisecond }},
		{"TTL not whole milliseconds", func(r *lease.SyncRequest) { r.Group.TTL += time.Microsecond }},
		{"negative want", func(r *lease.SyncRequest) { r.Want = -1 }},
		{"want over P", func(r *lease.SyncRequest) { r.Want = p + 1 }},
		{"negative acquire", func(r *lease.SyncRequest) { r.Acquire = -1 }},
		{"acquire over P", func(r *lease.SyncRequest) { r.Acquire = p + 1 }},
		{"held partition negative", func(r *lease.SyncRequest) { r.Held = []lease.Grant{{Partition: -1, Epoch: 1}} }},
		{"held partition P", func(r *lease.SyncRequest) { r.Held = []lease.Grant{{Partition: p, Epoch: 1}} }},
		{"released partition P", func(r *lease.SyncRequest) { r.Release = append(r.Release, lease.Grant{Partition: p, Epoch: 1}) }},
		{"released partition named twice", func(r *lease.SyncRequest) { r.Release = append(r.Release, r.Release[0]) }},
		{"partition held and released", func(r *lease.SyncRequest) { r.Held = r.Release[:1] }},
	}
	for _, bc := range cases {
		req := lease.SyncRequest{Group: g, Member: "a", Want: 1, Release: append([]lease.Grant(nil), held...), Acquire: 1}
		bc.mutate(&req)
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		_, err := c.Sync(ctx, req)
		cancel()
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Sync with %s: error %v, want one wrapping lease.ErrInvalid", bc.name, err)
		}
	}

	leaves := []struct {
		name   string
		g      lease.Group
		member string
		held   []lease.Grant
	}{
		{"empty member", g, "", held},
		{"bad group name", lease.Group{Name: g.Name + " x", Partitions: p, TTL: g.TTL}, "a", held},
		{"no partitions", lease.Group{Name: g.Name, TTL: g.TTL}, "a", held},
		{"TTL below MinTTL", lease.Group{Name: g.Name, Partitions: p, TTL: time.Millisecond}, "a", held},
		{"partition P", g, "a", append(append([]lease.Grant(nil), held...), lease.Grant{Partition: p, Epoch: 1})},
		{"partition named twice", g, "a", append(append([]lease.Grant(nil), held...), held[0])},
	}
	for _, lc := range leaves {
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		err := c.Leave(ctx, lc.g, lc.member, lc.held)
		cancel()
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Leave with %s: error %v, want one wrapping lease.ErrInvalid", lc.name, err)
		}
	}

	// Nothing changed: A is still listed with its want, still holds every
	// partition, and no other member was recorded.
	rb := mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 1, Acquire: p})
	checkAcquiredNone(t, "B after the refused requests", rb)
	checkWants(t, "B after the refused requests", rb, []int{p, 1}, 1)
	r := mustSync(t, c, lease.SyncRequest{Group: g, Member: "a", Want: p, Held: held})
	checkRenewed(t, "A after the refused requests", r, held)
}

// testCancelled: a call whose context is already cancelled fails.
func testCancelled(t *testing.T, c lease.Coordinator) {
	g := newGroup(2, LongTTL)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if r, err := c.Sync(ctx, lease.SyncRequest{Group: g, Member: "a", Want: 2, Acquire: 2}); err == nil {
		t.Errorf("Sync with a cancelled context: no error, reply %+v", r)
	}
	if err := c.Leave(ctx, g, "a", nil); err == nil {
		t.Errorf("Leave with a cancelled context: no error")
	}
	// The Coordinator still works.
	mustSync(t, c, lease.SyncRequest{Group: g, Member: "b", Want: 2, Acquire: 2})
}
