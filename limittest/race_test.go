package limittest

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// naiveLimiter is the negative control of the race: a naive
// read-then-write on a shared counter, with a yield standing for the round
// trip between the read and the write.
type naiveLimiter struct {
	sluice.Limiter // unused methods
	mu             sync.Mutex
	used           map[string]float64
}

func (n *naiveLimiter) Allow(_ context.Context, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	n.mu.Lock()
	used := n.used[key]
	n.mu.Unlock()
	runtime.Gosched()
	if used+cost > limit.Capacity() {
		return sluice.Decision{}, nil
	}
	n.mu.Lock()
	n.used[key] = used + cost
	n.mu.Unlock()
	return sluice.Decision{Allowed: true}, nil
}

// The race harness catches a limiter that is not atomic.
func TestRaceForLastTokensCatchesReadThenWrite(t *testing.T) {
	t.Parallel()
	naive := &naiveLimiter{used: map[string]float64{}}
	limit := lim("race", sluice.TokenBucket, 100, time.Hour, 0)
	worst := 0
	for trial := range RaceTrials {
		worst = max(worst, RaceForLastTokens(naive, "trial-"+strconv.Itoa(trial), limit, 64, 4))
	}
	if worst <= 100 {
		t.Fatalf("the read-then-write limiter admitted at most %d of capacity 100 in %d trials; the harness cannot see a race", worst, RaceTrials)
	}
	t.Logf("read-then-write admitted up to %d of capacity 100", worst)
}
