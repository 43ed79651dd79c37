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
// queued decision's Timeout runs from the moment it queued: at its end the
// caller gets an outage (its policy decides) whether or not its batch has
// gone, and it is not sent if it has not. A batch's call has the whole
// Timeout from when it is sent, like a call alone, so a slow Redis is not
// made an outage by the queueing. A failed or timed-out batch is each of
// its decisions' failure (each caller's policy decides), and is never sent
// again. A decision that fails in the script (a key holding another type)
// fails alone: the others of its batch are decided.

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
	slots atomic.Pointer[[clusterSlots]atomic.Pointer[batcher]] // made on a Cluster's first decision
	mu    sync.Mutex                                            // makes slots and their batchers
}

func (s *Store) batcherFor(slot uint16) *batcher {
	if !s.client.Cluster() {
		return &s.batchers.one
	}
	bs := &s.batchers
	if slots := bs.slots.Load(); slots != nil {
		if b := slots[slot].Load(); b != nil {
			return b
		}
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	slots := bs.slots.Load()
	if slots == nil {
		slots = new([clusterSlots]atomic.Pointer[batcher])
		bs.slots.Store(slots)
	}
	if b := slots[slot].Load(); b != nil {
		return b
	}
	b := &batcher{s: s}
	slots[slot].Store(b)
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
	mode  sluice.Mode
	rs    []request
	res   []result
	bytes int
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
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errCallerDone, err)
	}
	b.mu.Lock()
	if b.inflight < b.s.coalesce.InFlight && !b.s.batchAlways {
		b.inflight++
		b.mu.Unlock()
		defer b.next() // even if the Client panics: the slot is given back
		return b.s.run(ctx, opDecide, mode, rs, res)
	}
	p := &pending{mode: mode, rs: rs, res: res, bytes: argBytes(rs), done: make(chan struct{})}
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
	timeout := time.NewTimer(b.s.timeout)
	defer timeout.Stop()
	err := errQueuedTooLong
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", errCallerDone, ctx.Err())
	case <-timeout.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-p.done: // answered meanwhile: the answer, not the error
		return p.err
	default:
		p.left = true
		return err
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
	defer b.next()
	b.mu.Lock()
	live := batch[:0]
	for _, p := range batch {
		if !p.left { // left since it was taken: not sent
			live = append(live, p)
		}
	}
	b.mu.Unlock()
	if len(live) == 0 {
		return
	}
	batch = live
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
	ok, probe := s.breaker.allow()
	if !ok {
		return fail(errBreakerOpen)
	}
	keys, args, all := s.batchArgs(batch)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	s.batches.Add(1)
	s.batched.Add(uint64(len(batch)))
	reply, err := s.call(ctx, scriptFor(all), keys, args)
	if err != nil {
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
		parts := reply[2+replyValues*k : 2+replyValues*(k+n)]
		if parts[0] == flagFailed {
			errs[j] = errDecisionFailed
		} else {
			errs[j] = parseParts(opDecide, reply, parts, p.rs, res[len(res)-n:])
		}
		k += n
	}
	return errs, res
}

// flagFailed is the flags of a batch's decision that failed in the
// script (FAILED in lua/head.lua): the script caught its error, and
// decided the others.
const flagFailed = -1

// errDecisionFailed: the batch script failed on this decision (pcall
// caught the error), as Redis would have answered it alone with an error
// reply: an error, not an outage.
var errDecisionFailed = &ReplyError{Msg: "sluice: the script failed on this decision's keys (a key holding another type, or a state it cannot read); the other decisions of its batch were decided"}

// errQueuedTooLong: a coalesced decision's Timeout ended before its batch
// answered (it waited for calls ahead of it): an outage, for which its
// policy decides.
var errQueuedTooLong = fmt.Errorf("redisscript: %w: no answer from Redis within the Timeout (the decision waited for a call ahead of it)", context.DeadlineExceeded)

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
