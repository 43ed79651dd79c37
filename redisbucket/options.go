package redisbucket

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/units"
	"github.com/sluicehq/sluice/redisscript"
)

// Options configures a Budget. A zero field means its documented default;
// New validates the rest.
type Options struct {
	// Client runs the script on Redis (a single node, Sentinel's master or
	// a Cluster): redisstore.Dial gives one, redisstore.NewRueidis and
	// redisstore/goredis adapt a client of the program's own. The Budget
	// never closes it. Required.
	Client redisscript.Client
	// Prefix starts the bucket's Redis key, "<Prefix>{<Limit.Name>}": the
	// braces are its Redis Cluster hash tag. Default "sluice:bucket:". It
	// may not contain braces.
	Prefix string
	// Limit is the fleet-wide limit: a TokenBucket or GCRA limit whose
	// Quota per Window is the rate L and whose Burst (0: Quota) is the
	// burst B of the one bucket in Redis. Its Name names the shared limit:
	// every process that shares it uses the same Name, and should use the
	// same Quota, Window and Burst (see the package documentation for a
	// change). Required.
	Limit sluice.Limit
	// Slice is how many tokens one round trip to Redis takes at most, a
	// positive number of at most the burst. Default: L × 100 ms, at least
	// 1, at most the burst. A larger slice makes fewer round trips and a
	// larger extra burst (the package documentation gives the bound). A
	// slice of the whole burst leaves no headroom: a process that asks
	// late finds the bucket full, and the refill meanwhile is lost (a few
	// ms per slice on a loaded machine); half the burst or less avoids
	// that.
	Slice float64
	// Timeout bounds each call to Redis. Default 250 ms.
	Timeout time.Duration
	// Now is the clock that schedules the next call and times Rate.
	// Default time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultPrefix  = "sluice:bucket:"
	DefaultTimeout = 250 * time.Millisecond
	// DefaultSliceTime is the refill time of the default Slice: the slice
	// is L × DefaultSliceTime tokens.
	DefaultSliceTime = 100 * time.Millisecond
)

// ErrInvalid is wrapped by every error about bad options (New: an
// invalid Limit's error also wraps sluice.ErrInvalidLimit) or a bad cost
// (Wait).
var ErrInvalid = errors.New("redisbucket: invalid")

// config is what New derives from Options: the bucket in exact integers
// (see internal/units) and the script's fixed arguments.
type config struct {
	client    redisscript.Client
	key       string
	rate      units.Rate
	burst     int64 // atoms
	capScaled int64 // the burst in the rate's scaled units
	slice     int64 // atoms
	timeout   time.Duration
	now       func() time.Time
	rateArgs  []string // the script's r, w and cap
}

func (o Options) config() (config, error) {
	bad := func(format string, args ...any) (config, error) {
		return config{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if o.Client == nil {
		return bad("Client is nil: a Budget needs a Redis client (redisstore.Dial gives one)")
	}
	if err := o.Limit.Validate(); err != nil {
		return bad("Limit: %w", err)
	}
	l := o.Limit
	if l.Algorithm != sluice.TokenBucket && l.Algorithm != sluice.GCRA {
		return bad("Limit %q: algorithm %v: the shared bucket is a token bucket; use token_bucket or gcra", l.Name, l.Algorithm)
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return bad("Prefix %q contains a brace: the key's hash tag is {<name>}", prefix)
	}
	if o.Timeout < 0 {
		return bad("Timeout %v is negative (0 means %v)", o.Timeout, DefaultTimeout)
	}
	quota, _ := units.FromCost(l.Quota) // Validate checked them
	burst, _ := units.FromCost(l.Capacity())
	rate := units.NewRate(quota, int64(l.Window/time.Microsecond))
	capScaled, _ := rate.Scale(burst)

	slice := o.Slice
	switch {
	case math.IsNaN(slice) || slice < 0 || math.IsInf(slice, 0):
		return bad("Slice %v: must be a positive number of tokens (0 means L × %v)", o.Slice, DefaultSliceTime)
	case slice == 0:
		slice = min(max(l.Quota/l.Window.Seconds()*DefaultSliceTime.Seconds(), 1), l.Capacity())
	case slice > l.Capacity():
		return bad("Slice %v is more than the burst %v: no slice that large ever fits in the bucket", slice, l.Capacity())
	}
	sliceAtoms, ok := units.FromCost(slice)
	if !ok {
		return bad("Slice %v: less than a millionth of a token", o.Slice)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return config{
		client:    o.Client,
		key:       prefix + "{" + l.Name + "}",
		rate:      rate,
		burst:     burst,
		capScaled: capScaled,
		slice:     min(sliceAtoms, burst),
		timeout:   cmp.Or(o.Timeout, DefaultTimeout),
		now:       now,
		rateArgs:  []string{itoa(rate.PerMicro), itoa(rate.PerAtom), itoa(capScaled)},
	}, nil
}
