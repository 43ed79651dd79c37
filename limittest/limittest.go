// Package limittest is the conformance suite of sluice.Limiter: every store
// (memstore, redisstore, …) must pass Run unchanged.
//
// The suite drives a store through exact timelines on a fake clock (each
// algorithm's worked examples, such as a bucket of 5 refilled at 2 per second
// admitting 5 at once and then one every 500 ms, and x/time/rate's published
// tables), checks several limits per request, compares the store with the
// pure algorithms and with x/time/rate on random traces, races 64 goroutines
// for the last tokens of a key, and feeds it bad input.
package limittest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Epoch is the instant timelines start from: 2026-01-01T00:00:00Z, aligned
// to every window the tables use (epoch-aligned windows start there).
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewLimiter returns a fresh Limiter for one test that reads its time from
// now. It registers its own cleanup (t.Cleanup) and fails t if it cannot
// build the store.
type NewLimiter func(t *testing.T, now func() time.Time) sluice.Limiter

// Run runs the whole conformance suite against the stores newLimiter makes.
// Subtests run in parallel; each uses its own keys, unique to the run, so
// stores that outlive a test (Redis) need no cleanup.
func Run(t *testing.T, newLimiter NewLimiter) {
	s := &suite{new: newLimiter, prefix: runPrefix()}
	t.Run("Timelines", s.timelines)
	t.Run("XTimeRateTables", s.xTimeRateTables)
	t.Run("XTimeRateDifferential", s.xTimeRateDifferential)
	t.Run("MatchesPureAlgorithms", s.matchesPureAlgorithms)
	t.Run("AllowAll", s.allowAll)
	t.Run("Concurrency", s.concurrency)
	t.Run("ClockBackwards", s.clockBackwards)
	t.Run("ParameterChange", s.parameterChange)
	t.Run("Identities", s.identities)
	t.Run("LastTokenRace", s.lastTokenRace)
	t.Run("BadInput", s.badInput)
	t.Run("Charge", s.charge)
	t.Run("Inspect", s.inspect)
}

type suite struct {
	new    NewLimiter
	prefix string
}

// store makes a fresh limiter on a fake clock at Epoch.
func (s *suite) store(t *testing.T) (sluice.Limiter, *Clock) {
	t.Helper()
	c := NewClock(Epoch)
	return s.new(t, c.Now), c
}

// key returns a key unique to this run and test.
func (s *suite) key(t *testing.T, k string) string {
	return s.prefix + "/" + t.Name() + "/" + k
}

// seed is the seed of the random traces: 7, or SLUICE_LIMITTEST_SEED to
// explore others (a failure names the seed to reproduce it).
func seed(t *testing.T) uint64 {
	s, err := strconv.ParseUint(os.Getenv("SLUICE_LIMITTEST_SEED"), 10, 64)
	if err != nil {
		return 7
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("random traces from SLUICE_LIMITTEST_SEED=%d", s)
		}
	})
	return s
}

func runPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "limittest-" + hex.EncodeToString(b[:])
}

// Clock is a fake clock that tests set by hand. It is safe for concurrent
// use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set sets the clock's time; it may go backwards.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
