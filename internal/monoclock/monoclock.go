// Package monoclock reads the runtime's monotonic clock as Unix nanoseconds.
//
// time.Now reads two clocks (wall and monotonic); on a VM with kvm-clock each
// read costs ~25 ns, which is most of a rate limiting decision. A Clock
// reads only the monotonic one, anchored to the wall clock once, so it also
// never steps backwards when the wall clock is adjusted.
package monoclock

import (
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname
)

// nanotime is the runtime's monotonic clock, the one time.Now uses for its
// monotonic reading. The Go team keeps this linkname working for the many
// packages that use it (see runtime/time_nofake.go).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Clock converts monotonic readings to Unix nanoseconds from an anchor.
// The zero Clock is not usable; call New. A Clock is safe for concurrent use.
type Clock struct {
	wall, mono int64
}

// New anchors a Clock at the current wall time.
func New() Clock {
	mono := nanotime()
	return Clock{wall: time.Now().UnixNano(), mono: mono}
}

// Now returns the current instant in Unix nanoseconds: the anchor's wall
// time plus the monotonic time elapsed since.
func (c Clock) Now() int64 { return c.wall + (nanotime() - c.mono) }

// Coarse is a Clock read ahead of time: Tick stores a reading, Now returns
// the latest one, an atomic load. Whoever owns a Coarse calls Tick once per
// resolution (a background goroutine); Now then lags the Clock by at most
// a resolution plus scheduling delay, and never goes backwards. Safe for
// concurrent use.
type Coarse struct {
	clock Clock
	now   atomic.Int64
}

// NewCoarse returns a Coarse clock over c, already ticked once.
func NewCoarse(c Clock) *Coarse {
	cc := &Coarse{clock: c}
	cc.Tick()
	return cc
}

// Tick reads the underlying clock. Concurrent Ticks never move Now back.
func (c *Coarse) Tick() {
	now := c.clock.Now()
	for {
		old := c.now.Load()
		if now <= old || c.now.CompareAndSwap(old, now) {
			return
		}
	}
}

// Now returns the latest reading.
func (c *Coarse) Now() int64 { return c.now.Load() }
