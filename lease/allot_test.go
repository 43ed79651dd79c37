package lease_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/lease"
)

func TestAllotTable(t *testing.T) {
	for _, tc := range []struct {
		wants []int
		p     int
		want  []int
	}{
		{[]int{8, 8, 8}, 8, []int{3, 3, 2}},
		{[]int{8, 1, 1}, 8, []int{6, 1, 1}},
		{[]int{0, 8}, 8, []int{0, 8}},
		{[]int{0, 0}, 8, []int{0, 0}},
		{[]int{1, 1}, 8, []int{4, 4}}, // spare partitions go to the active
		{[]int{2, 0, 1}, 4, []int{3, 0, 1}},
		{[]int{}, 8, []int{}},
		{[]int{5, 5, 5, 5, 5}, 4, []int{1, 1, 1, 1, 0}},
	} {
		got := lease.Allot(tc.wants, tc.p)
		if len(got) != len(tc.want) {
			t.Fatalf("Allot(%v, %d) = %v, want %v", tc.wants, tc.p, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("Allot(%v, %d) = %v, want %v", tc.wants, tc.p, got, tc.want)
			}
		}
	}
}

// The rule's guarantee: never more than p in all; each member at least
// min(its want, ⌊p/N⌋); nothing left unheld while someone wants more.
func TestAllotProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.IntRange(1, 64).Draw(t, "p")
		wants := rapid.SliceOfN(rapid.IntRange(0, p), 0, 12).Draw(t, "wants")
		got := lease.Allot(wants, p)
		sum, wantSum := 0, 0
		for i, g := range got {
			sum += g
			wantSum += wants[i]
			if floor := min(wants[i], p/len(wants)); g < floor {
				t.Fatalf("member %d got %d, below min(want %d, p/N %d)", i, g, wants[i], p/len(wants))
			}
			if wants[i] == 0 && g != 0 {
				t.Fatalf("member %d wants nothing and got %d", i, g)
			}
		}
		if sum > p {
			t.Fatalf("allotted %d of %d", sum, p)
		}
		if wantSum >= p && sum != p {
			t.Fatalf("wants %d ≥ p %d but only %d allotted", wantSum, p, sum)
		}
	})
}
