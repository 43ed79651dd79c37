package redisscript

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// denyCache remembers, in process, keys Redis rejected until a known
// instant, and answers them itself until then: a hammering client costs
// no round trip. Only a cost at least the rejected one is answered (a
// smaller one may fit), and only for limits that nothing but time frees
// (not Concurrency, whose slots a release frees at any moment). Bounded: past its size it forgets an entry at random
// (the next call asks Redis again, which is only slower). Safe for
// concurrent use.
type denyCache struct {
	mu      sync.Mutex
	size    int
	entries map[string]denied
}

type denied struct {
	until time.Time // local clock
	cost  int64     // atoms: the cost rejected
	d     sluice.Decision
}

func newDenyCache(size int) *denyCache {
	return &denyCache{size: size, entries: make(map[string]denied)}
}

// get returns the cached rejection of cost on key, its durations aged to
// now.
func (c *denyCache) get(key string, cost int64, now time.Time) (sluice.Decision, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok && !now.Before(e.until) {
		delete(c.entries, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || cost < e.cost {
		return sluice.Decision{}, false
	}
	d := e.d
	left := e.until.Sub(now)
	d.ResetAfter = max(0, d.ResetAfter-(d.RetryAfter-left))
	d.RetryAfter = left
	return d, true
}

// put remembers a rejection of cost that lasts d.RetryAfter from now.
func (c *denyCache) put(key string, cost int64, d sluice.Decision, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.size {
		for k := range c.entries { // a random entry
			delete(c.entries, k)
			break
		}
	}
	c.entries[key] = denied{until: now.Add(d.RetryAfter), cost: cost, d: d}
}

// forget drops key's cached rejection (its state was reset).
func (c *denyCache) forget(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}
