package redisscript

import (
	"context"

	"github.com/sluicehq/sluice"
)

// What the external tests need of the package's insides.

// OpUndo is the op of an undo, as a Client sees it in ARGV[3].
const OpUndo = string(opUndo)

// ScriptOf returns the source and SHA1 of the script that decides calls
// whose limits all use algorithm a.
func ScriptOf(a sluice.Algorithm) (src, sha string) {
	return perAlgorithm[a].src, perAlgorithm[a].sha
}

// StateKey returns the Redis key of key's state under l, and its hash
// slot.
func (s *Store) StateKey(l sluice.Limit, key string) (string, uint16, error) {
	c, err := s.compile(l)
	if err != nil {
		return "", 0, err
	}
	k, slot := s.keys.stateKey(c.limitPart, key)
	return k, slot, nil
}

// AllowNow decides as Allow does when Redis answers (no deny cache, no
// policy), and also returns the instant of the script call that decided
// (Redis TIME, µs): what a linearizability check orders decisions by.
func (s *Store) AllowNow(ctx context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, int64, error) {
	var r request
	if err := s.resolve(&r, key, limit, cost); err != nil {
		return sluice.Decision{}, 0, err
	}
	var res [1]result
	if err := s.decideCall(ctx, sluice.AllOrNothing, []request{r}, res[:]); err != nil {
		return sluice.Decision{}, 0, err
	}
	d, err := s.decision(&r, res[0])
	return d, res[0].now, err
}

// BatchAlways makes every decision of s go through the batch script (the
// coalesced path), even alone: the conformance suite's tables then test it.
func (s *Store) BatchAlways() { s.batchAlways = true }
