package monoclock

import (
	"sync"
	"testing"
	"time"
)

// A Clock reads the wall time it was anchored to plus monotonic time: it
// stays between two time.Now readings taken around it (up to the drift
// between the two clocks since the anchor, nothing here), and never goes
// backwards.
func TestClockTracksTheWallClock(t *testing.T) {
	t.Parallel()
	c := New()
	prev := int64(0)
	for range 1000 {
		before := time.Now().UnixNano()
		now := c.Now()
		after := time.Now().UnixNano()
		if now < before-int64(time.Millisecond) || now > after+int64(time.Millisecond) {
			t.Fatalf("Now = %d outside [%d, %d] ± 1ms", now, before, after)
		}
		if now < prev {
			t.Fatalf("Now went backwards: %d after %d", now, prev)
		}
		prev = now
	}
}

func TestCoarseReturnsTheLatestTick(t *testing.T) {
	t.Parallel()
	c := NewCoarse(New())
	first := c.Now()
	if first == 0 {
		t.Fatal("NewCoarse did not tick")
	}
	if c.Now() != first {
		t.Fatal("Now changed without a Tick")
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 1000 {
			c.Tick()
		}
	})
	last := first
	for range 1000 {
		now := c.Now()
		if now < last {
			t.Fatalf("Now went backwards: %d after %d", now, last)
		}
		last = now
	}
	wg.Wait()
}
