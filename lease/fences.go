package lease

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// Fences is what a target that checks fences remembers: the highest epoch
// it has seen for each partition of each lease group. A request carrying a
// Spend (FenceHeader, ParseFence) is checked against it: an epoch at least
// the highest seen for its partition passes and becomes the highest; a
// lower one is stale — its sender held the partition before someone else
// acquired it (a paused or cut-off holder waking up) — and is refused.
// This is Kafka's producer fencing: the one protection against a holder
// that spends after its lease ended without knowing it.
//
// The table is per process: each target instance knows only the epochs
// that reached it. A stale request is refused once the new holder's
// traffic has reached the same instance; before that the instance has no
// way to know the epoch is stale, and lets it through.
//
// The table is bounded. With FenceOptions.Groups it takes those groups
// only; without, it takes the first MaxGroups groups it sees and refuses
// any other after that: forgetting a group to make room would forget its
// highest epochs and let a stale one through. It takes at most
// MaxPartitions partitions per group; a group's memory grows with the
// partitions seen, 256 bytes per 32 (at most about 8 KiB).
//
// A Fences is safe for concurrent use. Check takes a read lock to find a
// known group (and to refuse a new one once the table is full) and
// updates the epoch with a compare-and-swap; only a new group's first
// Spend takes the write lock.
type Fences struct {
	mu     sync.RWMutex
	groups map[string]*fenceGroup // under mu; the pointers never change
	max    int                    // groups taken at most: len(Groups) when given

	accepted, stale, refused atomic.Uint64
}

// FenceOptions configure a Fences table. Zero fields mean the documented
// default.
type FenceOptions struct {
	// Groups, when set, are the only lease groups the table takes (names
	// as Group.Name: 1 to 128 bytes of letters, digits and "_-.:/"; each
	// once). A Spend of any other group is refused. Default: any group,
	// up to MaxGroups.
	Groups []string

	// MaxGroups bounds the groups a table without Groups takes: once it
	// holds MaxGroups, a Spend of a group it has not seen is refused
	// (until the process restarts). Default DefaultMaxFenceGroups; it
	// must be 0 when Groups is set.
	MaxGroups int
}

// DefaultMaxFenceGroups is FenceOptions.MaxGroups's default.
const DefaultMaxFenceGroups = 1024

// maxGroupLen bounds a group's name, as Group.Validate does.
const maxGroupLen = 128

// fenceChunk is how many partitions' epochs are allocated at once.
const fenceChunk = 32

// fenceGroup holds one group's highest epochs, in chunks allocated the
// first time a partition of theirs is seen.
type fenceGroup struct {
	chunks [(MaxPartitions + fenceChunk - 1) / fenceChunk]atomic.Pointer[[fenceChunk]atomic.Uint64]
}

// NewFences checks o and returns an empty table. An error wraps
// ErrInvalid and says what is wrong.
func NewFences(o FenceOptions) (*Fences, error) {
	f := &Fences{groups: map[string]*fenceGroup{}, max: o.MaxGroups}
	switch {
	case o.MaxGroups < 0:
		return nil, fmt.Errorf("%w: fences: max groups %d: must not be negative (0: %d)", ErrInvalid, o.MaxGroups, DefaultMaxFenceGroups)
	case len(o.Groups) > 0 && o.MaxGroups != 0:
		return nil, fmt.Errorf("%w: fences: max groups %d with a list of groups: the list is the bound, give one or the other", ErrInvalid, o.MaxGroups)
	case len(o.Groups) > 0:
		f.max = len(o.Groups)
	case o.MaxGroups == 0:
		f.max = DefaultMaxFenceGroups
	}
	for _, g := range o.Groups {
		if err := validName("fence group", g, maxGroupLen); err != nil {
			return nil, err
		}
		if f.groups[g] != nil {
			return nil, fmt.Errorf("%w: fences: group %q listed twice", ErrInvalid, g)
		}
		f.groups[g] = new(fenceGroup)
	}
	return f, nil
}

// Check checks s against the highest epoch seen for its group and
// partition. ok: s.Epoch is at least that highest, and is now the highest
// (returned as highest). Not ok with highest > 0: s is stale, highest is
// the epoch that fenced it off. Not ok with highest 0: the table does not
// take s — a group not among FenceOptions.Groups, a new group once
// MaxGroups are held, or a Spend ParseFence would not return (epoch 0, a
// partition outside 0 to MaxPartitions-1, a group name empty or longer
// than 128 bytes) — and remembers nothing of it.
//
// An epoch equal to the highest passes: the holder of a partition sends
// its epoch with every request.
func (f *Fences) Check(s Spend) (ok bool, highest uint64) {
	if s.Epoch == 0 || s.Partition < 0 || s.Partition >= MaxPartitions {
		f.refused.Add(1)
		return false, 0
	}
	g := f.group(s.Group)
	if g == nil {
		f.refused.Add(1)
		return false, 0
	}
	slot := g.slot(s.Partition)
	for {
		h := slot.Load()
		if s.Epoch < h {
			f.stale.Add(1)
			return false, h
		}
		if s.Epoch == h || slot.CompareAndSwap(h, s.Epoch) {
			f.accepted.Add(1)
			return true, s.Epoch
		}
	}
}

// group returns name's epochs, adding the group if the table takes it;
// nil if it does not.
func (f *Fences) group(name string) *fenceGroup {
	f.mu.RLock()
	g := f.groups[name]
	full := len(f.groups) >= f.max // always, for a table of Groups
	f.mu.RUnlock()
	if g != nil || full || name == "" || len(name) > maxGroupLen {
		return g // a full table refuses under the read lock alone
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if g = f.groups[name]; g != nil {
		return g
	}
	if len(f.groups) >= f.max {
		return nil
	}
	g = new(fenceGroup)
	f.groups[strings.Clone(name)] = g // name may be a slice of a request's header
	return g
}

// slot is partition p's highest epoch (0 ≤ p < MaxPartitions), allocating
// its chunk the first time.
func (g *fenceGroup) slot(p int) *atomic.Uint64 {
	c := &g.chunks[p/fenceChunk]
	a := c.Load()
	if a == nil {
		a = new([fenceChunk]atomic.Uint64)
		if !c.CompareAndSwap(nil, a) {
			a = c.Load()
		}
	}
	return &a[p%fenceChunk]
}

// FenceStats counts what a Fences table decided since NewFences.
type FenceStats struct {
	// Groups the table holds now.
	Groups int
	// Accepted Spends (at least the highest epoch), Stale ones (below
	// it), and Refused ones (a group or a Spend the table does not take).
	Accepted, Stale, Refused uint64
}

// Stats reports the table's counters. Safe for concurrent use.
func (f *Fences) Stats() FenceStats {
	f.mu.RLock()
	n := len(f.groups)
	f.mu.RUnlock()
	return FenceStats{Groups: n, Accepted: f.accepted.Load(), Stale: f.stale.Load(), Refused: f.refused.Load()}
}
