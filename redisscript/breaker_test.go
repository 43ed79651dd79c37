package redisscript

import (
	"testing"
	"time"
)

// The breaker's life on a fake clock: it opens on the threshold's failure,
// refuses until the cooldown, then lets exactly one probe through; the
// probe's failure opens it again (a new opening, no new change), its
// cancel gives the probe back, its success closes it. Each change is heard
// once.
func TestBreaker(t *testing.T) {
	now := time.Unix(1e9, 0)
	var changes []bool
	b := &breaker{threshold: 3, cooldown: 100 * time.Millisecond, now: func() time.Time { return now },
		onChange: func(open bool) { changes = append(changes, open) }}
	allow := func(wantOK, wantProbe bool) {
		t.Helper()
		if ok, probe := b.allow(); ok != wantOK || probe != wantProbe {
			t.Fatalf("allow() = %v, %v; want %v, %v", ok, probe, wantOK, wantProbe)
		}
	}
	b.failure(false)
	b.failure(false)
	b.success(false) // a success resets the count
	b.failure(false)
	b.failure(false)
	allow(true, false)
	b.failure(false) // the third in a row
	if !b.isOpen() || b.opens.Load() != 1 {
		t.Fatalf("after 3 failures: open %v, opens %d", b.isOpen(), b.opens.Load())
	}
	allow(false, false)
	now = now.Add(99 * time.Millisecond)
	allow(false, false)
	now = now.Add(time.Millisecond)
	allow(true, true)   // the probe
	allow(false, false) // one at a time
	b.failure(true)
	if !b.isOpen() || b.opens.Load() != 2 {
		t.Fatalf("after a failed probe: open %v, opens %d", b.isOpen(), b.opens.Load())
	}
	allow(false, false)
	now = now.Add(100 * time.Millisecond)
	allow(true, true)
	b.release(true) // the caller cancelled: nothing learnt
	allow(true, true)
	b.success(true)
	if b.isOpen() {
		t.Fatal("open after a probe's success")
	}
	allow(true, false)
	b.success(false)
	if want := []bool{true, false}; len(changes) != 2 || changes[0] != want[0] || changes[1] != want[1] {
		t.Fatalf("changes heard %v, want %v", changes, want)
	}
}
