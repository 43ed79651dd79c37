package topk

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// stream is a sketch size and a weighted stream of keys.
type stream struct {
	K   int
	Ops []op
}

type op struct {
	Key    string
	Weight float64
}

// genStream draws k from 1 to 8 and up to 150 updates over up to 4k+2 keys,
// half of them on two hot keys, so sketches fill, evict and readmit. The
// weights are quarters up to 4 or integers up to 1000: every sum stays exact
// in float64, so the invariants are checked with ==, not a tolerance.
func genStream() *rapid.Generator[stream] {
	return rapid.Custom(func(t *rapid.T) stream {
		k := rapid.IntRange(1, 8).Draw(t, "k")
		keys := rapid.IntRange(1, 4*k+2).Draw(t, "keys")
		s := stream{K: k, Ops: make([]op, rapid.IntRange(0, 150).Draw(t, "n"))}
		for i := range s.Ops {
			hi := keys - 1
			if rapid.Bool().Draw(t, "hot") {
				hi = min(hi, 1)
			}
			key := fmt.Sprintf("t%d", rapid.IntRange(0, hi).Draw(t, "key"))
			var w float64
			if rapid.Bool().Draw(t, "small") {
				w = float64(rapid.IntRange(1, 16).Draw(t, "quarters")) / 4
			} else {
				w = float64(rapid.IntRange(1, 1000).Draw(t, "weight"))
			}
			s.Ops[i] = op{key, w}
		}
		return s
	})
}

// sketcher is what the properties observe of a sketch.
type sketcher interface {
	Add(key string, weight float64)
	Top(n int) []Entry
	Total() float64
}

// outcome is a stream played on a sketch: the true weights, and what the
// sketch says.
type outcome struct {
	K       int
	Truth   map[string]float64
	Total   float64 // the sketch's Total
	Entries []Entry // the sketch's Top(all)
}

func play(s sketcher, st stream) outcome {
	o := outcome{K: st.K, Truth: map[string]float64{}}
	for _, op := range st.Ops {
		s.Add(op.Key, op.Weight)
		o.Truth[op.Key] += op.Weight
	}
	o.Total, o.Entries = s.Total(), s.Top(math.MaxInt)
	return o
}

// The invariants of Space-Saving, each a check of an outcome. Total/k is
// compared as w·k against Total, exact for the generated streams.
var invariants = []struct {
	name  string
	check func(o outcome) error
}{
	{"1 heavy keys present", func(o outcome) error {
		for key, w := range o.Truth {
			if w*float64(o.K) > o.Total && !slices.ContainsFunc(o.Entries, func(e Entry) bool { return e.Key == key }) {
				return fmt.Errorf("%q weighs %v > Total/k = %v/%d but is not in %v", key, w, o.Total, o.K, o.Entries)
			}
		}
		return nil
	}},
	{"2 Count−Error ≤ true ≤ Count", func(o outcome) error {
		for _, e := range o.Entries {
			if w := o.Truth[e.Key]; !(e.Count-e.Error <= w && w <= e.Count) {
				return fmt.Errorf("%v: true weight %v outside [Count−Error, Count] = [%v, %v]", e, w, e.Count-e.Error, e.Count)
			}
		}
		return nil
	}},
	{"3 Error ≤ Total/k", func(o outcome) error {
		for _, e := range o.Entries {
			if e.Error < 0 || e.Error*float64(o.K) > o.Total {
				return fmt.Errorf("%v: Error outside [0, Total/k = %v/%d]", e, o.Total, o.K)
			}
		}
		return nil
	}},
	{"4 at most k entries", func(o outcome) error {
		if len(o.Entries) > o.K {
			return fmt.Errorf("%d entries, k = %d: %v", len(o.Entries), o.K, o.Entries)
		}
		return nil
	}},
	{"5 sum of Counts == Total", func(o outcome) error {
		sum, truth := 0.0, 0.0
		for _, e := range o.Entries {
			sum += e.Count
		}
		for _, w := range o.Truth {
			truth += w
		}
		if sum != o.Total || o.Total != truth {
			return fmt.Errorf("Counts sum to %v, Total is %v, weights added %v", sum, o.Total, truth)
		}
		return nil
	}},
}

func invariant(name string) func(outcome) error {
	for _, inv := range invariants {
		if inv.name == name {
			return inv.check
		}
	}
	panic("no invariant " + name)
}

// sorted checks Top's order: by Count descending, then Key ascending, no
// key twice.
func sorted(entries []Entry) error {
	for i := 1; i < len(entries); i++ {
		a, b := entries[i-1], entries[i]
		if a.Count < b.Count || (a.Count == b.Count && a.Key >= b.Key) {
			return fmt.Errorf("Top out of order at %d: %v then %v", i, a, b)
		}
	}
	return nil
}

func TestPropInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		st := genStream().Draw(rt, "stream")
		s, err := New(st.K)
		if err != nil {
			rt.Fatal(err)
		}
		o := play(s, st)
		for _, inv := range invariants {
			if err := inv.check(o); err != nil {
				rt.Fatalf("%s: %v", inv.name, err)
			}
		}
		if err := sorted(o.Entries); err != nil {
			rt.Fatal(err)
		}
		if n := len(s.index); n > st.K { // retention, beyond what Top shows
			rt.Fatalf("%d keys retained, k = %d", n, st.K)
		}
	})
}

// The sketch (a heap, O(log k)) gives exactly the answers of the obvious
// O(k) Space-Saving after every update, and so do its prefixes (Top(n)).
func TestPropMatchesReference(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		st := genStream().Draw(rt, "stream")
		s, _ := New(st.K)
		ref := &model{k: st.K, policy: spaceSaving}
		for i, op := range st.Ops {
			s.Add(op.Key, op.Weight)
			ref.Add(op.Key, op.Weight)
			n := rapid.IntRange(0, st.K+1).Draw(rt, "topN")
			if got, want := s.Top(n), ref.Top(n); !slices.Equal(got, want) {
				rt.Fatalf("after op %d %v: Top(%d) = %v, want %v", i, op, n, got, want)
			}
		}
		if got, want := s.Total(), ref.Total(); got != want {
			rt.Fatalf("Total = %v, want %v", got, want)
		}
	})
}

// policy is how a model sketch treats a new key when all k counters are
// taken. Only spaceSaving is the algorithm; the others are the negative
// controls of the invariants.
type policy int

const (
	spaceSaving   policy = iota // replace the lightest, inherit its count as Error
	dropNew                     // ignore the new key
	forgetError                 // replace the lightest, but report Error 0
	evictHeaviest               // replace the heaviest instead
	unbounded                   // never replace: count every key exactly
	restartCount                // replace the lightest, counting from the new weight only
)

// model is a sketch in O(k) per update, the reference of the real one.
type model struct {
	k       int
	policy  policy
	entries []Entry
	total   float64
}

func (m *model) Add(key string, w float64) {
	m.total += w
	if i := slices.IndexFunc(m.entries, func(e Entry) bool { return e.Key == key }); i >= 0 {
		m.entries[i].Count += w
		return
	}
	if len(m.entries) < m.k || m.policy == unbounded {
		m.entries = append(m.entries, Entry{Key: key, Count: w})
		return
	}
	lighter := func(a, b Entry) int {
		if c := cmp.Compare(a.Count, b.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	}
	v := 0 // the lightest
	for i, e := range m.entries {
		if lighter(e, m.entries[v]) < 0 {
			v = i
		}
	}
	switch m.policy {
	case spaceSaving:
		m.entries[v] = Entry{Key: key, Count: m.entries[v].Count + w, Error: m.entries[v].Count}
	case dropNew:
	case forgetError:
		m.entries[v] = Entry{Key: key, Count: m.entries[v].Count + w}
	case evictHeaviest:
		for i, e := range m.entries {
			if lighter(e, m.entries[v]) > 0 {
				v = i
			}
		}
		m.entries[v] = Entry{Key: key, Count: m.entries[v].Count + w, Error: m.entries[v].Count}
	case restartCount:
		m.entries[v] = Entry{Key: key, Count: w, Error: m.entries[v].Count}
	}
}

func (m *model) Top(n int) []Entry {
	if n <= 0 || len(m.entries) == 0 {
		return nil
	}
	out := slices.Clone(m.entries)
	slices.SortFunc(out, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out[:min(n, len(out))]
}

func (m *model) Total() float64 { return m.total }

// The reference passes every invariant, on the same streams as the sketch.
func TestPropReferenceInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		st := genStream().Draw(rt, "stream")
		o := play(&model{k: st.K, policy: spaceSaving}, st)
		for _, inv := range invariants {
			if err := inv.check(o); err != nil {
				rt.Fatalf("%s: %v", inv.name, err)
			}
		}
	})
}

// The invariants are not vacuous: each broken variant breaks its invariant
// on some generated stream. The naive sketch that drops new keys when full
// misses a heavy key that arrives late.
func TestPropInvariantsCatchBrokenVariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy    policy
		invariant string
	}{
		{dropNew, "1 heavy keys present"},
		{forgetError, "2 Count−Error ≤ true ≤ Count"},
		{evictHeaviest, "3 Error ≤ Total/k"},
		{unbounded, "4 at most k entries"},
		{restartCount, "5 sum of Counts == Total"},
	} {
		t.Run(tc.invariant, func(t *testing.T) {
			t.Parallel()
			check, gen := invariant(tc.invariant), genStream()
			for seed := range 2000 {
				st := gen.Example(seed)
				if err := check(play(&model{k: st.K, policy: tc.policy}, st)); err != nil {
					t.Logf("seed %d, k=%d, %d updates: %v", seed, st.K, len(st.Ops), err)
					return
				}
			}
			t.Fatalf("no stream in 2000 shows policy %d breaking %q", tc.policy, tc.invariant)
		})
	}
}
