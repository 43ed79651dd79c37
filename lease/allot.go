package lease

import (
	"fmt"
	"strings"
	"time"
)

// Allot is the rebalancing rule: how many of p partitions each member
// should hold, given what each wants. Every member computes it from the
// same Members list a Sync returns, so they agree without talking.
//
// The rule is max-min fair (water-filling) in whole partitions: in rounds,
// each member that wants more than it was given gets one more partition,
// in the order of members (sorted by ID), until the partitions run out or
// every want is met. Partitions no one wants are then handed out the same
// way to members that want at least one, so spare capacity sits with
// active members rather than idle. Guarantee: each member gets at least
// min(its want, ⌊p/N⌋) partitions, N the number of members — no process is
// starved below its demand or its fair share, whichever is less.
//
// wants are the members' wants in the order of their IDs (SyncReply.Wants).
// The result has one entry per member, in that order, and sums to at most
// p.
func Allot(wants []int, p int) []int {
	out := make([]int, len(wants))
	left := p
	for left > 0 {
		progressed := false
		for i, w := range wants {
			if left == 0 {
				break
			}
			if out[i] < w {
				out[i]++
				left--
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	for left > 0 {
		progressed := false
		for i, w := range wants {
			if left == 0 {
				break
			}
			if w > 0 {
				out[i]++
				left--
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	return out
}

// Validate reports what is wrong with g, wrapping ErrInvalid.
func (g Group) Validate() error {
	if err := validName("group name", g.Name, 128); err != nil {
		return err
	}
	if g.Partitions < 1 || g.Partitions > MaxPartitions {
		return fmt.Errorf("%w: group %q: partitions %d: want 1 to %d", ErrInvalid, g.Name, g.Partitions, MaxPartitions)
	}
	if g.TTL < MinTTL || g.TTL%time.Millisecond != 0 {
		return fmt.Errorf("%w: group %q: ttl %v: want a whole number of milliseconds, at least %v", ErrInvalid, g.Name, g.TTL, MinTTL)
	}
	return nil
}

// Validate reports what is wrong with r, wrapping ErrInvalid.
func (r SyncRequest) Validate() error {
	if err := r.Group.Validate(); err != nil {
		return err
	}
	if err := ValidateMember(r.Member); err != nil {
		return err
	}
	p := r.Group.Partitions
	if r.Want < 0 || r.Want > p {
		return fmt.Errorf("%w: want %d: must be 0 to %d partitions", ErrInvalid, r.Want, p)
	}
	if r.Acquire < 0 || r.Acquire > p {
		return fmt.Errorf("%w: acquire %d: must be 0 to %d partitions", ErrInvalid, r.Acquire, p)
	}
	seen := make(map[int]bool, len(r.Held)+len(r.Release))
	for _, list := range [][]Grant{r.Held, r.Release} {
		for _, g := range list {
			if g.Partition < 0 || g.Partition >= p {
				return fmt.Errorf("%w: partition %d: want 0 to %d", ErrInvalid, g.Partition, p-1)
			}
			if seen[g.Partition] {
				return fmt.Errorf("%w: partition %d named twice", ErrInvalid, g.Partition)
			}
			seen[g.Partition] = true
		}
	}
	return nil
}

// ValidateMember reports what is wrong with a member ID, wrapping
// ErrInvalid: 1 to MaxMemberLen bytes of letters, digits and "_-.:/".
func ValidateMember(id string) error { return validName("member", id, MaxMemberLen) }

func validName(what, s string, max int) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("%w: %s %q: want 1 to %d bytes", ErrInvalid, what, clip(s), max)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/", r))
	}); i >= 0 {
		return fmt.Errorf("%w: %s %q: byte %d is not a letter, digit or one of _-.:/", ErrInvalid, what, clip(s), i)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
