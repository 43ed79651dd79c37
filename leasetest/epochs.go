package leasetest

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// testEpochs walks a random sequence of syncs, releases, leaves and lapses
// by three members and checks the fencing invariant: every acquisition of
// a partition is under an epoch larger than any the partition had, and
// only the newest epoch of a partition is ever renewed.
//
// The walk is a seeded random sequence rather than a rapid property: each
// lapse sleeps in real time, and rapid's number of checks (100 unless a
// flag says otherwise, for every test of the binary) and its shrinking
// would make the case take minutes. A failure logs the seed.
func testEpochs(t *testing.T, c lease.Coordinator) {
	const p, steps = 3, 50
	ttl := lease.MinTTL * 4
	g := newGroup(p, ttl)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the walk's seed: %d", seed)
		}
	})

	members := []string{"a", "b", "c"}
	held := map[string][]lease.Grant{}
	newest := map[int]uint64{}
	for step := range steps {
		m := members[rng.IntN(len(members))]
		switch x := rng.IntN(20); {
		case x < 11: // renew what m holds, and maybe acquire
			req := lease.SyncRequest{Group: g, Member: m, Want: p, Held: held[m], Acquire: rng.IntN(p + 1)}
			held[m] = record(t, step, newest, req, mustSync(t, c, req))
		case x < 15: // give one back, renew the rest
			if len(held[m]) == 0 {
				continue
			}
			i := rng.IntN(len(held[m]))
			rest := slices.Delete(slices.Clone(held[m]), i, i+1)
			req := lease.SyncRequest{Group: g, Member: m, Want: p, Held: rest, Release: held[m][i : i+1]}
			held[m] = record(t, step, newest, req, mustSync(t, c, req))
		case x < 17:
			mustLeave(t, c, g, m, held[m])
			held[m] = nil
		default: // every lease lapses
			time.Sleep(ttl + Margin)
		}
		if t.Failed() {
			return
		}
	}
	if len(newest) == 0 {
		t.Errorf("%d steps acquired nothing", steps)
	}
}

// record checks a reply of the walk against the newest epochs issued and
// returns what the member holds after it.
func record(t *testing.T, step int, newest map[int]uint64, req lease.SyncRequest, r lease.SyncReply) []lease.Grant {
	t.Helper()
	for _, gr := range r.Renewed {
		if !slices.Contains(req.Held, gr) {
			t.Errorf("step %d: %s renewed %v, which it did not name in %v", step, req.Member, gr, req.Held)
		}
		if gr.Epoch != newest[gr.Partition] {
			t.Errorf("step %d: %s renewed partition %d under epoch %d, but %d was issued since", step, req.Member, gr.Partition, gr.Epoch, newest[gr.Partition])
		}
	}
	for _, a := range r.Acquired {
		if a.Epoch <= newest[a.Partition] {
			t.Errorf("step %d: %s acquired partition %d under epoch %d, not above %d issued before", step, req.Member, a.Partition, a.Epoch, newest[a.Partition])
		}
		newest[a.Partition] = a.Epoch
	}
	return sorted(append(slices.Clone(r.Renewed), grants(r.Acquired)...))
}
