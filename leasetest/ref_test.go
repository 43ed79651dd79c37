package leasetest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// ref is the protocol written down as plainly as it goes: a reference
// Coordinator in memory, with switches that break one rule each, so that
// the suite can be shown to catch every one.
type ref struct {
	bug string // "" for none; see bugs in leasetest_test.go

	mu     sync.Mutex
	epoch  uint64 // the last epoch issued, in any group
	groups map[string]*refGroup
}

type refGroup struct {
	members map[string]refMember
	holders map[int]refHolder
	given   map[int]bool // released or left, not acquired since
}

type refMember struct {
	want   int
	expiry time.Time
}

type refHolder struct {
	member string
	epoch  uint64
	expiry time.Time
}

var _ lease.Coordinator = (*ref)(nil)

func newRef(bug string) *ref { return &ref{bug: bug, groups: map[string]*refGroup{}} }

func (c *ref) Sync(ctx context.Context, req lease.SyncRequest) (lease.SyncReply, error) {
	if err := c.check(ctx, req); err != nil {
		return lease.SyncReply{}, fmt.Errorf("ref: sync: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	g := c.group(req.Group.Name)
	ttl := req.Group.TTL
	if c.bug != "member-keeps-old-want" || g.members[req.Member].want == 0 {
		g.members[req.Member] = refMember{want: req.Want, expiry: now.Add(ttl)}
	}
	c.release(g, req.Member, req.Release)

	var out lease.SyncReply
	for _, gr := range req.Held {
		h, ok := g.holders[gr.Partition]
		mine := ok && (h.member == req.Member || c.bug == "renew-any-member") && (h.epoch == gr.Epoch || c.bug == "renew-any-epoch")
		if c.bug == "renew-lapsed-fails" && ok && !h.expiry.After(now) {
			mine = false
		}
		if mine {
			if c.bug != "renew-does-not-extend" {
				h.expiry = now.Add(ttl)
			}
			h.member = req.Member
			g.holders[gr.Partition] = h
			out.Renewed = append(out.Renewed, gr)
		}
	}
	if c.bug == "stale-renew-extends" {
		for _, gr := range req.Held {
			if h, ok := g.holders[gr.Partition]; ok && !slices.Contains(out.Renewed, gr) {
				h.expiry = now.Add(ttl)
				g.holders[gr.Partition] = h
			}
		}
	}

	var free []int
	for p := range req.Group.Partitions {
		h, held := g.holders[p]
		if held && (h.expiry.After(now) || c.bug == "never-lapse") && c.bug != "always-free" {
			continue
		}
		if slices.ContainsFunc(req.Held, func(gr lease.Grant) bool { return gr.Partition == p }) {
			continue
		}
		free = append(free, p)
	}
	if c.bug == "racy" && len(free) > 0 {
		// Decide on what was read, then let others in before writing.
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
		c.mu.Lock()
	}
	n := req.Acquire
	if c.bug == "acquire-all-free" {
		n = len(free)
	}
	for _, p := range free[:min(n, len(free))] {
		h, held := g.holders[p]
		taken := !g.given[p]
		switch c.bug {
		case "taken-over-never":
			taken = false
		case "taken-over-always":
			taken = true
		}
		c.epoch++
		e := c.epoch
		if c.bug == "takeover-keeps-epoch" && held {
			e = h.epoch
		}
		g.holders[p] = refHolder{member: req.Member, epoch: e, expiry: now.Add(ttl)}
		delete(g.given, p)
		out.Acquired = append(out.Acquired, lease.Acquired{Grant: lease.Grant{Partition: p, Epoch: e}, TakenOver: taken})
	}
	out.Wants, out.Self = c.wants(g, req.Member, now)
	return out, nil
}

func (c *ref) Leave(ctx context.Context, grp lease.Group, member string, held []lease.Grant) error {
	if err := c.check(ctx, lease.SyncRequest{Group: grp, Member: member, Release: held}); err != nil {
		return fmt.Errorf("ref: leave: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.group(grp.Name)
	if c.bug != "leave-keeps-member" {
		delete(g.members, member)
	}
	c.release(g, member, held)
	return nil
}

func (c *ref) check(ctx context.Context, req lease.SyncRequest) error {
	if c.bug != "no-validation" {
		if err := req.Validate(); err != nil {
			return err
		}
	}
	if c.bug != "ignore-context" {
		return ctx.Err()
	}
	return nil
}

func (c *ref) group(name string) *refGroup {
	if c.bug == "one-group" {
		name, _, _ = strings.Cut(name, "/")
	}
	g := c.groups[name]
	if g == nil {
		g = &refGroup{members: map[string]refMember{}, holders: map[int]refHolder{}, given: map[int]bool{}}
		c.groups[name] = g
	}
	return g
}

func (c *ref) release(g *refGroup, member string, grants []lease.Grant) {
	if c.bug == "release-ignored" {
		return
	}
	for _, gr := range grants {
		h, ok := g.holders[gr.Partition]
		if ok && h.member == member && (h.epoch == gr.Epoch || c.bug == "release-any-epoch") {
			delete(g.holders, gr.Partition)
			g.given[gr.Partition] = true
		}
	}
}

func (c *ref) wants(g *refGroup, self string, now time.Time) ([]int, int) {
	ids := make([]string, 0, len(g.members))
	for id, m := range g.members {
		if m.expiry.After(now) || c.bug == "members-never-lapse" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if c.bug == "members-unsorted" {
		slices.Reverse(ids)
	}
	wants := make([]int, len(ids))
	for i, id := range ids {
		wants[i] = g.members[id].want
	}
	return wants, slices.Index(ids, self)
}
