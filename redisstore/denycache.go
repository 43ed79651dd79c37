package redisstore

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// denyCache remembers, in process, keys Redis rejected until a known
// instant, and answers them itself until then: a hammering client costs
// no round trip. Bounded: past its size it forgets an entry at random
// (the next call asks Redis again, which is only slower). Safe for
// concurrent use.
type denyCache struct {
	mu      sync.Mutex
	size    int
	entries map[string]denied
}

type denied struct {
	until time.Time // local clock
	d     sluice.Decision
}

func newDenyCache(size int) *denyCache {
	return &denyCache{size: size, entries: make(map[string]denied)}
}

// get returns the cached rejection of key, its durations aged to now.
func (c *denyCache) get(key string, now time.Time) (sluice.Decision, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok && !now.Before(e.until) {
		delete(c.entries, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return sluice.Decision{}, false
	}
	d := e.d
	left := e.until.Sub(now)
	d.ResetAfter = max(0, d.ResetAfter-(d.RetryAfter-left))
	d.RetryAfter = left
	return d, true
}

// put remembers a rejection that lasts d.RetryAfter from now.
func (c *denyCache) put(key string, d sluice.Decision, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.size {
		for k := range c.entries { // a random entry
			delete(c.entries, k)
			break
		}
	}
	c.entries[key] = denied{until: now.Add(d.RetryAfter), d: d}
}
