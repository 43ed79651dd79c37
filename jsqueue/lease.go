package jsqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/queue"
)

// Lease hands out up to n ready tasks; see [queue.Queue.Lease] and the
// package doc (Leases, Order). It returns the leases it made even when a
// later request failed (the error is logged), and the error when it made
// none.
func (q *Queue) Lease(ctx context.Context, n int, visibility time.Duration) ([]queue.Lease, error) {
	if err := queue.CheckLease(n, visibility); err != nil {
		if q.closed.Load() {
			return nil, fmt.Errorf("jsqueue: lease: %w", queue.ErrClosed)
		}
		return nil, fmt.Errorf("jsqueue: lease: %w", err)
	}
	ctx, cancel, err := q.begin(ctx, "lease", 1+n/1000)
	if err != nil {
		return nil, err
	}
	defer cancel()
	budget := max(4*n, 1024) // messages looked at in this call
	var got []queue.Lease
	var ready []time.Time // got[i]'s ready instant, to sort
	var failed error
	for p := queue.MaxPriority; p >= 0 && len(got) < n && budget > 0 && failed == nil; p-- {
		for len(got) < n && budget > 0 {
			msgs, err := q.pull(p, min(n-len(got), budget))
			if err != nil {
				failed = fmt.Errorf("jsqueue: lease: pull priority %d: %w", p, err)
				break
			}
			if len(msgs) == 0 {
				break
			}
			budget -= len(msgs)
			taken := make([]taken, len(msgs))
			each(len(msgs), width, func(i int) { taken[i] = q.take(ctx, msgs[i], visibility) })
			for _, t := range taken {
				if t.err != nil && failed == nil {
					failed = t.err
				}
				if t.lease != nil {
					got = append(got, *t.lease)
					ready = append(ready, t.ready)
				}
			}
			if failed != nil {
				break
			}
		}
	}
	if failed != nil {
		if len(got) == 0 {
			return nil, failed
		}
		q.log.Warn("jsqueue: lease: a request failed; handing out the leases made", "error", failed, "leases", len(got))
	}
	order := make([]int, len(got))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if got[a].Priority != got[b].Priority {
			return got[b].Priority - got[a].Priority
		}
		return ready[a].Compare(ready[b])
	})
	out := make([]queue.Lease, len(got))
	for k, i := range order {
		out[k] = got[i]
	}
	return out, nil
}

// pull takes up to n messages of priority p that the server has ready.
func (q *Queue) pull(p, n int) ([]jetstream.Msg, error) {
	batch, err := q.consumers[p].FetchNoWait(n)
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	return msgs, batch.Error()
}

// taken is what became of one pulled message.
type taken struct {
	lease *queue.Lease
	ready time.Time
	err   error
}

// take leases the task of msg if it is ready, or puts msg back until it
// is, or drops it (the task finished, or it is a failed Enqueue's
// leftover), or dead-letters the task (its deadline passed, its last
// lease ended).
func (q *Queue) take(ctx context.Context, msg jetstream.Msg, visibility time.Duration) taken {
	subject := msg.Subject()
	id := subject[strings.LastIndexByte(subject, '.')+1:]
	if at, err := strconv.ParseInt(msg.Headers().Get(hdrReadyAt), 10, 64); err == nil {
		if wait := time.Until(time.Unix(0, at)); wait > 0 {
			return taken{err: q.nak(msg, wait)}
		}
	}
	meta, err := msg.Metadata()
	if err != nil {
		return taken{err: fmt.Errorf("jsqueue: lease: %w", err)}
	}
	for range 8 {
		e, err := q.status.Get(ctx, id)
		if notFound(err) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return taken{err: wrap("lease: drop a finished task's message", msg.Term())}
		}
		if err != nil {
			return taken{err: wrap("lease: read a record", err)}
		}
		r, err := decode(e.Value())
		if err != nil {
			return taken{err: wrap("lease", err)}
		}
		now := time.Now()
		switch {
		case r.finished():
			return taken{err: wrap("lease: drop a finished task's message", msg.Term())}
		case r.held(now):
			return taken{err: q.nak(msg, r.Until.Sub(now))}
		case r.State == stWaiting && r.ReadyAt.After(now):
			return taken{err: q.nak(msg, r.ReadyAt.Sub(now))}
		case !r.Deadline.IsZero() && !now.Before(r.Deadline):
			r.Seq = meta.Sequence.Stream
			err = q.finish(ctx, id, e.Revision(), r, stDead, queue.ReasonDeadline, nil, msg.Data(), true)
		case r.State == stLeased && r.Attempts >= r.MaxAttempts:
			r.Seq = meta.Sequence.Stream
			err = q.finish(ctx, id, e.Revision(), r, stDead, queue.ReasonAttempts, nil, msg.Data(), true)
		default:
			ready := r.readyAt()
			r.State, r.Attempts, r.Token = stLeased, r.Attempts+1, token()
			r.Until, r.Seq, r.Ack = now.Add(visibility), meta.Sequence.Stream, msg.Reply()
			r.ReadyAt = ready
			var data []byte
			if data, err = r.encode(); err != nil {
				return taken{err: wrap("lease", err)}
			}
			if _, err = q.status.Update(ctx, id, data, e.Revision()); err == nil {
				// The server hands the message back when the lease ends.
				if err := q.nak(msg, visibility); err != nil {
					q.log.Warn("jsqueue: lease: the message was not put back; it comes back after AckWait", "task", id, "error", err)
				}
				return taken{ready: ready, lease: &queue.Lease{
					Receipt: queue.Receipt{ID: id, Token: r.Token}, Task: r.task(msg.Data()),
					Attempt: r.Attempts, Until: r.Until, Enqueued: r.Enqueued,
				}}
			}
		}
		if err == nil {
			return taken{} // dead; finish deleted its message
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return taken{err: wrap("lease", err)}
		}
		// The record changed under us (Cancel, an Ack at the last
		// instant): read it again.
	}
	return taken{err: errors.New("jsqueue: lease: a record changed eight times while it was read")}
}

// nak puts msg back, to be delivered again after delay.
func (q *Queue) nak(msg jetstream.Msg, delay time.Duration) error {
	return wrap("lease: put a message back", msg.NakWithDelay(delay))
}

// token returns a new lease token: 128 random bits.
func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
