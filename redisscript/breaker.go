package redisscript

import (
	"sync/atomic"
	"time"
)

// breaker stops calling Redis after threshold consecutive failures, for
// cooldown; then it lets one probe through: its success closes the breaker,
// its failure opens it again. While it is open a decision costs nothing but
// the failure policy. Safe for concurrent use.
type breaker struct {
	threshold int64
	cooldown  time.Duration
	now       func() time.Time
	// onChange, when set, hears the breaker open (true) and close
	// (false): once per change (a failed probe, which keeps it open, is
	// not one).
	onChange func(open bool)

	failures  atomic.Int64
	openUntil atomic.Int64 // Unix ns; 0 when closed
	probing   atomic.Bool
	opens     atomic.Uint64
}

// allow reports whether a call may go to Redis, and whether it is the
// probe of a breaker that has cooled down.
func (b *breaker) allow() (ok, probe bool) {
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if b.now().UnixNano() < until || !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

func (b *breaker) success(probe bool) {
	b.failures.Store(0)
	if probe || b.openUntil.Load() != 0 {
		was := b.openUntil.Swap(0)
		b.probing.Store(false)
		if was != 0 && b.onChange != nil {
			b.onChange(false)
		}
	}
}

func (b *breaker) failure(probe bool) {
	if n := b.failures.Add(1); probe || n >= b.threshold {
		opened := b.openUntil.Swap(b.now().Add(b.cooldown).UnixNano()) == 0
		if opened || probe {
			b.opens.Add(1)
		}
		if opened && b.onChange != nil {
			b.onChange(true)
		}
		if probe {
			b.probing.Store(false)
		}
	}
}

// release gives back a probe whose call ended without telling anything
// about Redis (the caller cancelled it).
func (b *breaker) release(probe bool) {
	if probe {
		b.probing.Store(false)
	}
}

func (b *breaker) isOpen() bool { return b.openUntil.Load() != 0 }
