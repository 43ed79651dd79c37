package units

import (
	"math"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

// Divisor.Div is floor division for every divisor and numerator in range,
// including the edges: divisors 1, powers of two and their neighbours, and
// numerators near 2^63.
func TestPropDivisorIsFloorDivision(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		d := rapid.OneOf(
			rapid.Int64Range(1, 1<<20),
			rapid.Int64Range(1, math.MaxInt64),
			rapid.Custom(func(t *rapid.T) int64 {
				p := int64(1) << rapid.IntRange(0, 62).Draw(t, "pow")
				return max(1, p+rapid.Int64Range(-1, 1).Draw(t, "near"))
			}),
		).Draw(t, "d")
		n := rapid.OneOf(
			rapid.Int64Range(0, 1<<20),
			rapid.Int64Range(0, math.MaxInt64),
			rapid.Int64Range(math.MaxInt64-1<<20, math.MaxInt64),
			rapid.Custom(func(t *rapid.T) int64 { return d * rapid.Int64Range(0, math.MaxInt64/d).Draw(t, "k") }),
		).Draw(t, "n")
		v := NewDivisor(d)
		if got, want := v.Div(n), n/d; got != want {
			t.Fatalf("%d / %d = %d, want %d", n, d, got, want)
		}
		if n <= math.MaxInt64-d+1 {
			if got, want := v.CeilDiv(n), CeilDiv(n, d); got != want {
				t.Fatalf("ceil(%d / %d) = %d, want %d", n, d, got, want)
			}
		}
	})
}

func TestPropMulDiv(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.Int64Range(0, 1<<53).Draw(t, "a")
		b := rapid.Int64Range(0, 1<<59).Draw(t, "b")
		c := rapid.Int64Range(1, math.MaxInt64).Draw(t, "c")
		got, ok := MulDiv(a, b, c)
		hi, lo := Mul(a, b).Hi, Mul(a, b).Lo
		// The quotient fits in an int64 iff a×b < c × 2^63.
		limHi, limLo := Mul(c, 1<<62).Hi, Mul(c, 1<<62).Lo // c × 2^62
		limit := Mul128{limHi, limLo}.Add(Mul128{limHi, limLo})
		fits := (Mul128{hi, lo}).Less(limit)
		if ok != fits {
			t.Fatalf("MulDiv(%d, %d, %d): ok = %v, but the quotient fits: %v", a, b, c, ok, fits)
		}
		if ok {
			// got×c ≤ a×b < (got+1)×c
			low := Mul(got, c)
			if (Mul128{hi, lo}).Less(low) {
				t.Fatalf("MulDiv(%d, %d, %d) = %d: too large", a, b, c, got)
			}
			if !(Mul128{hi, lo}).Less(low.Add(Mul(1, c))) {
				t.Fatalf("MulDiv(%d, %d, %d) = %d: too small", a, b, c, got)
			}
		}
	})
}

func TestFromCost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   float64
		want int64
		ok   bool
	}{
		{1, 1e6, true}, {2.5, 2_500_000, true}, {0.1, 100_000, true}, {1e-6, 1, true},
		{4e-7, 0, false}, {0, 0, false}, {-1, 0, false}, {math.NaN(), 0, false},
		{math.Inf(1), 0, false}, {float64(MaxAtoms) / PerCost, MaxAtoms, true}, {5e9, 0, false},
	} {
		got, ok := FromCost(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("FromCost(%v) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// Refill is min(max, level + elapsed × PerMicro), computed exactly, for
// levels from −max (a debt) to max, whatever the elapsed time.
func TestPropRefill(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		r := NewRate(rapid.Int64Range(1, 1<<30).Draw(t, "quota"), rapid.Int64Range(1, 1<<30).Draw(t, "window"))
		max := rapid.Int64Range(1, MaxScaled/4).Draw(t, "max")
		level := rapid.Int64Range(-max, max).Draw(t, "level")
		elapsed := rapid.OneOf(
			rapid.Int64Range(0, 1<<10),
			rapid.Int64Range(0, 1<<40),
			rapid.Custom(func(t *rapid.T) int64 { // near the debt's end
				return max0(CeilDiv(-level, r.PerMicro) + rapid.Int64Range(-2, 2).Draw(t, "near"))
			}),
		).Draw(t, "elapsed")
		want := new(big.Int).Mul(big.NewInt(elapsed), big.NewInt(r.PerMicro))
		want.Add(want, big.NewInt(level))
		if want.Cmp(big.NewInt(max)) > 0 {
			want.SetInt64(max)
		}
		if got := r.Refill(level, max, elapsed); got != want.Int64() {
			t.Fatalf("Refill(%d, %d, %d) at %d/µs = %d, want %v", level, max, elapsed, r.PerMicro, got, want)
		}
	})
}

func max0(v int64) int64 { return max(v, 0) }
