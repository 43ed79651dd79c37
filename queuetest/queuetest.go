// Package queuetest is the conformance suite of [queue.Queue]: every
// backend runs it unchanged, as River's drivers run riverdrivertest.
//
// A backend that takes its clock from the suite (Backend.FakeClock) is
// tested on exact timelines: the suite moves time and every instant is
// compared to the nanosecond. A backend that keeps real time (a server's
// timers) is tested on the same timelines in real time, with each step a
// multiple of Backend.Unit and every check made away from a boundary.
package queuetest

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// Backend describes the queue under test.
type Backend struct {
	// Open returns a new, empty queue configured by c. The suite closes it.
	Open func(t *testing.T, c Config) queue.Queue
	// Reopen closes q and opens the same queue again, as a restarted
	// process would. Nil when the backend cannot; the restart tests then
	// skip (loudly).
	Reopen func(t *testing.T, q queue.Queue, c Config) queue.Queue
	// FakeClock is true when Open honours Config.Now: the suite then runs
	// on a clock it moves itself.
	FakeClock bool
	// Unit is one step of the timelines in real time, for a backend
	// without FakeClock (default 200ms). Ignored with FakeClock.
	Unit time.Duration
	// MaxPayload and MaxResult are the bounds Open configures from
	// Config; the suite checks one byte over is refused.
	MaxPayload int
	MaxResult  int
}

// Config is what the suite asks of a new queue.
type Config struct {
	// Now is the suite's clock (nil: real time).
	Now func() time.Time
	// DedupWindow is how long a Key is remembered.
	DedupWindow time.Duration
	// MaxAttempts is the default attempts of a task.
	MaxAttempts int
}

// Clock is the suite's time: fake (moved by Advance) or real (Advance
// sleeps).
type Clock struct {
	mu   sync.Mutex
	now  time.Time
	fake bool
}

// Epoch is where fake clocks start.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewFakeClock returns a clock at Epoch that moves only with Advance.
func NewFakeClock() *Clock { return &Clock{now: Epoch, fake: true} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	if !c.fake {
		return time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves a fake clock by d, or sleeps d on a real one.
func (c *Clock) Advance(d time.Duration) {
	if !c.fake {
		time.Sleep(d)
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
