package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memlease"
	"github.com/sluicehq/sluice/redislease"
	"github.com/sluicehq/sluice/redisstore"
)

// Fleet is how this relay shares targets' limits with other relays
// (package lease): the Redis where the relays hold their leases
// (redislease) and this relay's ID among them. A target shares one of its
// limits when it has a fleet block (TargetFleet).
type Fleet struct {
	// Redis is where the relays meet, in the shape every sluice file
	// gives Redis (addrs, username, password_file or password_env, db,
	// tls, sentinel, connect_timeout). Required in a fleet section;
	// redis: {} is 127.0.0.1:6379 in clear text.
	Redis *redisconfig.Connection `yaml:"redis"`
	// Prefix starts every lease key; default "sluice:lease:"
	// (redislease.DefaultPrefix). At most 64 bytes, without { or }.
	Prefix string `yaml:"prefix"`
	// Member is this relay's ID among the relays sharing a limit: 1 to 64
	// bytes of letters, digits and "_-.:/", different on each relay.
	// Default: a random ID, new at each start. It is stored in Redis.
	Member string `yaml:"member"`
}

// TargetFleet shares one of a target's limits with the other relays of
// the fleet: the limit is cut into Partitions that the relays hold under
// leases (lease.Options), so that the fleet as a whole keeps to it.
type TargetFleet struct {
	// Limit names the limit shared, one of the target's; default its
	// fastest (the highest quota per second). A token_bucket or a gcra.
	Limit string `yaml:"limit"`
	// Partitions is how many parts the limit is cut into; default 8. Each
	// must hold at least one unit of the limit's quota and of its burst.
	Partitions int `yaml:"partitions"`
	// TTL is how long a lease lasts unless renewed; default 2s, at least
	// 50ms, whole milliseconds.
	TTL Duration `yaml:"ttl"`
	// Renew is how often the leases are renewed; default ttl/3 (in whole
	// milliseconds, rounded down), less than ttl/2.
	Renew Duration `yaml:"renew"`
	// Drift is the clock-drift margin added to the quarantine of a
	// partition taken over from a relay that vanished; default
	// max(50ms, ttl/20). Zero and negative margins are refused.
	Drift *Duration `yaml:"drift"`
}

// Defaults of a target's fleet block: package lease's.
const (
	DefaultPartitions = lease.DefaultPartitions
	DefaultTTL        = lease.DefaultTTL
)

// maxGroupLen bounds a lease group's name (lease.Group.Name).
const maxGroupLen = 128

// GroupPrefix starts the lease group of every limit a relay shares:
// relay.<target>.<limit>.
const GroupPrefix = "relay."

// Lease is a target's share of a fleet limit, as the file describes it.
type Lease struct {
	// Target is the target's name.
	Target string
	// Options are its Holder's options, every default filled in but for
	// Member when the file names none (lease then makes one at random).
	// Options.Limit is the target's limit under the lease group's name
	// (GroupPrefix + target + "." + limit); Limit names the limit as the
	// file does. The command sets Coordinator and Logger.
	Options lease.Options
	Limit   string
}

// Leases are the targets' shares of fleet limits, in the order of the
// targets; none without a fleet block.
func (f *File) Leases() []Lease {
	var out []Lease
	for i, t := range f.Targets {
		if t.Fleet != nil {
			l, _ := f.lease(i) // validated by Parse
			out = append(out, l)
		}
	}
	return out
}

// RedisDialOptions reads the fleet's Redis settings — the password file
// or variable, the TLS files, checked at now — and returns
// redisstore.Dial's options. A refusal is an *Error at the line of the
// field under fleet.redis. It is an error to call it without fleet.redis.
func (f *File) RedisDialOptions(now time.Time) (redisstore.DialOptions, error) {
	if f.Fleet == nil || f.Fleet.Redis == nil {
		return redisstore.DialOptions{}, f.errAt("fleet.redis is not set", "fleet")
	}
	o, err := f.Fleet.Redis.DialOptions(now)
	if err != nil {
		return o, f.redisError(err)
	}
	return o, nil
}

// redisError is a redisconfig error at the line of its field under
// fleet.redis.
func (f *File) redisError(err error) error {
	var fe *redisconfig.FieldError
	if !errors.As(err, &fe) {
		return &Error{File: f.name, Line: f.lineOf("fleet", "redis"), Reason: "fleet.redis: " + err.Error(), Err: err}
	}
	path := []any{"fleet", "redis"}
	for _, p := range fe.Path {
		if i, err := strconv.Atoi(p); err == nil {
			path = append(path, i)
		} else {
			path = append(path, p)
		}
	}
	return &Error{File: f.name, Line: f.lineOf(path...), Reason: "fleet.redis." + fe.Error(), Err: err}
}

// validateFleet checks the fleet section and the targets' fleet blocks,
// after the targets' limits.
func (f *File) validateFleet() error {
	// An empty section or block ("fleet:" alone) is one with every
	// default, as {} is; so is an empty redis:.
	if f.Fleet == nil && f.has("fleet") {
		f.Fleet = &Fleet{}
	}
	if f.Fleet != nil && f.Fleet.Redis == nil && f.has("fleet", "redis") {
		f.Fleet.Redis = &redisconfig.Connection{}
	}
	for i := range f.Targets {
		if f.Targets[i].Fleet == nil && f.has("targets", i, "fleet") {
			f.Targets[i].Fleet = &TargetFleet{}
		}
	}
	if fl := f.Fleet; fl != nil {
		if fl.Redis == nil {
			return f.errAt("fleet.redis is required: the Redis where the relays hold their leases (redis: {addrs: [127.0.0.1:6379]})", "fleet")
		}
		if err := fl.Redis.Validate(); err != nil {
			return f.redisError(err)
		}
		if _, err := redislease.New(redislease.Options{Client: noRedis{}, Prefix: fl.Prefix}); err != nil {
			return f.errAt("fleet.prefix: "+leaseReason(err), "fleet", "prefix")
		}
		if fl.Member != "" {
			if err := lease.ValidateMember(fl.Member); err != nil {
				return f.errAt("fleet.member: "+leaseReason(err), "fleet", "member")
			}
		}
	}
	for i, t := range f.Targets {
		if t.Fleet == nil {
			continue
		}
		if f.Fleet == nil {
			return f.errAt(fmt.Sprintf("target %s: fleet: a target shares its limit through the top-level fleet section, which is missing (fleet: {redis: {addrs: [127.0.0.1:6379]}})", t.Name), "targets", i, "fleet")
		}
		if _, err := f.lease(i); err != nil {
			return err
		}
	}
	return nil
}

// lease is the share of targets[i], which has a fleet block, checked by
// lease.New itself.
func (f *File) lease(i int) (Lease, error) {
	t := f.Targets[i]
	b := *t.Fleet
	at := func(field string) []any {
		if field == "" {
			return []any{"targets", i, "fleet"}
		}
		return []any{"targets", i, "fleet", field}
	}
	bad := func(field, reason string) (Lease, error) {
		return Lease{}, f.errAt(fmt.Sprintf("target %s: fleet: %s", t.Name, reason), at(field)...)
	}
	lim, ok := sharedLimit(t)
	if !ok {
		if b.Limit == "" {
			return bad("", "the target has no limits to share: give it limits: (the fleet's), or leave fleet: out")
		}
		return bad("limit", fmt.Sprintf("limit %q: the target has no limit of that name (it has %s)", b.Limit, limitNames(t)))
	}
	group := GroupPrefix + t.Name + "." + lim.Name
	if len(group) > maxGroupLen {
		return bad("limit", fmt.Sprintf("the lease group %s… is %d bytes, more than %d: shorten the target's or the limit's name", group[:40], len(group), maxGroupLen))
	}
	if b.Partitions == 0 {
		b.Partitions = DefaultPartitions
	}
	if b.TTL < 0 {
		return bad("ttl", fmt.Sprintf("ttl %v: must be positive (absent: %v)", time.Duration(b.TTL), DefaultTTL))
	}
	if b.TTL == 0 {
		b.TTL = Duration(DefaultTTL)
	}
	if b.Renew == 0 {
		b.Renew = Duration((time.Duration(b.TTL) / 3).Truncate(time.Millisecond))
	}
	drift := max(50*time.Millisecond, time.Duration(b.TTL)/20)
	if b.Drift == nil && f.has(at("drift")...) {
		return bad("drift", "drift has no value: give a margin (100ms), or leave drift out for max(50ms, ttl/20)")
	}
	if b.Drift != nil {
		drift = time.Duration(*b.Drift)
		if drift == 0 {
			return bad("drift", "drift 0s: refused: a drift margin of zero assumes perfect clocks (leave drift out for max(50ms, ttl/20))")
		}
	}
	name := lim.Name
	lim.Name = group
	o := lease.Options{
		Limit: lim, Partitions: b.Partitions, TTL: time.Duration(b.TTL), Renew: time.Duration(b.Renew), Drift: drift,
		Member: f.Fleet.Member,
	}
	check := o
	check.Coordinator, check.Logger = memlease.New(nil), slog.New(slog.DiscardHandler)
	if _, err := lease.New(check); err != nil {
		reason := leaseReason(err)
		return bad(leaseField(reason), reason)
	}
	return Lease{Target: t.Name, Options: o, Limit: name}, nil
}

// sharedLimit is the target's limit its fleet block names, or its fastest.
func sharedLimit(t Target) (sluice.Limit, bool) {
	var out sluice.Limit
	found, fastest := false, 0.0
	for _, l := range t.Limits {
		lim := sluice.Limit{Name: l.Name, Algorithm: l.Algorithm, Quota: l.Quota, Window: time.Duration(l.Window), Burst: l.Burst}
		rate := lim.Quota / lim.Window.Seconds()
		switch {
		case t.Fleet.Limit != "" && l.Name == t.Fleet.Limit:
			return lim, true
		case t.Fleet.Limit == "" && (!found || rate > fastest):
			out, found, fastest = lim, true, rate
		}
	}
	return out, found
}

func limitNames(t Target) string {
	if len(t.Limits) == 0 {
		return "none"
	}
	names := make([]string, len(t.Limits))
	for i, l := range t.Limits {
		names[i] = l.Name
	}
	return strings.Join(names, ", ")
}

// leaseReason is a lease or redislease refusal without the packages'
// prefixes.
func leaseReason(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "redislease: ")
	return strings.TrimPrefix(s, lease.ErrInvalid.Error()+": ")
}

// leaseField is the field of a fleet block a lease.New refusal is about,
// "" for the block.
func leaseField(reason string) string {
	switch {
	case strings.HasPrefix(reason, "partitions"):
		return "partitions"
	case strings.HasPrefix(reason, "renew"):
		return "renew"
	case strings.HasPrefix(reason, "drift"):
		return "drift"
	case strings.HasPrefix(reason, "group") && strings.Contains(reason, "ttl"):
		return "ttl"
	case strings.HasPrefix(reason, "limit") || strings.HasPrefix(reason, "group"):
		return "limit"
	}
	return ""
}

// noRedis stands for a Redis client where redislease.New checks a prefix
// and nothing is called.
type noRedis struct{}

var errNoRedis = errors.New("config: no Redis: the options are only checked")

func (noRedis) EvalSHA(context.Context, string, []string, []string) ([]int64, error) {
	return nil, errNoRedis
}
func (noRedis) Eval(context.Context, string, []string, []string) ([]int64, error) {
	return nil, errNoRedis
}
func (noRedis) Cluster() bool { return false }
