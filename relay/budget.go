package relay

import (
	"context"

	fleet "github.com/sluicehq/sluice/lease"
)

// Budget is one process's share of a limit a fleet spends together.
// Implementations are safe for concurrent use.
type Budget interface {
	// Wait blocks until cost may be spent from the share, or ctx ends. It
	// returns the fence to send with the request in the
	// Sluice-Lease-Epoch header ("" for none).
	Wait(ctx context.Context, cost float64) (fence string, err error)
	// Stale tells the Budget that the target refused fence as stale (409
	// stale_lease_epoch): the share it came from has a newer holder.
	Stale(fence string)
	// Rate is what this process may spend now, in cost per second.
	Rate() float64
}

// HolderBudget spends from the partitions h holds (package lease): each
// request carries its partition's epoch, so a target that checks fences
// refuses it once the partition has moved on. h's Run must be running. It is
// lease.SpendFrom(h).
func HolderBudget(h *fleet.Holder) Budget { return fleet.SpendFrom(h) }
