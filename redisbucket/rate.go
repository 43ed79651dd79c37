package redisbucket

import (
	"math"
	"time"
)

// RateWindow is the time constant of Budget.Rate's moving average.
const RateWindow = 2 * time.Second

// ewma estimates a rate from irregular grants: each grant of n tokens adds
// n/τ to a sum that decays by e^(−Δt/τ), so a steady rate R keeps the sum
// at R × (1 − e^(−(t − start)/τ)). The estimate divides by that factor,
// with t − start at least τ, so that it reads R from τ after start on (an
// uncorrected average would read 63% of R then). Not safe for concurrent
// use.
type ewma struct {
	tau   time.Duration
	start time.Time // when the estimate started (New)
	last  time.Time // of sum
	sum   float64   // tokens per second at last, uncorrected
}

func newEWMA(tau time.Duration, start time.Time) ewma {
	return ewma{tau: tau, start: start, last: start}
}

// add records n tokens granted at t.
func (e *ewma) add(t time.Time, n float64) {
	e.sum = e.decayed(t) + n/e.tau.Seconds()
	if t.After(e.last) {
		e.last = t
	}
}

// at returns the estimate at t, in tokens per second.
func (e *ewma) at(t time.Time) float64 {
	ran := max(t.Sub(e.start), e.tau)
	return e.decayed(t) / (1 - math.Exp(-ran.Seconds()/e.tau.Seconds()))
}

// decayed is the sum decayed to t (a t before last decays nothing).
func (e *ewma) decayed(t time.Time) float64 {
	if d := t.Sub(e.last); d > 0 {
		return e.sum * math.Exp(-d.Seconds()/e.tau.Seconds())
	}
	return e.sum
}
