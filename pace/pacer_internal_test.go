package pace

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
)

// TestRetriesGoFirst: a retry's reservation goes ahead of the first tries
// queued before it (its request has waited already), though not ahead of
// the retries queued before it. One per second: a at 0; then retry1 at 1 s
// and retry2 at 2 s, before b (3 s) and c (4 s), which were queued first.
func TestRetriesGoFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, start := spentPacer(t)
		b, _ := p.Reserve(1)
		c, _ := p.Reserve(1)
		got := make(map[string]time.Duration)
		at := func(name string, ready <-chan struct{}) {
			<-ready
			got[name] = time.Since(start)
		}
		retry := make([]chan struct{}, 2)
		for i := range retry {
			retry[i] = make(chan struct{})
			go func() {
				if _, err := p.wait(context.Background(), 1, true); err != nil {
					t.Error(err)
				}
				close(retry[i])
			}()
			synctest.Wait() // retry1 is queued before retry2
		}
		at("retry1", retry[0])
		at("retry2", retry[1])
		at("b", b.Ready())
		at("c", c.Ready())
		want := map[string]time.Duration{"retry1": time.Second, "retry2": 2 * time.Second, "b": 3 * time.Second, "c": 4 * time.Second}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s granted at %v, want %v", k, got[k], w)
			}
		}
	})
}

// TestRetryFirstOnTheFastPath: a retry that finds the queue empty but must
// wait keeps its rank ahead of a later retry.
func TestRetryFirstOnTheFastPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, start := spentPacer(t)
		r1, _, _ := p.reserve(1, true) // the queue is empty: the fast path
		r2, _, _ := p.reserve(1, true)
		<-r1.Ready()
		if at := time.Since(start); at != time.Second {
			t.Errorf("the first retry granted at %v, want 1s", at)
		}
		<-r2.Ready()
		if at := time.Since(start); at != 2*time.Second {
			t.Errorf("the second retry granted at %v, want 2s", at)
		}
	})
}

// spentPacer is a Pacer of one per second whose one grant is spent, and the
// instant it was.
func spentPacer(t *testing.T) (*Pacer, time.Time) {
	t.Helper()
	p, err := New(Options{Limits: []sluice.Limit{{Name: "api", Quota: 1, Window: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	start := time.Now()
	a, _ := p.Reserve(1)
	<-a.Ready()
	return p, start
}

// TestLateTimer: when the timer fires late (a busy machine), the grant it was
// armed for is charged at the instant it was due, so that the next keeps its
// full interval; one late grant is made up, not a backlog. 50 per second, no
// burst: due at 0, 20, 40, 60 ms.
func TestLateTimer(t *testing.T) {
	for _, c := range []struct {
		name string
		late time.Duration // how late the timer of the 20 ms grant fires
		want []time.Duration
	}{
		{"on time", 0, []time.Duration{0, 20 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond}},
		// Charged at 20 ms: the next is still due at 40 ms (it would be at
		// 45 ms, had the grant been charged when the timer fired).
		{"5 ms late", 5 * time.Millisecond, []time.Duration{0, 25 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond}},
		// Later than an interval: the 40 ms grant goes with it, at 70 ms,
		// and the one after keeps its interval from there; the 60 ms one is
		// not made up.
		{"50 ms late", 50 * time.Millisecond, []time.Duration{0, 70 * time.Millisecond, 70 * time.Millisecond, 90 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, err := New(Options{Limits: []sluice.Limit{{Name: "api", Quota: 50, Window: time.Second}}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				start := time.Now()
				rs := make([]*Reservation, 4)
				for i := range rs {
					rs[i], _ = p.Reserve(1)
				}
				if c.late > 0 {
					p.mu.Lock()
					p.timer.Stop() // the runtime is busy elsewhere
					p.timerAt = time.Time{}
					p.mu.Unlock()
					time.Sleep(20*time.Millisecond + c.late)
					p.fire()
				}
				for i, r := range rs {
					<-r.Ready()
					if got := r.grantedAt.Sub(start); got != c.want[i] {
						t.Errorf("grant %d at %v, want %v", i, got, c.want[i])
					}
				}
			})
		})
	}
}
