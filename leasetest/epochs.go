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
// only the newest epoch of a partition is ever renewed. After each lapse
// (every tenth step, and at random) the member holding least takes all it
// can: every partition the others held then is taken over.
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
	takeovers := 0
	for step := range steps {
		m := members[rng.IntN(len(members))]
		switch x := rng.IntN(20); {
		case step%10 == 9 || x < 2: // every lease lapses; m takes what it can
			time.Sleep(ttl + Margin)
			m = leastHolder(rng, members, held)
			// What the others hold, except what m still names in Held
			// (from before one of them took it): the contract leaves
			// open whether a Sync acquires a partition its Held names.
			others := map[int]bool{}
			for _, o := range members {
				for _, gr := range held[o] {
					if o != m && gr.Epoch == newest[gr.Partition] && !slices.ContainsFunc(held[m], func(h lease.Grant) bool { return h.Partition == gr.Partition }) {
						others[gr.Partition] = true
					}
				}
			}
			req := lease.SyncRequest{Group: g, Member: m, Want: p, Held: held[m], Acquire: p}
			r := mustSync(t, c, req)
			for _, a := range r.Acquired {
				if others[a.Partition] {
					takeovers++
					delete(others, a.Partition)
					if !a.TakenOver {
						t.Errorf("step %d: %s took partition %d from a lapsed lease: TakenOver false", step, m, a.Partition)
					}
				}
			}
			if len(others) > 0 {
				t.Errorf("step %d: %s asked for all after every lease lapsed and did not get %v, whose holders lapsed", step, m, others)
			}
			held[m] = record(t, step, newest, req, r)
		case x < 12: // renew what m holds, and maybe acquire
			req := lease.SyncRequest{Group: g, Member: m, Want: p, Held: held[m], Acquire: rng.IntN(p + 1)}
			held[m] = record(t, step, newest, req, mustSync(t, c, req))
		case x < 17: // give one back, renew the rest
			if len(held[m]) == 0 {
				continue
			}
			i := rng.IntN(len(held[m]))
			rest := slices.Delete(slices.Clone(held[m]), i, i+1)
			req := lease.SyncRequest{Group: g, Member: m, Want: p, Held: rest, Release: held[m][i : i+1]}
			held[m] = record(t, step, newest, req, mustSync(t, c, req))
		default:
			mustLeave(t, c, g, m, held[m])
			held[m] = nil
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d steps, %d takeovers, epochs %v", steps, takeovers, newest)
	if takeovers == 0 {
		t.Errorf("%d steps took nothing over", steps)
	}
}

// leastHolder returns the member that holds fewest partitions (of those
// that hold fewest, one at random).
func leastHolder(rng *rand.Rand, members []string, held map[string][]lease.Grant) string {
	least := slices.MinFunc(members, func(a, b string) int { return len(held[a]) - len(held[b]) })
	var ties []string
	for _, m := range members {
		if len(held[m]) == len(held[least]) {
			ties = append(ties, m)
		}
	}
	return ties[rng.IntN(len(ties))]
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
