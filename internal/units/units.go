// Package units turns a limit's real-valued quantities into exact integers.
//
// Costs, quotas and bursts are counted in atoms, millionths of a cost unit,
// so the fractional costs of the contract (2.5, 0.1) are whole numbers. Time
// is counted in microseconds, the resolution of Redis's TIME. A rate of Q
// atoms per W microseconds is reduced by gcd(Q, W) to a pair (PerMicro,
// PerAtom): a scaled unit is then both 1/PerAtom of an atom and the refill
// of 1/PerMicro of a microsecond, so a token bucket's level, its refill and
// a cost are all integers of the same unit and every comparison is exact.
// Nothing here rounds except the one conversion of a caller's float64 into
// atoms.
//
// Every quantity, and every sum of two, stays below 2^53, so a float64 holds
// it exactly: Redis's Lua, which only has doubles, computes the same
// decisions as Go.
package units

import (
	"math"
	"math/bits"
)

// PerCost is the number of atoms in one cost unit: costs, quotas and bursts
// have a resolution of one millionth.
const PerCost = 1_000_000

// MaxAtoms bounds every amount in atoms (2^52, about 4.5e9 cost units).
const MaxAtoms = 1 << 52

// MaxScaled bounds a scaled quantity (a bucket's capacity in scaled units)
// and a rate's PerMicro: 2^52, so that the sum of two is below 2^53.
const MaxScaled = 1 << 52

// Micro is a microsecond in nanoseconds.
const Micro = 1000

// FromCost converts x cost units to atoms, rounded to the nearest atom. It
// reports false when x is NaN, infinite, not positive, rounds to zero atoms,
// or exceeds MaxAtoms.
func FromCost(x float64) (int64, bool) {
	if !(x > 0) || x > float64(MaxAtoms)/PerCost {
		return 0, false // also NaN and +Inf
	}
	a := int64(math.Round(x * PerCost))
	if a <= 0 || a > MaxAtoms {
		return 0, false
	}
	return a, true
}

// ToCost converts atoms back to cost units.
func ToCost(atoms int64) float64 { return float64(atoms) / PerCost }

// Rate is a refill rate of Q atoms per W microseconds in lowest terms. In
// scaled units, one microsecond refills PerMicro units and one atom is
// PerAtom units. The zero Rate is invalid.
type Rate struct {
	PerMicro int64 // scaled units refilled per microsecond: Q / gcd(Q, W)
	PerAtom  int64 // scaled units per atom: W / gcd(Q, W)
	fills    int64 // microseconds that refill any level up to MaxScaled
	perMicro Divisor
	perAtom  Divisor
}

// NewRate returns the rate of quotaAtoms per windowMicros; both must be > 0.
func NewRate(quotaAtoms, windowMicros int64) Rate {
	g := gcd(quotaAtoms, windowMicros)
	r := Rate{PerMicro: quotaAtoms / g, PerAtom: windowMicros / g}
	r.fills = CeilDiv(MaxScaled, r.PerMicro)
	r.perMicro, r.perAtom = NewDivisor(r.PerMicro), NewDivisor(r.PerAtom)
	return r
}

// Scale converts atoms to scaled units. It reports false when the result
// would exceed MaxScaled.
func (r Rate) Scale(atoms int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(atoms), uint64(r.PerAtom))
	if hi != 0 || lo > MaxScaled {
		return 0, false
	}
	return int64(lo), true
}

// Fills is how many microseconds refill any level: past it, a bucket is
// full whatever it held.
func (r *Rate) Fills() int64 { return r.fills }

// Atoms converts scaled units (0 ≤ units ≤ MaxScaled) to whole atoms,
// rounding down.
func (r *Rate) Atoms(units int64) int64 { return r.perAtom.Div(units) }

// Micros returns the time, rounded up to a whole microsecond, that the rate
// needs to refill units (0 ≤ units ≤ 2 × MaxScaled).
func (r *Rate) Micros(units int64) int64 { return r.perMicro.CeilDiv(units) }

// Refill returns level plus what elapsed microseconds refill, capped at
// max. −max ≤ level ≤ max ≤ MaxScaled (a negative level is a debt) and
// elapsed ≥ 0; every intermediate stays below 2^53 (a debt is paid off
// first, on its own, so that no product exceeds max + PerMicro).
func (r *Rate) Refill(level, max, elapsed int64) int64 {
	if level < 0 {
		debt := r.Micros(-level) // the time that pays it off
		if elapsed < debt {
			return level + elapsed*r.PerMicro // < PerMicro: still ≤ 0 + PerMicro
		}
		level += debt * r.PerMicro // now 0 ≤ level < PerMicro
		elapsed -= debt
	}
	if elapsed >= r.fills { // refills any level (and the product would be large)
		return max
	}
	if add := elapsed * r.PerMicro; add < max-level { // add < MaxScaled + PerMicro ≤ 2^53
		return level + add
	}
	return max
}

// CeilDiv returns ceil(a/b) for a >= 0 and b > 0.
func CeilDiv(a, b int64) int64 { return (a + b - 1) / b }

// FloorDiv returns floor(a/b) for b > 0 and any a.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// MulDiv returns floor(a*b/c) for a, b >= 0 and c > 0, computed with a
// 128-bit intermediate, and false when the quotient does not fit in an int64.
func MulDiv(a, b, c int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}

// Mul128 is an unsigned 128-bit product, for exact comparisons of products.
type Mul128 struct{ Hi, Lo uint64 }

// Mul returns a*b for a, b >= 0 as a 128-bit number.
func Mul(a, b int64) Mul128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return Mul128{hi, lo}
}

// Add returns x+y; the callers' operands are far below 2^127.
func (x Mul128) Add(y Mul128) Mul128 {
	lo, carry := bits.Add64(x.Lo, y.Lo, 0)
	return Mul128{x.Hi + y.Hi + carry, lo}
}

// Less reports x < y.
func (x Mul128) Less(y Mul128) bool {
	return x.Hi < y.Hi || (x.Hi == y.Hi && x.Lo < y.Lo)
}

// Div returns x / d and x % d; the quotient must fit in an int64 (callers
// check that x < d × 2^63).
func (x Mul128) Div(d int64) (q, r int64) {
	uq, ur := bits.Div64(x.Hi, x.Lo, uint64(d))
	return int64(uq), int64(ur)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
