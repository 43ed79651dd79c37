package httplimit

import (
	"context"
	"time"
)

// SetSleep makes m wait with sleep instead of a timer (for the leaky
// bucket's Delay), so that tests see each wait without taking it.
func SetSleep(m *Middleware, sleep func(context.Context, time.Duration) bool) { m.sleep = sleep }
