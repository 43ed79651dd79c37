// Package redislease is the lease Coordinator on Redis: each round of the
// protocol (lease.Coordinator.Sync, Leave) is one Lua script call, one
// round trip, reading Redis's TIME. A group's keys share one hash tag, so
// Redis Cluster works.
//
// What the script keeps per group: the members with their heartbeat's
// expiry and their wants, each partition's holder (member, epoch, expiry),
// each partition's last epoch, and which partitions were given back
// gracefully. Keys expire after ten TTLs (at least a minute) without a
// round. Epochs are HINCRBY counters that never fall behind TIME in
// microseconds, so an epoch granted after Redis lost its data, or came
// back from an older copy, is still above every epoch granted before. A
// group with no round for more than a TTL trusts none of its "given back"
// marks: after a restart from a snapshot or an asynchronous failover a
// mark may predate an acquisition Redis lost. Losses of writes younger
// than a TTL are not detected: run Redis without persistence (a restart
// loses everything, which is safe) or with appendfsync always, and fail
// over only with WAIT-acknowledged replicas. A TIME
// earlier than the latest the group saw is taken as the latest (a clock
// stepped back never lengthens a lease); a clock stepped forward shortens
// leases in Redis's view, which the Holder's full-TTL quarantine absorbs
// for steps up to one TTL.
//
// A round from a member that cuts the group otherwise (other partitions
// or TTL) than its live members is refused with a MISMATCH error: its
// shares would not add up to the limit. (The limit's rate is the
// members' own: give them all the same.)
//
// Redis must not be configured to evict these keys (maxmemory-policy
// noeviction or volatile-* with room to spare): a lost holder record makes
// the next acquisition a takeover, which is safe but costs a quarantine.
package redislease

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/redisscript"
)

//go:embed sync.lua
var syncSource string

var syncScript = redisscript.NewScript(syncSource)

// Options configure a Coordinator.
type Options struct {
	// Client runs the script: redisstore.Dial's Conn, or a go-redis client
	// through redisstore/goredis. Required. It must not retry calls.
	Client redisscript.Client
	// Prefix starts every key; default "sluice:lease:". At most 64 bytes,
	// without { or }.
	Prefix string
	// Timeout bounds each call when the caller's context has a later
	// deadline or none; default 1s.
	Timeout time.Duration
}

// Coordinator is the Redis lease Coordinator. It is safe for concurrent
// use.
type Coordinator struct {
	o Options
}

var _ lease.Coordinator = (*Coordinator)(nil)

// DefaultPrefix is Options.Prefix's default.
const DefaultPrefix = "sluice:lease:"

// New checks o and returns a Coordinator.
func New(o Options) (*Coordinator, error) {
	if o.Client == nil {
		return nil, fmt.Errorf("redislease: %w: a Client is required", lease.ErrInvalid)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if len(o.Prefix) > 64 || containsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("redislease: %w: prefix %q: at most 64 bytes, without { or }", lease.ErrInvalid, o.Prefix)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("redislease: %w: timeout %v is negative", lease.ErrInvalid, o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	return &Coordinator{o: o}, nil
}

func containsAny(s, chars string) bool {
	for _, c := range chars {
		for _, r := range s {
			if r == c {
				return true
			}
		}
	}
	return false
}

// Sync is one round of the protocol: one script call. See
// lease.Coordinator.
func (c *Coordinator) Sync(ctx context.Context, req lease.SyncRequest) (lease.SyncReply, error) {
	if err := req.Validate(); err != nil {
		return lease.SyncReply{}, fmt.Errorf("redislease: sync: %w", err)
	}
	reply, err := c.run(ctx, req.Group, req.Member, req.Want, req.Acquire, req.Held, req.Release)
	if err != nil {
		return lease.SyncReply{}, fmt.Errorf("redislease: sync: %w", err)
	}
	out, err := parseReply(reply, req.Group.Partitions)
	if err != nil {
		return lease.SyncReply{}, fmt.Errorf("redislease: sync: %w", err)
	}
	if out.Self < 0 {
		return lease.SyncReply{}, fmt.Errorf("redislease: sync: %w: the reply does not list the member", redisscript.ErrBadReply)
	}
	return out, nil
}

// Leave gives held back and forgets the member: one script call.
func (c *Coordinator) Leave(ctx context.Context, g lease.Group, member string, held []lease.Grant) error {
	req := lease.SyncRequest{Group: g, Member: member, Release: held}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("redislease: leave: %w", err)
	}
	if _, err := c.run(ctx, g, member, -1, 0, nil, held); err != nil {
		return fmt.Errorf("redislease: leave: %w", err)
	}
	return nil
}

func (c *Coordinator) keys(g lease.Group) []string {
	base := c.o.Prefix + "{" + g.Name + "}:"
	return []string{base + "members", base + "wants", base + "holders", base + "epochs", base + "given", base + "clock", base + "shape"}
}

func (c *Coordinator) run(ctx context.Context, g lease.Group, member string, want, acquire int, held, release []lease.Grant) ([]int64, error) {
	args := make([]string, 0, 7+2*(len(held)+len(release)))
	args = append(args, member, strconv.FormatInt(g.TTL.Milliseconds(), 10), strconv.Itoa(g.Partitions), strconv.Itoa(want), strconv.Itoa(acquire))
	for _, list := range [][]lease.Grant{held, release} {
		args = append(args, strconv.Itoa(len(list)))
		for _, gr := range list {
			args = append(args, strconv.Itoa(gr.Partition), strconv.FormatUint(gr.Epoch, 10))
		}
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > c.o.Timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.o.Timeout)
		defer cancel()
	}
	keys := c.keys(g)
	return syncScript.Run(ctx, c.o.Client, keys, args)
}

// parseReply reads the script's reply (see sync.lua).
func parseReply(r []int64, parts int) (lease.SyncReply, error) {
	bad := func(why string) (lease.SyncReply, error) {
		return lease.SyncReply{}, fmt.Errorf("%w: %s", redisscript.ErrBadReply, why)
	}
	var out lease.SyncReply
	i := 0
	next := func() (int64, bool) {
		if i >= len(r) {
			return 0, false
		}
		i++
		return r[i-1], true
	}
	self, ok1 := next()
	n, ok2 := next()
	if !ok1 || !ok2 || n < 0 || n > int64(len(r)) || self < -1 || self >= n {
		return bad("members")
	}
	out.Self = int(self)
	for range n {
		w, ok := next()
		if !ok || w < 0 || w > int64(parts) {
			return bad("wants")
		}
		out.Wants = append(out.Wants, int(w))
	}
	n, ok := next()
	if !ok || n < 0 || n > int64(parts) {
		return bad("renewed")
	}
	for range n {
		p, ok1 := next()
		e, ok2 := next()
		if !ok1 || !ok2 || p < 0 || p >= int64(parts) || e <= 0 {
			return bad("renewed")
		}
		out.Renewed = append(out.Renewed, lease.Grant{Partition: int(p), Epoch: uint64(e)})
	}
	n, ok = next()
	if !ok || n < 0 || n > int64(parts) {
		return bad("acquired")
	}
	for range n {
		p, ok1 := next()
		e, ok2 := next()
		t, ok3 := next()
		if !ok1 || !ok2 || !ok3 || p < 0 || p >= int64(parts) || e <= 0 || t < 0 || t > 1 {
			return bad("acquired")
		}
		out.Acquired = append(out.Acquired, lease.Acquired{Grant: lease.Grant{Partition: int(p), Epoch: uint64(e)}, TakenOver: t == 1})
	}
	if i != len(r) {
		return bad("trailing values")
	}
	return out, nil
}
