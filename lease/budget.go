package lease

import "context"

// Budget spends from the partitions a Holder holds, with each spend's fence
// in the form the FenceHeader carries: what relay.Options.Budget and
// pace.TransportOptions.Budget take. Its methods are safe for concurrent
// use; the Holder's Run must be running.
type Budget struct{ h *Holder }

// SpendFrom returns the Budget of h.
func SpendFrom(h *Holder) Budget { return Budget{h} }

// Wait spends cost from a held partition, as Holder.Wait does, and returns
// the spend's fence: the value of the FenceHeader to send with the request.
func (b Budget) Wait(ctx context.Context, cost float64) (fence string, err error) {
	s, err := b.h.Wait(ctx, cost)
	if err != nil {
		return "", err
	}
	return FormatFence(s), nil
}

// Stale tells the Holder that a target refused fence as stale (409
// stale_lease_epoch): its partition has a newer holder and is dropped at
// once (Holder.Fenced). A fence this Budget did not make is ignored.
func (b Budget) Stale(fence string) {
	if s, err := ParseFence(fence); err == nil {
		b.h.Fenced(s)
	}
}

// Rate is what the process may spend now, in cost per second (Holder.Rate).
func (b Budget) Rate() float64 { return b.h.Rate() }
