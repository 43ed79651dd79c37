package limittest

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// RaceTrials is how many times LastTokenRace races for a key per algorithm.
var RaceTrials = 20

// lastTokenRace: 64 goroutines race, on a frozen clock, for a key whose
// capacity is 100 (each trying 4 times, 256 attempts); exactly 100 must be
// admitted, in every trial and for every algorithm.
func (s *suite) lastTokenRace(t *testing.T) {
	t.Parallel()
	for _, alg := range Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, _ := s.store(t)
			limit := lim("race", alg, 100, time.Hour, 0)
			for trial := range RaceTrials {
				if got := RaceForLastTokens(l, s.key(t, "trial-"+strconv.Itoa(trial)), limit, 64, 4); got != 100 {
					t.Fatalf("trial %d: %d admitted, want exactly the capacity, 100", trial, got)
				}
			}
		})
	}
}

// RaceForLastTokens starts goroutines that each try attempts unit calls on
// key at once (released together by a barrier) and returns how many were
// admitted. With a frozen clock, an atomic Limiter admits exactly the
// capacity when goroutines × attempts exceed it.
func RaceForLastTokens(l sluice.Limiter, key string, limit sluice.Limit, goroutines, attempts int) int {
	var admitted atomic.Int64
	var start, done sync.WaitGroup
	start.Add(1)
	for range goroutines {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			for range attempts {
				if d, err := l.Allow(context.Background(), key, limit, 1); err == nil && d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	start.Done()
	done.Wait()
	return int(admitted.Load())
}
