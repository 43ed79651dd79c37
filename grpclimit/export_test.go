package grpclimit

import (
	"context"
	"time"
)

// SetSleep makes in wait with sleep instead of a timer (for the leaky
// bucket's Delay), so that tests see each wait without taking it. Call it
// before the server starts.
func SetSleep(in *Interceptor, sleep func(context.Context, time.Duration) error) { in.sleep = sleep }
