// Package topk finds the heaviest keys of a stream in bounded memory: which
// tenants make most of the traffic, or most of the rejections, in a period.
//
// A [Sketch] runs the Space-Saving algorithm (Metwally, Agrawal and El Abbadi,
// "Efficient Computation of Frequent and Top-k Elements in Data Streams",
// ICDT 2005) with weighted updates. It holds at most k counters. A key that
// is already counted adds its weight to its counter; a new key takes a free
// counter, or, when all k are taken, replaces the key of the lightest counter
// and starts from that counter's value plus its own weight. Each update costs
// O(log k).
//
// What the numbers mean, for a stream whose weights add up to Total:
//
//   - Count is an upper bound of a key's true weight, and Count − Error a lower
//     bound: the key really weighed somewhere in [Count − Error, Count]. Error
//     is the count the key inherited when it took over a counter (0 if it was
//     counted from its first appearance, so its Count is exact).
//   - Error is at most Total/k: a larger k gives tighter counts.
//   - No heavy key is missed: every key whose true weight is above Total/k is
//     in the sketch. Keys below that may or may not be.
//   - Weight is conserved: the Counts add up to Total.
//
// These hold exactly while the float64 sums are exact (integer weights and a
// Total below 2^53, or any weights that are multiples of a common power of
// two within that range); otherwise they hold up to float64 rounding.
//
// Keys are kept as given, one copy per counted key: the caller decides
// whether to pass a raw identity (a tenant ID an operator can read) or a
// hash of it (nothing identifying kept in memory). A sketch retains at most
// k keys whatever the stream.
package topk

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// MaxK is the largest number of counters a [Sketch] may have: 1<<20.
const MaxK = 1 << 20

// ErrInvalidK is wrapped by the error [New] returns for k outside [1, MaxK].
var ErrInvalidK = errors.New("topk: invalid k")

// Entry is one counted key.
type Entry struct {
	// Key is the key as passed to [Sketch.Add].
	Key string
	// Count is an upper bound of the key's true weight: the true weight is
	// in [Count − Error, Count].
	Count float64
	// Error is how much Count may overestimate the true weight: the count
	// the key inherited when it replaced another, 0 if it has been counted
	// since its first appearance. At most Total/k.
	Error float64
}

// Sketch counts the heaviest keys of a weighted stream with at most k
// counters (Space-Saving). Create one with [New]; the zero value is not
// usable. A Sketch is safe for concurrent use: every method takes one mutex,
// held only for the update itself (a map lookup and O(log k) heap moves) or,
// in [Sketch.Top], for a copy of the counters.
type Sketch struct {
	k int

	mu sync.Mutex
	// The fields below are guarded by mu.
	//
	// counters holds the counted keys in the order they were first given a
	// counter; a counter never moves, so its index is stable. heap is a
	// min-heap of indices into counters, ordered by lighter (count, then
	// key), whose root is the counter to replace; counters[i].pos is i's
	// position in heap. index maps a counted key to its counter.
	counters []counter
	heap     []int32
	index    map[string]int32
	total    float64
}

type counter struct {
	key   string
	count float64
	err   float64
	pos   int32
}

// New returns an empty sketch of k counters, 1 ≤ k ≤ [MaxK]. Memory grows
// with the distinct keys seen, up to k counters of under 100 bytes each
// (about 70 at k = MaxK) plus a copy of each key. The error, wrapping
// [ErrInvalidK], says why k is refused.
func New(k int) (*Sketch, error) {
	if k < 1 || k > MaxK {
		return nil, fmt.Errorf("%w: k is %d, must be from 1 to %d", ErrInvalidK, k, MaxK)
	}
	return &Sketch{k: k, index: make(map[string]int32)}, nil
}

// Add counts weight for key. Weight is in the caller's unit (requests,
// rejections, bytes, cost) and must be positive and finite; any other weight
// (zero, negative, NaN, ±Inf), or one that would make [Sketch.Total]
// overflow to +Inf, is ignored. Any string is a key, the empty one included.
//
// A counted key's counter grows by weight. A new key takes a free counter
// with Count weight and Error 0; when all k are taken, it replaces the key
// of the lightest counter (the smallest key among equally light ones) and
// counts from there: Count is that counter's value plus weight, Error that
// value. Add allocates nothing for a counted key; for a new key it copies
// the key (one allocation, so a key sliced from a large buffer does not keep
// the buffer alive), and while the sketch is filling up the counters may
// grow. Add is safe for concurrent use.
func (s *Sketch) Add(key string, weight float64) {
	if !(weight > 0) || weight > math.MaxFloat64 {
		return // not positive, NaN, or +Inf
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	total := s.total + weight
	if total > math.MaxFloat64 {
		return
	}
	s.total = total
	if i, ok := s.index[key]; ok {
		s.counters[i].count += weight
		s.down(int(s.counters[i].pos))
		return
	}
	key = strings.Clone(key)
	if len(s.counters) < s.k {
		i := int32(len(s.counters))
		s.counters = append(s.counters, counter{key: key, count: weight, pos: int32(len(s.heap))})
		s.heap = append(s.heap, i)
		s.index[key] = i
		s.up(len(s.heap) - 1)
		return
	}
	i := s.heap[0]
	c := &s.counters[i]
	delete(s.index, c.key)
	s.index[key] = i
	c.key, c.err, c.count = key, c.count, c.count+weight
	s.down(0)
}

// Top returns the n heaviest counted keys, by Count, heaviest first; keys of
// equal Count are in increasing order of Key, so equal sketches give equal
// answers. It returns all the counted keys (at most k) if there are fewer
// than n, and nil if n ≤ 0 or nothing is counted. The slice is the caller's.
// Top holds the lock only to copy the counters (O(k)); the ranking,
// O(k log n), runs outside it. Top is safe for concurrent use.
func (s *Sketch) Top(n int) []Entry {
	if n <= 0 {
		return nil
	}
	s.mu.Lock()
	all := make([]counter, len(s.counters))
	copy(all, s.counters)
	s.mu.Unlock()
	if len(all) == 0 {
		return nil
	}

	heavier := func(a, b counter) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	}
	if n < len(all) {
		// Keep the n heaviest in all[:n], a heap whose root is the lightest
		// of them, then sort those n.
		best := all[:n]
		lightest := func(i, j int) bool { return heavier(best[i], best[j]) > 0 }
		for i := n/2 - 1; i >= 0; i-- {
			siftDown(best, i, lightest)
		}
		for _, c := range all[n:] {
			if heavier(c, best[0]) < 0 {
				best[0] = c
				siftDown(best, 0, lightest)
			}
		}
		all = best
	}
	slices.SortFunc(all, heavier)
	out := make([]Entry, len(all))
	for i, c := range all {
		out[i] = Entry{Key: c.key, Count: c.count, Error: c.err}
	}
	return out
}

// siftDown restores the heap property below i in h, whose root is the
// element for which before(root, child) holds.
func siftDown(h []counter, i int, before func(i, j int) bool) {
	for {
		m, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && before(l, m) {
			m = l
		}
		if r < len(h) && before(r, m) {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// Total returns all the weight added since [New] or the last [Sketch.Reset]
// (ignored weights excluded), in the unit of the weights. It is safe for
// concurrent use.
func (s *Sketch) Total() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Reset forgets every key and the total, as at [New], keeping the memory
// of the counters for the next period. It is safe for concurrent use.
func (s *Sketch) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.counters) // drop the keys
	s.counters = s.counters[:0]
	s.heap = s.heap[:0]
	clear(s.index)
	s.total = 0
}

// lighter reports whether counter a comes before counter b in the heap:
// a smaller count, or an equal count and a smaller key. s.mu is held.
func (s *Sketch) lighter(a, b int32) bool {
	ca, cb := &s.counters[a], &s.counters[b]
	return ca.count < cb.count || (ca.count == cb.count && ca.key < cb.key)
}

// up moves the counter at heap position p towards the root until its
// parent is lighter. s.mu is held.
func (s *Sketch) up(p int) {
	h := s.heap
	for p > 0 {
		q := (p - 1) / 2
		if !s.lighter(h[p], h[q]) {
			break
		}
		s.swap(p, q)
		p = q
	}
}

// down moves the counter at heap position p away from the root until its
// children are heavier. s.mu is held.
func (s *Sketch) down(p int) {
	h := s.heap
	for {
		m, l, r := p, 2*p+1, 2*p+2
		if l < len(h) && s.lighter(h[l], h[m]) {
			m = l
		}
		if r < len(h) && s.lighter(h[r], h[m]) {
			m = r
		}
		if m == p {
			return
		}
		s.swap(p, m)
		p = m
	}
}

// swap exchanges heap positions p and q. s.mu is held.
func (s *Sketch) swap(p, q int) {
	h := s.heap
	h[p], h[q] = h[q], h[p]
	s.counters[h[p]].pos = int32(p)
	s.counters[h[q]].pos = int32(q)
}
