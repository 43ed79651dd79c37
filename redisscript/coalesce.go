package redisscript

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Coalescing: concurrent decisions bound for one Redis node (one hash slot
// on a Cluster) go out together, as one script call that decides each in
// order at one instant (OP_BATCH in lua/head.lua). A node has at most
// CoalesceOptions.InFlight calls in flight; a decision that finds one free
// goes at once, alone, on the caller's goroutine and context, exactly as
// without coalescing — so a lone caller waits for nothing, and no timer is
// on the path. A decision that finds them all taken queues; when a call
// returns, whatever queued meanwhile goes in the next call (up to
// MaxDecisions decisions and about MaxBytes of keys and arguments). A
// decision's Timeout runs from the moment it queued, not from when its
// batch goes: a batch's call must answer by the earliest of its decisions'
// deadlines, and a decision that waited its whole Timeout behind a call
// that did not answer fails without being sent. A failed or timed-out
// batch is each of its decisions' failure (each caller's policy decides),
// and is never sent again.

// CoalesceOptions configure how concurrent decisions share script calls.
// The zero value coalesces, with the defaults below.
type CoalesceOptions struct {
	// Off sends every decision in a script call of its own.
	Off bool
	// InFlight is how many script calls each node (each hash slot, on a
	// Cluster) may have in flight before decisions queue for the next.
	// Default DefaultCoalesceInFlight. More calls in flight means smaller
	// batches; one leaves Redis idle while a reply is read.
	InFlight int
	// MaxDecisions bounds the decisions (Allow, AllowAll calls) of one
	// script call. Default DefaultCoalesceMaxDecisions.
	MaxDecisions int
	// MaxBytes bounds the bytes of keys and arguments of one script call,
	// counted as sent. Default DefaultCoalesceMaxBytes. A single decision
	// larger than it still goes, alone.
	MaxBytes int
}

// The defaults of CoalesceOptions' zero fields.
const (
	DefaultCoalesceInFlight     = 3
	DefaultCoalesceMaxDecisions = 128
	DefaultCoalesceMaxBytes     = 64 << 10
)

func (o CoalesceOptions) withDefaults() (CoalesceOptions, error) {
	if o.InFlight < 0 || o.MaxDecisions < 0 || o.MaxBytes < 0 {
		return o, fmt.Errorf("redisscript: Coalesce: InFlight %d, MaxDecisions %d, MaxBytes %d: must not be negative (0 means the default)", o.InFlight, o.MaxDecisions, o.MaxBytes)
	}
	if o.InFlight == 0 {
		o.InFlight = DefaultCoalesceInFlight
	}
	if o.MaxDecisions == 0 {
		o.MaxDecisions = DefaultCoalesceMaxDecisions
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultCoalesceMaxBytes
	}
	return o, nil
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// batchers are a Store's coalescers: one for a single node, one per hash
// slot (made on first use) on a Cluster, where a script's keys must share
// a slot.
type batchers struct {
	one   batcher
	slots []atomic.Pointer[batcher]
	mu    sync.Mutex // makes slots' batchers
}

func (s *Store) batcherFor(slot uint16) *batcher {
	if !s.client.Cluster() {
		return &s.batchers.one
	}
	bs := &s.batchers
	if b := bs.slots[slot].Load(); b != nil {
		return b
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b := bs.slots[slot].Load(); b != nil {
		return b
	}
	b := &batcher{s: s}
	bs.slots[slot].Store(b)
	return b
}

// decideCall decides rs (sharing a hash slot on a Cluster) in mode:
// coalesced with concurrent decisions unless Coalesce.Off.
func (s *Store) decideCall(ctx context.Context, mode sluice.Mode, rs []request, res []result) error {
	if s.coalesce.Off {
		return s.run(ctx, opDecide, mode, rs, res)
	}
	return s.batcherFor(rs[0].slot).do(ctx, mode, rs, res)
}

// batcher coalesces the decisions bound for one node (or slot).
type batcher struct {
	s        *Store
	mu       sync.Mutex
	inflight int        // script calls in flight
	queue    []*pending // decisions waiting for a call: only while inflight is at its bound
}

// pending is a queued decision.
type pending struct {
	mode     sluice.Mode
	rs       []request
	res      []result
	bytes    int
	deadline time.Time // queued at, plus Timeout
	// Set under the batcher's mu.
	err  error
	left bool          // the caller's context ended first: not sent, or its answer dropped
	done chan struct{} // closed when err and res are set
}

// do decides rs: at once, alone, when a call is free; else in the next
// batch. A caller whose context ends while its decision waits gets the
// context's error at once (errCallerDone); the batch goes on without it,
// or with it if it was already sent (its decision may then have been
// spent, as a call timed out alone may have been).
func (b *batcher) do(ctx context.Context, mode sluice.Mode, rs []request, res []result) error {
	b.mu.Lock()
	if b.inflight < b.s.coalesce.InFlight && !b.s.batchAlways {
		b.inflight++
		b.mu.Unlock()
		err := b.s.run(ctx, opDecide, mode, rs, res)
		b.next()
		return err
	}
	p := &pending{mode: mode, rs: rs, res: res, bytes: argBytes(rs), deadline: time.Now().Add(b.s.timeout), done: make(chan struct{})}
	b.queue = append(b.queue, p)
	var batch []*pending
	if b.inflight < b.s.coalesce.InFlight { // only with batchAlways
		batch = b.takeLocked()
		b.inflight++
	}
	b.mu.Unlock()
	if batch != nil {
		go b.send(batch)
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		b.mu.Lock()
		p.left = true
		b.mu.Unlock()
		return fmt.Errorf("%w: %w", errCallerDone, ctx.Err())
	}
}

// next ends a call: the decisions queued meanwhile go in the next one.
func (b *batcher) next() {
	b.mu.Lock()
	b.inflight--
	batch := b.takeLocked()
	if len(batch) > 0 {
		b.inflight++
	}
	b.mu.Unlock()
	if len(batch) > 0 {
		go b.send(batch)
	}
}

// takeLocked takes the next batch from the queue's front: up to
// MaxDecisions decisions and MaxBytes (at least one decision), skipping
// those whose caller left.
func (b *batcher) takeLocked() []*pending {
	o := b.s.coalesce
	var batch []*pending
	bytes, i := 0, 0
	for ; i < len(b.queue); i++ {
		p := b.queue[i]
		if p.left {
			continue
		}
		if len(batch) == o.MaxDecisions || len(batch) > 0 && bytes+p.bytes > o.MaxBytes {
			break
		}
		batch, bytes = append(batch, p), bytes+p.bytes
	}
	n := copy(b.queue, b.queue[i:])
	clear(b.queue[n:])
	b.queue = b.queue[:n]
	return batch
}

// send makes batch's call and answers each of its callers.
func (b *batcher) send(batch []*pending) {
	errs, res := b.s.runBatch(batch)
	b.mu.Lock()
	k := 0
	for j, p := range batch {
		if !p.left {
			p.err = errs[j]
			if p.err == nil {
				copy(p.res, res[k:k+len(p.rs)])
			}
		}
		k += len(p.rs)
		close(p.done)
	}
	b.mu.Unlock()
	b.next()
}

// runBatch makes one script call for batch, as run does for one call: the
// breaker, the arguments, the call within Timeout, the accounting. It
// returns each decision's error (an outage is every decision's) and the
// results of all their keys, in order.
func (s *Store) runBatch(batch []*pending) ([]error, []result) {
	errs := make([]error, len(batch))
	fail := func(err error) ([]error, []result) {
		for j := range errs {
			if errs[j] == nil {
				errs[j] = err
			}
		}
		return errs, nil
	}
	// Decisions that waited their whole Timeout in the queue fail unsent.
	now, deadline := time.Now(), time.Time{}
	live := batch[:0:0]
	for j, p := range batch {
		if !now.Before(p.deadline) {
			errs[j] = errQueuedTooLong
			continue
		}
		if deadline.IsZero() || p.deadline.Before(deadline) {
			deadline = p.deadline
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return fail(errQueuedTooLong)
	}
	ok, probe := s.breaker.allow()
	if !ok {
		return fail(errBreakerOpen)
	}
	keys, args, all := s.batchArgs(live)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	s.batches.Add(1)
	s.batched.Add(uint64(len(live)))
	reply, err := s.call(ctx, scriptFor(all), keys, args)
	if err != nil {
		// The batch's own deadline is Redis's failure (an outage: each
		// decision's policy applies), even when it left Redis less than a
		// Timeout: its decisions had waited for a call ahead of it.
		return fail(s.failed(context.Background(), s.timeout, probe, err))
	}
	s.markUp()
	s.breaker.success(probe)
	if len(reply) != 2+replyValues*len(all) {
		return fail(badReply(reply, fmt.Sprintf("%d values for a batch of %d keys", len(reply), len(all))))
	}
	if reply[0] != scriptProtocol {
		return fail(badReply(reply, fmt.Sprintf("script protocol %d, want %d: an old or foreign script answered", reply[0], scriptProtocol)))
	}
	res := make([]result, 0, len(all))
	k := 0
	for j, p := range batch {
		n := len(p.rs)
		res = append(res, make([]result, n)...) // a failed decision's part stays zero
		if errs[j] == nil {
			errs[j] = parseParts(opDecide, reply, reply[2+replyValues*k:2+replyValues*(k+n)], p.rs, res[len(res)-n:])
			k += n
		}
	}
	return errs, res
}

// errQueuedTooLong: a coalesced decision waited its whole Timeout for a
// call ahead of it (Redis did not answer that one): an outage, for which
// its policy decides.
var errQueuedTooLong = fmt.Errorf("redisscript: %w: the decision waited its whole Timeout for a call to Redis ahead of it", context.DeadlineExceeded)

// batchArgs lays out a batch's KEYS and ARGV (lua/head.lua): the
// protocol, the test clock, OP_BATCH, the number of calls and of distinct
// limits, each limit's fixed parameters once, each call's number of keys
// and mode, then each key's own parameters (its limit's index first). all
// is every request, in order.
func (s *Store) batchArgs(batch []*pending) (keys, args []string, all []request) {
	n := 0
	for _, p := range batch {
		n += len(p.rs)
	}
	all = make([]request, 0, n)
	keys = make([]string, 0, n)
	var limits []*compiled // few: usually one or two
	index := make([]int, 0, n)
	for _, p := range batch {
		for _, r := range p.rs {
			all, keys = append(all, r), append(keys, r.key)
			j := slices.Index(limits, r.c)
			if j < 0 {
				j, limits = len(limits), append(limits, r.c)
			}
			index = append(index, j+1)
		}
	}
	args = make([]string, 5, 5+9*len(limits)+2*len(batch)+batchKeyParams*n)
	args[0] = scriptProtocolArg
	if s.testNow != nil {
		args[1] = strconv.FormatInt(s.testNow().UnixMicro(), 10)
	}
	args[2] = string(opBatch)
	args[3] = strconv.Itoa(len(batch))
	args[4] = strconv.Itoa(len(limits))
	for _, c := range limits {
		args = append(args, c.argv[:]...)
	}
	for _, p := range batch {
		args = append(args, strconv.Itoa(len(p.rs)), modeArg(p.mode))
	}
	for i, r := range all {
		args = append(args, strconv.Itoa(index[i]), costArg(r.cost), uintArg(r.ticket), intArg(r.at), intArg(r.stamp))
	}
	return keys, args, all
}

// batchKeyParams is the number of ARGV entries per key in a batch.
const batchKeyParams = 5

// argBytes is about what rs adds to a call's keys and arguments.
func argBytes(rs []request) int {
	n := 0
	for _, r := range rs {
		n += len(r.key) + 8*batchKeyParams
	}
	return n
}
