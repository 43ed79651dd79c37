package redisbucket

import "github.com/sluicehq/sluice/internal/units"

// Stats are a Budget's counters since New.
type Stats struct {
	// RoundTrips counts the calls to Redis: each EVALSHA, and the EVAL
	// that follows a NOSCRIPT answer.
	RoundTrips int64
	// Slices counts the answers that granted tokens, Denials those that
	// granted none (the bucket held less than the Wait was missing), and
	// Failures the calls that got no usable answer (Wait returned their
	// error).
	Slices, Denials, Failures int64
	// Waits counts the times a Wait slept until the bucket would hold a
	// slice.
	Waits int64
	// Granted is the tokens the shared bucket granted this process,
	// Admitted the tokens Waits spent, and Held the difference: what the
	// process holds, part of the fleet's extra burst.
	Granted, Admitted, Held float64
}

// Stats returns the counters. Safe for concurrent use.
func (b *Budget) Stats() Stats {
	admitted := b.stats.admitted.Load() // first: granted is read later, so never less
	granted := b.stats.granted.Load()
	return Stats{
		RoundTrips: b.stats.roundTrips.Load(),
		Slices:     b.stats.slices.Load(),
		Denials:    b.stats.denials.Load(),
		Failures:   b.stats.failures.Load(),
		Waits:      b.stats.waits.Load(),
		Granted:    units.ToCost(granted),
		Admitted:   units.ToCost(admitted),
		Held:       units.ToCost(granted - admitted),
	}
}
