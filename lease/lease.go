// Package lease splits a rate limit shared by a fleet into partitions that
// processes hold under leases, so that the fleet as a whole never spends
// more than the limit.
//
// A limit of L per second with burst B is cut into P partitions, each a
// token bucket of L/P per second with burst B/P. A Holder (one per process
// and shared limit) asks a Coordinator — redislease on Redis, etcdlease on
// etcd — for partitions in proportion to its demand, renews them every
// Renew (TTL/3 by default), and spends only from the partitions it holds:
//
//   - Fencing: every acquisition gets an epoch larger than any the
//     partition had before; it travels with the work (Spend.Epoch, the
//     Sluice-Lease-Epoch header) so that a target can refuse a stale one.
//   - Local deadline: a lease is spent until TTL after the moment its
//     acquire or renew was sent, measured on this process's monotonic
//     clock; after that the Holder stops spending it even if the
//     Coordinator cannot be reached.
//   - Quarantine: a partition taken over from a holder whose lease lapsed
//     (or whose record the Coordinator lost) is not spent before TTL plus
//     the clock-drift margin; one given back gracefully is spent at once.
//   - Fresh buckets: a partition acquired starts empty, so a hand-over
//     never adds a second burst.
//
// Together these keep what the fleet admits in any interval T at most
// B + L×T, also while a holder is paused, cut off or killed; see
// docs/fleet.md for the argument, the rebalancing rule (Allot) and the
// figures.
//
// This package imports only the standard library and sluice.
package lease

import (
	"context"
	"errors"
	"time"
)

// Coordinator grants the partitions of a group to members under leases.
// Implementations (redislease, etcdlease) pass the conformance suite in
// package leasetest. Each call is one decision of the protocol and is
// atomic: two members never hold one partition at once in the
// Coordinator's view. Implementations are safe for concurrent use and must
// never retry a call on their own.
type Coordinator interface {
	// Sync is one round of the protocol for one member, in this order:
	// record the member as alive until TTL from now with its Want; give
	// back Release (each only if still held by the member under that
	// epoch); renew Held (each only if still held by the member under that
	// epoch, whether or not its lease lapsed meanwhile); then acquire up to
	// Acquire partitions no one holds (free, given back, or whose lease
	// lapsed), each under a new epoch. It answers what was renewed and
	// acquired and the live members' wants.
	Sync(ctx context.Context, req SyncRequest) (SyncReply, error)
	// Leave gives back held (as Sync's Release) and forgets the member:
	// the graceful end of a Holder.
	Leave(ctx context.Context, g Group, member string, held []Grant) error
}

// Group names a shared limit and how it is cut.
type Group struct {
	// Name of the shared limit: 1 to 128 bytes of letters, digits and
	// "_-.:/". Coordinators use it in their keys; it must not carry a raw
	// identity (leasestore hashes the keys it leases).
	Name string
	// Partitions is P, 1 to MaxPartitions.
	Partitions int
	// TTL is how long a lease lasts after it was granted or renewed: at
	// least MinTTL, a whole number of milliseconds.
	TTL time.Duration
}

// MaxPartitions bounds Group.Partitions.
const MaxPartitions = 1024

// MinTTL is the shortest lease.
const MinTTL = 50 * time.Millisecond

// SyncRequest is one member's round; see Coordinator.Sync.
type SyncRequest struct {
	Group  Group
	Member string
	// Want is how many partitions the member asks for (0 to P): its
	// demand, which every member's Allot reads.
	Want int
	// Held are the partitions to renew.
	Held []Grant
	// Release are the partitions given back; the member stopped spending
	// them before the call.
	Release []Grant
	// Acquire is how many more partitions to take, if free.
	Acquire int
}

// Grant is a partition under the epoch it was acquired with.
type Grant struct {
	Partition int
	Epoch     uint64
}

// Acquired is a partition a Sync acquired.
type Acquired struct {
	Grant
	// TakenOver reports that the partition was not given back gracefully:
	// its last holder's lease lapsed, or the Coordinator lost its record
	// (a restart). The Holder quarantines it for TTL plus the drift margin.
	TakenOver bool
}

// SyncReply is what a Sync granted and saw.
type SyncReply struct {
	// Renewed are the Held partitions still the member's, renewed for TTL.
	Renewed []Grant
	// Acquired are the partitions newly the member's.
	Acquired []Acquired
	// Wants are the live members' wants (the caller's among them), in the
	// order of their IDs (byte-wise ascending): what Allot reads.
	Wants []int
	// Self is the caller's index in Wants.
	Self int
}

// MaxMemberLen bounds a member ID.
const MaxMemberLen = 64

// Errors a Holder or Coordinator returns.
var (
	// ErrInvalid is wrapped by every error about bad options or requests.
	ErrInvalid = errors.New("lease: invalid")
	// ErrClosed is returned by a Holder after Close.
	ErrClosed = errors.New("lease: holder closed")
	// ErrCostTooLarge is returned for a cost no partition's burst holds.
	ErrCostTooLarge = errors.New("lease: cost exceeds a partition's burst")
)
