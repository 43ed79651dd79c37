package memstore

import (
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// kind is the glue between the store and one algorithm's state type S: it
// finds the shard's table of S and runs the algorithm on a key's state.
type kind[S any, P interface {
	*S
	algo.State
}] struct {
	table func(*shard) *table[S]
}

// kindOps is what the store does with a kind's table, off the decision
// path, without knowing its state type.
type kindOps interface {
	len(sh *shard) int
	// evict removes the sampled entry that is closest to fresh and reports
	// whether it still held live state.
	evict(s *Store, sh *shard, nowSec uint32, pinned []ident) (live, ok bool)
	// sweep removes the entries that are fresh again at nowSec.
	sweep(s *Store, sh *shard, nowSec uint32) int
	// forget removes id's entry, if it has one.
	forget(sh *shard, id ident)
}

var kinds = [...]kindOps{
	sluice.TokenBucket:   &kind[algo.TokenBucket, *algo.TokenBucket]{func(sh *shard) *table[algo.TokenBucket] { return &sh.tokenBucket }},
	sluice.GCRA:          &kind[algo.GCRA, *algo.GCRA]{func(sh *shard) *table[algo.GCRA] { return &sh.gcra }},
	sluice.FixedWindow:   &kind[algo.FixedWindow, *algo.FixedWindow]{func(sh *shard) *table[algo.FixedWindow] { return &sh.fixedWindow }},
	sluice.SlidingLog:    &kind[algo.SlidingLog, *algo.SlidingLog]{func(sh *shard) *table[algo.SlidingLog] { return &sh.slidingLog }},
	sluice.SlidingWindow: &kind[algo.SlidingWindow, *algo.SlidingWindow]{func(sh *shard) *table[algo.SlidingWindow] { return &sh.slidingWindow }},
	sluice.LeakyBucket:   &kind[algo.LeakyBucket, *algo.LeakyBucket]{func(sh *shard) *table[algo.LeakyBucket] { return &sh.leakyBucket }},
	sluice.Concurrency:   &kind[algo.Concurrency, *algo.Concurrency]{func(sh *shard) *table[algo.Concurrency] { return &sh.concurrency }},
}

func (k *kind[S, P]) len(sh *shard) int { return k.table(sh).n }

func (k *kind[S, P]) forget(sh *shard, id ident) {
	t := k.table(sh)
	if at, _ := t.find(id); at >= 0 {
		t.remove(at)
		sh.n--
	}
}

// step decides call for the identity id under c on the shard's table t of
// S, with the shard locked. With commit it writes the new state (inserting
// the key if it spent; making room never evicts a pinned ident, the other
// keys of the same multi-limit call). The store calls it through a switch
// on the algorithm, so the call is direct.
func step[S any, P interface {
	*S
	algo.State
}](s *Store, sh *shard, t *table[S], c *compiled, id ident, call algo.Call, commit bool, pinned []ident) (algo.Result, error) {
	p := c.params
	at, free := t.find(id)
	// A key not held yet is decided on the table's scratch state (a local
	// would escape: calls through P are dynamic).
	var zero S
	var state P
	if at < 0 {
		t.scratch = zero
		state = P(&t.scratch)
		state.Init(p, call.Now)
	} else {
		state = P(&t.slots[at].state)
	}
	call.Clamp = true
	d, err := state.Step(p, call, commit)
	if !commit {
		return d, err
	}
	if d.Clamped() {
		sh.stats.ClockBackwards++
	}
	if !d.Allowed() {
		return d, err // nothing spent: the state is unchanged
	}
	var sl *slot[S]
	if at >= 0 {
		sl = &t.slots[at]
	} else {
		if sh.n >= s.perShard {
			s.makeRoom(sh, c.kind, call.Now, pinned)
			free = -1 // the eviction may have moved entries
		}
		sl = t.insert(id, free)
		sl.state, t.scratch = t.scratch, zero
		sh.n++
	}
	if d.Clamped() {
		// The decision was made at the state's instant, not call.Now.
		sl.reset = s.resetSecond(P(&sl.state).ResetAt(p))
		return d, err
	}
	// The key is full again ResetAfter from the decision's instant.
	sl.reset = s.resetSecond(call.Now + d.ResetAfterMicros())
	return d, err
}

// evict samples up to evictSamples entries from a random place and removes
// the one whose reset comes first: the least information is lost.
func (k *kind[S, P]) evict(s *Store, sh *shard, nowSec uint32, pinned []ident) (live, ok bool) {
	t := k.table(sh)
	size := len(t.ctrl)
	if size == 0 {
		return false, false
	}
	victim, seen := -1, 0
	for i, steps := int(sh.random()%uint64(size)), 0; seen < evictSamples && steps < size; steps++ {
		if t.ctrl[i] != 0 && !slices.Contains(pinned, t.slots[i].id) {
			if victim < 0 || t.slots[i].reset < t.slots[victim].reset {
				victim = i
			}
			seen++
		}
		if i++; i == size {
			i = 0
		}
	}
	if victim < 0 {
		return false, false // only pinned keys here
	}
	live = t.slots[victim].reset > nowSec
	t.remove(victim)
	sh.n--
	return live, true
}

func (k *kind[S, P]) sweep(s *Store, sh *shard, nowSec uint32) int {
	t := k.table(sh)
	removed := 0
	for i := 0; i < len(t.ctrl); {
		if t.ctrl[i] != 0 && t.slots[i].reset <= nowSec {
			t.remove(i) // an entry may shift into i: look at i again
			removed++
			continue
		}
		i++
	}
	sh.n -= removed
	t.shrink()
	return removed
}

// evictSamples is how many entries an eviction compares.
const evictSamples = 5
