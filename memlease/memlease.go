// Package memlease is a lease Coordinator in process memory: the protocol
// of redislease without a server, on a clock of the caller's choice. It
// coordinates Holders of one process only — a simulator's, a test's on a
// fake clock — and passes the same conformance suite (leasetest).
package memlease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// Coordinator keeps groups in memory. The zero value is not usable; call
// New. It is safe for concurrent use.
type Coordinator struct {
	now func() time.Time

	mu     sync.Mutex
	groups map[string]*group
}

type group struct {
	seen    time.Time // the last round
	members map[string]member
	holders map[int]holder
	epochs  map[int]uint64
	given   map[int]bool
}

type member struct {
	want   int
	expiry time.Time
}

type holder struct {
	member string
	epoch  uint64
	expiry time.Time
}

var _ lease.Coordinator = (*Coordinator)(nil)

// New returns a Coordinator reading now (time.Now when nil).
func New(now func() time.Time) *Coordinator {
	if now == nil {
		now = time.Now
	}
	return &Coordinator{now: now, groups: map[string]*group{}}
}

// Forget drops every group's state, as a Redis restart without
// persistence does: the next acquisitions are takeovers.
func (c *Coordinator) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.groups = map[string]*group{}
}

// Sync is one round of the protocol; see lease.Coordinator.
func (c *Coordinator) Sync(ctx context.Context, req lease.SyncRequest) (lease.SyncReply, error) {
	if err := req.Validate(); err != nil {
		return lease.SyncReply{}, fmt.Errorf("memlease: sync: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return lease.SyncReply{}, fmt.Errorf("memlease: sync: %w", err)
	}
	return c.round(req, false), nil
}

// Leave gives held back and forgets the member.
func (c *Coordinator) Leave(ctx context.Context, g lease.Group, id string, held []lease.Grant) error {
	req := lease.SyncRequest{Group: g, Member: id, Release: held}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("memlease: leave: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memlease: leave: %w", err)
	}
	c.round(req, true)
	return nil
}

func (c *Coordinator) round(req lease.SyncRequest, leave bool) lease.SyncReply {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[req.Group.Name]
	if g == nil {
		g = &group{members: map[string]member{}, holders: map[int]holder{}, epochs: map[int]uint64{}, given: map[int]bool{}}
		c.groups[req.Group.Name] = g
	}
	ttl := req.Group.TTL
	if !g.seen.IsZero() && now.Sub(g.seen) > ttl {
		clear(g.given) // as redislease: no "given back" trusted after a silence of a TTL
	}
	if now.After(g.seen) {
		g.seen = now
	}
	for id, m := range g.members {
		if !m.expiry.After(now) {
			delete(g.members, id)
		}
	}
	if leave {
		delete(g.members, req.Member)
	} else {
		g.members[req.Member] = member{want: req.Want, expiry: now.Add(ttl)}
	}
	mine := func(gr lease.Grant) bool {
		h, ok := g.holders[gr.Partition]
		return ok && h.member == req.Member && h.epoch == gr.Epoch
	}
	for _, gr := range req.Release {
		if mine(gr) {
			delete(g.holders, gr.Partition)
			g.given[gr.Partition] = true
		}
	}
	var out lease.SyncReply
	for _, gr := range req.Held {
		if mine(gr) {
			g.holders[gr.Partition] = holder{req.Member, gr.Epoch, now.Add(ttl)}
			out.Renewed = append(out.Renewed, gr)
		}
	}
	for p := 0; !leave && p < req.Group.Partitions && len(out.Acquired) < req.Acquire; p++ {
		h, held := g.holders[p]
		if held && h.expiry.After(now) {
			continue
		}
		taken := held || !g.given[p]
		g.epochs[p] = max(g.epochs[p]+1, uint64(now.UnixMicro()))
		g.holders[p] = holder{req.Member, g.epochs[p], now.Add(ttl)}
		delete(g.given, p)
		out.Acquired = append(out.Acquired, lease.Acquired{Grant: lease.Grant{Partition: p, Epoch: g.epochs[p]}, TakenOver: taken})
	}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, strings.Compare)
	out.Self = -1
	for i, id := range ids {
		if id == req.Member {
			out.Self = i
		}
		out.Wants = append(out.Wants, g.members[id].want)
	}
	return out
}
