package lease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// Options configure a Holder. Zero fields mean the documented default.
type Options struct {
	// Coordinator grants the partitions (redislease, etcdlease). Required.
	Coordinator Coordinator

	// Limit is the fleet's limit: its Name names the group, Quota per
	// Window is L and Capacity (Burst, or Quota) is B. A TokenBucket or
	// GCRA limit. Required.
	Limit sluice.Limit

	// Partitions is P, how many parts the limit is cut into: each a token
	// bucket of L/P per Window with burst B/P. Default 8. More partitions
	// follow demand more finely and cost nothing per decision; each must
	// hold at least one unit of Quota and of Burst.
	Partitions int

	// TTL is how long a lease lasts after its acquire or renew was sent.
	// Default 2s; at least MinTTL, whole milliseconds.
	TTL time.Duration

	// Renew is how often the Holder renews its leases, reports its demand
	// and rebalances. Default TTL/3; must be less than TTL/2, so that one
	// late or lost renew does not lose the leases.
	Renew time.Duration

	// Drift is the clock-drift margin added to the quarantine of a
	// partition taken over: how far this process's clock and the
	// Coordinator's may disagree about a TTL. Default max(50ms, TTL/20);
	// negative is refused.
	Drift time.Duration

	// Member identifies this process in the group: 1 to MaxMemberLen bytes
	// of letters, digits and "_-.:/". Default: a random ID, new at each
	// start. It is stored in the Coordinator: never a raw identity.
	Member string

	// Demand, when set, is the rate this process wants to spend, in cost
	// per second, read at each renew (a relay reports its backlog this
	// way). Nil: the Holder measures it from what Take and Wait are asked,
	// and asks for every partition it can get while a Wait is blocked.
	Demand func() float64

	// Now is the clock; default: the runtime's monotonic clock, read
	// without time.Now's wall-clock half (internal/monoclock). The Holder
	// measures deadlines and quarantines with it, so a clock set here must
	// never step back (its UnixNano is read). Tests on a testing/synctest
	// clock set time.Now.
	Now func() time.Time

	// Logger receives one line per change of the Coordinator's
	// reachability; default slog.Default().
	Logger *slog.Logger

	// naive makes the Holder trust a lease until the Coordinator says it
	// is lost: no local deadline, no quarantine. Only the negative control
	// of the fault tests sets it (export_test.go).
	naive bool
}

// Defaults.
const (
	DefaultPartitions = 8
	DefaultTTL        = 2 * time.Second
)

// withDefaults fills the zero fields and checks the rest.
func (o Options) withDefaults() (Options, error) {
	if o.Coordinator == nil {
		return o, fmt.Errorf("%w: options: a Coordinator is required", ErrInvalid)
	}
	if err := o.Limit.Validate(); err != nil {
		return o, fmt.Errorf("%w: limit: %w", ErrInvalid, err)
	}
	if a := o.Limit.Algorithm; a != sluice.TokenBucket && a != sluice.GCRA {
		return o, fmt.Errorf("%w: limit %q: a leased limit is a token_bucket or gcra, not %v", ErrInvalid, o.Limit.Name, a)
	}
	if o.Partitions == 0 {
		o.Partitions = DefaultPartitions
	}
	if o.Partitions < 1 || o.Partitions > MaxPartitions {
		return o, fmt.Errorf("%w: partitions %d: want 1 to %d", ErrInvalid, o.Partitions, MaxPartitions)
	}
	if float64(o.Partitions) > o.Limit.Quota {
		return o, fmt.Errorf("%w: partitions %d exceed the quota %g of limit %q: each partition must hold at least one unit per window; use fewer partitions", ErrInvalid, o.Partitions, o.Limit.Quota, o.Limit.Name)
	}
	if float64(o.Partitions) > o.Limit.Capacity() {
		return o, fmt.Errorf("%w: partitions %d exceed the burst %g of limit %q: each partition's burst B/P must hold at least one unit; raise the burst or use fewer partitions", ErrInvalid, o.Partitions, o.Limit.Capacity(), o.Limit.Name)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.Renew == 0 {
		o.Renew = o.TTL / 3
	}
	if o.Renew < 0 || 2*o.Renew >= o.TTL {
		return o, fmt.Errorf("%w: renew interval %v with ttl %v: the renew interval must be positive and less than half the TTL, or one late renew loses the leases", ErrInvalid, o.Renew, o.TTL)
	}
	if o.Drift < 0 {
		return o, fmt.Errorf("%w: drift margin %v: must not be negative", ErrInvalid, o.Drift)
	}
	if o.Drift == 0 {
		o.Drift = max(50*time.Millisecond, o.TTL/20)
	}
	if o.Member == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Member = hex.EncodeToString(b[:])
	}
	if err := ValidateMember(o.Member); err != nil {
		return o, err
	}
	if err := o.group().Validate(); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

func (o Options) group() Group {
	return Group{Name: o.Limit.Name, Partitions: o.Partitions, TTL: o.TTL}
}

// perSecond is L in cost per second.
func (o Options) perSecond() float64 { return o.Limit.Quota / o.Limit.Window.Seconds() }

// wantFor converts a rate wanted into partitions: 10 % above the rate,
// rounded up, at most P.
func (o Options) wantFor(rate float64) int {
	if rate <= 0 || math.IsNaN(rate) {
		return 0
	}
	per := o.perSecond() / float64(o.Partitions)
	return int(min(float64(o.Partitions), math.Ceil(rate*1.1/per)))
}
