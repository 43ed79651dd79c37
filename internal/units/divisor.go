package units

import "math/bits"

// Divisor divides non-negative int64s by a fixed positive divisor with a
// multiplication and a shift instead of a division instruction (which
// costs 10-40 cycles): Granlund and Montgomery's round-up method with a
// 65-bit magic number, as in libdivide. The zero Divisor is invalid.
type Divisor struct {
	d     int64
	magic uint64 // the low 64 bits of the 65-bit magic; 0 for a power of two
	shift uint8
}

// NewDivisor returns a Divisor by d > 0.
func NewDivisor(d int64) Divisor {
	l := uint8(bits.Len64(uint64(d)))
	if d&(d-1) == 0 { // a power of two: a shift
		return Divisor{d: d, shift: l - 1}
	}
	// M = floor(2^(64+l) / d) + 1 = 2^64 + m, with 2^(l−1) < d < 2^l;
	// m = floor((2^l − d) × 2^64 / d) + 1, and 2^l − d < d.
	q, _ := bits.Div64(uint64(1)<<l-uint64(d), 0, uint64(d))
	return Divisor{d: d, magic: q + 1, shift: l}
}

// Div returns floor(n / d) for 0 ≤ n < 2^63.
func (v Divisor) Div(n int64) int64 {
	if v.magic == 0 {
		return n >> v.shift
	}
	t, _ := bits.Mul64(uint64(n), v.magic)
	return int64((t + uint64(n)) >> v.shift) // t ≤ n < 2^63: no overflow
}

// CeilDiv returns ceil(n / d) for 0 ≤ n ≤ 2^63 − d.
func (v Divisor) CeilDiv(n int64) int64 { return v.Div(n + v.d - 1) }

// Value is the divisor.
func (v Divisor) Value() int64 { return v.d }
