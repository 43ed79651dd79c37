package redisscript

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"

	"github.com/sluicehq/sluice"
)

// decideGroups runs one script per hash slot (one in all when the keys
// share one, or on a single node), and undoes the spends of the others
// when a Cluster call across slots is rejected.
func (s *Store) decideGroups(ctx context.Context, rs []request, mode sluice.Mode, res []result) error {
	groups := s.groups(rs)
	if len(groups) == 1 {
		return s.decideCall(ctx, mode, rs, res)
	}
	// Across slots: each slot at once, then compensation. Each spend
	// leaves a random stamp in a bucket's state, so that its undo can tell
	// the state it wrote from one written since (by another call, or after
	// the key expired and came back).
	for i := range rs {
		rs[i].stamp = rand.Int64N(1<<52) + 1 // exact in Lua's doubles
	}
	grouped := make([][]request, len(groups))
	results := make([][]result, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g, idx := range groups {
		grouped[g] = make([]request, len(idx))
		for j, i := range idx {
			grouped[g][j] = rs[i]
		}
		results[g] = make([]result, len(idx))
		wg.Go(func() { errs[g] = s.decideCall(ctx, mode, grouped[g], results[g]) })
	}
	wg.Wait()
	allowed := true
	for g, idx := range groups {
		for j, i := range idx {
			res[i] = results[g][j]
			allowed = allowed && (errs[g] != nil || res[i].allowed())
		}
	}
	rejected := !allowed || errors.Join(errs...) != nil
	if rejected {
		// Undo what the answering slots spent, in AllOrNothing mode all of
		// it, in RejectionsCount mode the concurrency slots only.
		for g, idx := range groups {
			if errs[g] != nil {
				continue
			}
			var undo []request
			var where []int
			for j, i := range idx {
				if r := results[g][j]; r.allowed() && !r.unspent() && (mode == sluice.AllOrNothing || rs[i].c.ints.Algorithm == sluice.Concurrency) {
					u := grouped[g][j]
					u.at = r.at
					undo, where = append(undo, u), append(where, i)
				}
			}
			if len(undo) == 0 {
				continue
			}
			// The undo runs even if the caller has given up meanwhile: a
			// spend left behind is capacity lost until it refills.
			out := make([]result, len(undo))
			if err := s.run(context.WithoutCancel(ctx), opUndo, mode, undo, out); err == nil {
				s.compensations.Add(uint64(len(undo)))
				for k, i := range where {
					out[k].flags |= flagAllowed // it would have fit
					res[i] = out[k]
				}
			}
		}
	}
	return errors.Join(errs...)
}

// groups splits request indexes by hash slot, keeping their order; one
// group off a Cluster.
func (s *Store) groups(rs []request) [][]int {
	all := make([]int, len(rs))
	for i := range rs {
		all[i] = i
	}
	if !s.client.Cluster() {
		return [][]int{all}
	}
	var groups [][]int
	var slots []uint16
	for i, r := range rs {
		g := 0
		for g < len(slots) && slots[g] != r.slot {
			g++
		}
		if g == len(slots) {
			slots, groups = append(slots, r.slot), append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}
