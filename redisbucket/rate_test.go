package redisbucket

import (
	"math"
	"testing"
	"time"
)

// The estimate on a timeline of grants, x/time/rate style: instants from
// t0, one second apart.
func TestEWMA(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tau := RateWindow.Seconds()
	steady := func(e *ewma, from, to, every, n float64) {
		for s := from; s <= to+1e-9; s += every {
			e.add(at(s), n)
		}
	}
	for _, tc := range []struct {
		name   string
		grants func(e *ewma)
		at     float64
		want   float64
		tol    float64 // the lumps: a grant of 10 adds 10/τ = 5/s at once
	}{
		{"nothing", func(*ewma) {}, 10, 0, 0},
		// One grant of 10 tokens at t0: 10/τ, decayed, corrected for τ.
		{"one grant, read at once", func(e *ewma) { e.add(at(0), 10) }, 0, 10 / tau / (1 - math.Exp(-1)), 1e-9},
		{"one grant, read τ later", func(e *ewma) { e.add(at(0), 10) }, tau, 10 / tau * math.Exp(-1) / (1 - math.Exp(-1)), 1e-9},
		// 10 tokens every 100 ms for 20 s: 100/s, whatever the phase.
		{"steady 100/s", func(e *ewma) { steady(e, 0.1, 20, 0.1, 10) }, 20, 100, 5},
		{"steady 100/s, from τ on", func(e *ewma) { steady(e, 0.1, 2, 0.1, 10) }, 2, 100, 5},
		// The rate halves at 20 s: after 3τ the estimate is within 5% (of
		// the change) and a lump.
		{"halved", func(e *ewma) { steady(e, 0.1, 20, 0.1, 10); steady(e, 20.2, 26, 0.2, 10) }, 26, 50, 50*math.Exp(-3) + 5},
		// Grants stop: the estimate decays by e every τ.
		{"stopped", func(e *ewma) { steady(e, 0.1, 20, 0.1, 10) }, 20 + tau, 100 / math.E, 5 / math.E},
		// A grant stamped before the last (a clock that stepped back) adds
		// without decay.
		{"clock back", func(e *ewma) { e.add(at(5), 10); e.add(at(4), 10) }, 5, 20 / tau / (1 - math.Exp(-5/tau)), 1e-9},
	} {
		e := newEWMA(RateWindow, t0)
		tc.grants(&e)
		if got := e.at(at(tc.at)); math.Abs(got-tc.want) > tc.tol {
			t.Errorf("%s: at t0+%vs: %v, want %v ± %v", tc.name, tc.at, got, tc.want, tc.tol)
		}
	}
}
