package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/lease"
)

func spend(group string, partition int, epoch uint64) lease.Spend {
	return lease.Spend{Group: group, Grant: lease.Grant{Partition: partition, Epoch: epoch}}
}

type fenceCheck struct {
	s       lease.Spend
	ok      bool
	highest uint64
}

func runChecks(t *testing.T, f *lease.Fences, checks []fenceCheck) {
	t.Helper()
	for i, c := range checks {
		ok, highest := f.Check(c.s)
		if ok != c.ok || highest != c.highest {
			t.Fatalf("check %d: Check(%s) = %v, %d; want %v, %d", i, lease.FormatFence(c.s), ok, highest, c.ok, c.highest)
		}
	}
}

// The timeline of the issue: a holder of partition 3 under epoch 5 pauses,
// the partition is taken over under epoch 9, and the paused holder's
// request is refused; the partitions and groups are independent.
func TestFencesTimeline(t *testing.T) {
	t.Parallel()
	f, err := lease.NewFences(lease.FenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runChecks(t, f, []fenceCheck{
		{spend("g", 3, 5), true, 5},  // first seen: passes
		{spend("g", 3, 5), true, 5},  // the holder's next request: the same epoch passes
		{spend("g", 3, 9), true, 9},  // the new holder: the floor moves
		{spend("g", 3, 5), false, 9}, // the paused holder wakes up: stale
		{spend("g", 3, 8), false, 9}, // any epoch below the floor
		{spend("g", 3, 9), true, 9},  // the new holder goes on
		{spend("g", 2, 1), true, 1},  // another partition has its own floor
		{spend("h", 3, 1), true, 1},  // another group too
		{spend("g", 3, 10), true, 10},
		{spend("g", 1023, 7), true, 7}, // the last partition
		{spend("g", 1024, 7), false, 0},
		{spend("g", -1, 7), false, 0},
		{spend("g", 0, 0), false, 0}, // epoch 0: never an acquisition's
		{spend("", 0, 1), false, 0},
		{spend(strings.Repeat("g", 129), 0, 1), false, 0},
		{spend(strings.Repeat("g", 128), 0, 1<<63), true, 1 << 63},
	})
	want := lease.FenceStats{Groups: 3, Accepted: 9, Stale: 2, Refused: 5}
	if got := f.Stats(); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
}

// A configured list is the only groups taken; without one, the first
// MaxGroups are, and a new one after that is refused rather than another
// forgotten (which would let its stale epochs through).
func TestFencesGroupBound(t *testing.T) {
	t.Parallel()
	listed, err := lease.NewFences(lease.FenceOptions{Groups: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	runChecks(t, listed, []fenceCheck{
		{spend("a", 0, 4), true, 4},
		{spend("b", 0, 2), true, 2},
		{spend("c", 0, 1), false, 0},
		{spend("a", 0, 3), false, 4},
	})
	if got := listed.Stats(); got.Groups != 2 || got.Refused != 1 {
		t.Fatalf("listed: Stats() = %+v, want 2 groups, 1 refused", got)
	}

	bounded, err := lease.NewFences(lease.FenceOptions{MaxGroups: 2})
	if err != nil {
		t.Fatal(err)
	}
	runChecks(t, bounded, []fenceCheck{
		{spend("a", 0, 9), true, 9},
		{spend("b", 0, 1), true, 1},
		{spend("c", 0, 1), false, 0}, // full: refused, a and b kept
		{spend("a", 0, 8), false, 9}, // a's floor was not forgotten
		{spend("b", 5, 1), true, 1},  // a known group's new partition is taken
		{spend("c", 0, 1), false, 0},
	})
	if got := bounded.Stats(); got.Groups != 2 || got.Refused != 2 {
		t.Fatalf("bounded: Stats() = %+v, want 2 groups, 2 refused", got)
	}

	def, err := lease.NewFences(lease.FenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range lease.DefaultMaxFenceGroups {
		if ok, _ := def.Check(spend(fmt.Sprint("g", i), 0, 1)); !ok {
			t.Fatalf("group %d of %d refused", i, lease.DefaultMaxFenceGroups)
		}
	}
	if ok, _ := def.Check(spend("one-more", 0, 1)); ok {
		t.Fatalf("group %d taken past the default bound", lease.DefaultMaxFenceGroups+1)
	}
}

func TestNewFencesRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		o    lease.FenceOptions
		want string
	}{
		{"negative bound", lease.FenceOptions{MaxGroups: -1}, "max groups -1: must not be negative"},
		{"list and bound", lease.FenceOptions{Groups: []string{"a"}, MaxGroups: 4}, "give one or the other"},
		{"twice", lease.FenceOptions{Groups: []string{"a", "b", "a"}}, `group "a" listed twice`},
		{"empty name", lease.FenceOptions{Groups: []string{""}}, "want 1 to 128 bytes"},
		{"space", lease.FenceOptions{Groups: []string{"a b"}}, "byte 1 is not a letter"},
		{"too long", lease.FenceOptions{Groups: []string{strings.Repeat("a", 129)}}, "want 1 to 128 bytes"},
	} {
		_, err := lease.NewFences(c.o)
		if err == nil || !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewFences(%+v) = %v, want an ErrInvalid saying %q", c.name, c.o, err, c.want)
		}
	}
}

// The invariant: after any sequence of checks, an epoch accepted for a
// partition is never below one accepted before it for the same partition;
// a refused one is below the highest accepted, which Check reports; and
// every answer is the model's (the maximum accepted so far).
func TestFencesNeverAcceptBelow(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(0, 3).Draw(t, "max groups")
		f, err := lease.NewFences(lease.FenceOptions{MaxGroups: max})
		if err != nil {
			t.Fatal(err)
		}
		if max == 0 {
			max = lease.DefaultMaxFenceGroups
		}
		type key struct {
			group     string
			partition int
		}
		accepted := map[key]uint64{} // the last epoch accepted
		groups := map[string]bool{}
		n := rapid.IntRange(1, 200).Draw(t, "checks")
		for i := range n {
			s := spend(
				rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, "group"),
				rapid.IntRange(0, 3).Draw(t, "partition"),
				rapid.Uint64Range(1, 12).Draw(t, "epoch"),
			)
			k := key{s.Group, s.Partition}
			taken := groups[s.Group] || len(groups) < max
			ok, highest := f.Check(s)
			last, seen := accepted[k]
			switch {
			case !taken:
				if ok || highest != 0 {
					t.Fatalf("check %d %v: got %v, %d; want the group refused (%d groups held)", i, s, ok, highest, len(groups))
				}
			case ok:
				if seen && s.Epoch < last {
					t.Fatalf("check %d %v: accepted epoch %d below %d accepted before", i, s, s.Epoch, last)
				}
				if highest != s.Epoch {
					t.Fatalf("check %d %v: accepted with highest %d", i, s, highest)
				}
				accepted[k], groups[s.Group] = s.Epoch, true
			default:
				if !seen || s.Epoch >= last || highest != last {
					t.Fatalf("check %d %v: refused with highest %d; last accepted %d (seen %v)", i, s, highest, last, seen)
				}
			}
		}
		if got := f.Stats().Groups; got != len(groups) {
			t.Fatalf("Stats().Groups = %d, want %d", got, len(groups))
		}
	})
}

// Under concurrent checks (run with -race) the floor is the largest epoch
// any check offered, each refusal reported a highest above its epoch, and
// every check is counted once.
func TestFencesConcurrent(t *testing.T) {
	t.Parallel()
	f, err := lease.NewFences(lease.FenceOptions{MaxGroups: 4})
	if err != nil {
		t.Fatal(err)
	}
	const workers, per = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				s := spend(fmt.Sprint("g", i%4), i%64, uint64(1+(i*7919+w*104729)%5000))
				if ok, highest := f.Check(s); !ok && highest <= s.Epoch {
					t.Errorf("%v refused with highest %d", s, highest)
					return
				}
			}
		})
	}
	wg.Wait()
	st := f.Stats()
	if st.Accepted+st.Stale != workers*per || st.Refused != 0 || st.Groups != 4 {
		t.Fatalf("Stats() = %+v, want %d checks accepted or stale, 4 groups", st, workers*per)
	}
	for g := range 4 {
		for p := range 64 {
			top := uint64(0)
			for w := range workers {
				for i := range per {
					if i%4 == g && i%64 == p {
						top = max(top, uint64(1+(i*7919+w*104729)%5000))
					}
				}
			}
			if top < 2 {
				continue // no epoch below it to offer
			}
			if ok, highest := f.Check(spend(fmt.Sprint("g", g), p, top-1)); ok || highest != top {
				t.Fatalf("g%d partition %d: epoch %d got %v, highest %d; want refused under %d", g, p, top-1, ok, highest, top)
			}
		}
	}
}

func ExampleFences() {
	fences, err := lease.NewFences(lease.FenceOptions{Groups: []string{"openai-tokens"}})
	if err != nil {
		panic(err)
	}
	// A holder of partition 3 under epoch 5 sends it with its requests.
	for _, header := range []string{"5 3 openai-tokens", "9 3 openai-tokens", "5 3 openai-tokens", "1 0 unknown"} {
		s, err := lease.ParseFence(header)
		if err != nil {
			panic(err)
		}
		ok, highest := fences.Check(s)
		fmt.Printf("%-18s ok=%v highest=%d\n", header, ok, highest)
	}
	// Output:
	// 5 3 openai-tokens  ok=true highest=5
	// 9 3 openai-tokens  ok=true highest=9
	// 5 3 openai-tokens  ok=false highest=9
	// 1 0 unknown        ok=false highest=0
}

// The cost of a check on the request path: a known group, the epoch
// already the highest (every request of a holder but its first), from
// every CPU at once.
func BenchmarkFencesCheck(b *testing.B) {
	f, err := lease.NewFences(lease.FenceOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for p := range 8 {
		f.Check(spend("fleet", p, 7))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		p := 0
		for pb.Next() {
			if ok, _ := f.Check(spend("fleet", p, 7)); !ok {
				b.Fatal("refused")
			}
			p = (p + 1) % 8
		}
	})
}
