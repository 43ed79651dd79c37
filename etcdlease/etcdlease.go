// Package etcdlease is a [lease.Coordinator] on etcd: the partitions of a
// group are keys that one etcd transaction hands out, and etcd's revisions
// are the epochs that fence them.
//
// # Keys
//
// A group's keys live under "<Prefix>/<group>/@" ('@' is not allowed in
// a group's name, so no group's keys lie under another's):
//
//	@m/<member>      "<until> <want>": the member is alive until <until>
//	                 (Unix milliseconds) and asks for <want> partitions;
//	                 bound to an etcd lease that reaps it once it is dead
//	@p/<n>/holder    the ID of the member that holds partition n; the
//	                 key's ModRevision is the holder's epoch
//	@p/<n>/until     "<until>": the holder's lease on n ends then
//	@p/<n>/given     present while n was given back (Release, Leave) and
//	                 not acquired since
//
// # Epochs and takeovers
//
// Acquiring partition n writes @p/n/holder, so its epoch is the revision
// of the transaction that acquired it: etcd's revisions increase across
// the whole cluster, so every acquisition of n is under an epoch larger
// than any n had, whoever held it. A renewal or release names that epoch
// and succeeds only while @p/n/holder still names the member at that
// ModRevision; a renewal rewrites @p/n/until alone and keeps the epoch.
// A lease that lapsed and that no one took is renewed as before (the
// contract's self re-claim): nothing deletes @p/n/holder but an
// acquisition or a release.
//
// An acquisition is TakenOver unless @p/n/given was there: a partition
// whose holder's lease lapsed, and one that was never held — a new group
// cannot be told from one whose keys were lost — are takeovers.
//
// # Time
//
// Leases last the group's TTL, down to lease.MinTTL, on the wall clock of
// the calling processes (Options.Now): etcd's own leases count whole
// seconds, last at least a few (the server's minimum TTL) and are expired
// by a loop that runs twice a second, so they cannot time a lease of
// 300 ms. Each Sync stamps the member's and the renewed and acquired
// partitions' keys with now + TTL, and judges what lapsed against its own
// now. The members' clocks must therefore agree to well within a TTL:
// a member whose clock runs ahead by d sees the others' leases lapse d
// early. That moves takeovers, not safety: a takeover is quarantined for
// TTL plus the drift margin by the Holder, and every holder stops
// spending TTL after it sent its last renewal, so two holders never spend
// one partition at once as long as no member's clock is ahead of
// another's by more than TTL plus the drift margin (run NTP; on etcd the
// drift margin covers the offset between the processes' clocks, on Redis
// only the rates of the clocks). etcd leases serve only to reap the keys
// of members that died (see Sync).
//
// # Round trips
//
// Sync is one etcd transaction when it acquires nothing (the Holder's
// steady state: renewals), and two — a read of the group's partitions,
// then the transaction — when it does: etcd's transactions cannot pick
// "the first n free keys" themselves. The etcd lease the member keys are
// bound to is granted by the first Sync of a Coordinator and again by the
// first Sync after a third of its life (20 s of 60 s, for TTLs up to
// 20 s) has gone: one more round trip then, none per Sync. Leave is one
// transaction.
//
// # Operating
//
// A Sync of P partitions nests up to P small transactions, at most 100 to
// a level: etcd's --max-txn-ops must stay at least 100 (its default is
// 128). Each group keeps at most three keys per partition for as long as
// etcd does; a member's key goes with its etcd lease, a minute (or three
// TTLs) after its last Sync, or at once on Leave.
//
// Epochs are etcd revisions, so they go back when etcd's revisions do: a
// restore from a snapshot that does not move the revision past every
// epoch issued since (etcdutl snapshot restore --bump-revision), or a new
// empty cluster after etcd's data was lost. The lost keys make the next
// acquisitions takeovers, quarantined, so two holders still do not spend
// one partition at once; but targets that check fences (lease.Fences)
// refuse the new, smaller epochs as stale until they pass the old ones or
// the targets restart.
package etcdlease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicehq/sluice/lease"
)

// Options configures a Coordinator. Zero fields take their defaults.
type Options struct {
	// Client is the etcd client to use (required). The Coordinator never
	// closes it; close it after the last call.
	Client *clientv3.Client
	// Prefix is the prefix of every key, without a trailing "/" (default
	// "sluice/lease").
	Prefix string
	// Timeout bounds each Sync and Leave, all of its round trips together
	// (default 1s); a shorter deadline of the caller's context wins. A call
	// that runs out of time returns an error and may or may not have been
	// applied.
	Timeout time.Duration
	// Now is the clock leases are stamped and judged with (default
	// time.Now); see the package documentation on time.
	Now func() time.Time
}

// DefaultPrefix is the Prefix of a zero Options.
const DefaultPrefix = "sluice/lease"

// DefaultTimeout is the Timeout of a zero Options.
const DefaultTimeout = time.Second

// client is what a Coordinator uses of an etcd client.
type client interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Txn(ctx context.Context) clientv3.Txn
	Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error)
}

// Coordinator grants the partitions of groups to members through etcd.
// It is safe for concurrent use; it keeps no state of the groups, only the
// etcd lease its member keys are bound to, so any number of Coordinators,
// in any processes, may serve one group. It never retries a call (the etcd
// client's own retries within Timeout aside: of reads, and of writes that
// did not reach the server): an error from etcd (unreachable, no leader,
// timeout) is returned, wrapped, and the next call starts afresh.
type Coordinator struct {
	kv      client
	prefix  string
	timeout time.Duration
	now     func() time.Time
	leases  reapers
}

var _ lease.Coordinator = (*Coordinator)(nil)

// New returns a Coordinator configured by o. It fails, with an error
// wrapping lease.ErrInvalid, when o.Client is nil, o.Prefix ends in "/"
// or o.Timeout is negative. It does not contact etcd.
func New(o Options) (*Coordinator, error) {
	if o.Client == nil {
		return nil, fmt.Errorf("etcdlease: new: %w: Options.Client is required", lease.ErrInvalid)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.HasSuffix(o.Prefix, "/") {
		return nil, fmt.Errorf("etcdlease: new: %w: prefix %q ends in \"/\"", lease.ErrInvalid, o.Prefix)
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("etcdlease: new: %w: timeout %v is negative", lease.ErrInvalid, o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Coordinator{kv: o.Client, prefix: o.Prefix, timeout: o.Timeout, now: o.Now, leases: reapers{byTTL: map[int64]reaper{}}}, nil
}

// Sync is one round of the protocol for one member; see
// lease.Coordinator. The member's key, its releases, renewals and
// acquisitions are one etcd transaction, atomic as the contract wants;
// when Acquire is above zero a read of the group's partitions comes
// first, and the transaction acquires only what that read found free and
// no one changed since — so a Sync racing others may acquire fewer than
// it could have, never a partition someone else got. A partition named
// in Held or Release is not acquired by the same Sync.
//
// An invalid request is refused with an error wrapping lease.ErrInvalid,
// before anything is sent.
func (c *Coordinator) Sync(ctx context.Context, req lease.SyncRequest) (lease.SyncReply, error) {
	reply, err := c.sync(ctx, req)
	if err != nil {
		return lease.SyncReply{}, fmt.Errorf("etcdlease: sync: %w", err)
	}
	return reply, nil
}

func (c *Coordinator) sync(ctx context.Context, req lease.SyncRequest) (lease.SyncReply, error) {
	if err := req.Validate(); err != nil {
		return lease.SyncReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return lease.SyncReply{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ks := c.keys(req.Group.Name)

	reaper, err := c.leases.get(ctx, c.kv, reapTTL(req.Group.TTL))
	if err != nil {
		return lease.SyncReply{}, fmt.Errorf("grant the members' etcd lease: %w", err)
	}
	var free []freePartition
	if req.Acquire > 0 {
		if free, err = c.free(ctx, ks, req); err != nil {
			return lease.SyncReply{}, fmt.Errorf("read partitions: %w", err)
		}
	}
	now := c.now()
	resp, err := c.kv.Txn(ctx).Then(round(ks, req, reaper, free, now)...).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// etcd lost the lease (its data was wiped, or someone revoked
			// it): the next Sync grants another.
			c.leases.forget(reaper)
		}
		return lease.SyncReply{}, fmt.Errorf("transaction: %w", err)
	}
	return reply(ks, req, free, resp, now)
}

// round is the transaction of a Sync, in the contract's order: the
// member's key, then one step per partition released, renewed and
// acquired (nested by chunk), then a read of the members. Each step has
// its own condition, so the transaction as a whole always applies, and
// applying it twice changes nothing more: a release or acquisition done
// once no longer meets its condition, and a renewal writes the same end.
func round(ks keys, req lease.SyncRequest, reaper clientv3.LeaseID, free []freePartition, now time.Time) []clientv3.Op {
	until := strconv.FormatInt(now.Add(req.Group.TTL).UnixMilli(), 10)
	steps := make([]clientv3.Op, 0, len(req.Release)+len(req.Held)+len(free))
	for _, g := range req.Release {
		steps = append(steps, release(ks, req.Member, g))
	}
	for _, g := range req.Held {
		steps = append(steps, renew(ks, req.Member, g, until))
	}
	for _, f := range free {
		steps = append(steps, acquire(ks, req.Member, f, until))
	}
	return append([]clientv3.Op{
		clientv3.OpPut(ks.member(req.Member), until+" "+strconv.Itoa(req.Want), clientv3.WithLease(reaper)),
		clientv3.OpGet(ks.members(), clientv3.WithPrefix()),
	}, chunk(steps)...)
}

// reply reads the answer to req from the response to its round.
func reply(ks keys, req lease.SyncRequest, free []freePartition, resp *clientv3.TxnResponse, now time.Time) (lease.SyncReply, error) {
	done, err := succeeded(resp.Responses[2:], len(req.Release)+len(req.Held)+len(free))
	if err != nil {
		return lease.SyncReply{}, err
	}
	var r lease.SyncReply
	done = done[len(req.Release):]
	for i, g := range req.Held {
		if done[i] {
			r.Renewed = append(r.Renewed, g)
		}
	}
	done = done[len(req.Held):]
	for i, f := range free {
		if done[i] {
			r.Acquired = append(r.Acquired, lease.Acquired{
				// The transaction's revision: the holder key's ModRevision.
				Grant:     lease.Grant{Partition: f.partition, Epoch: uint64(resp.Header.Revision)},
				TakenOver: f.given == 0,
			})
		}
	}
	members := withSelf(liveMembers(ks, resp.Responses[1].GetResponseRange().Kvs, now), member{req.Member, req.Want})
	for i, m := range members {
		r.Wants = append(r.Wants, m.want)
		if m.id == req.Member {
			r.Self = i
		}
	}
	return r, nil
}

// Leave gives back held (each only if still the member's under that
// epoch) and deletes the member's key, in one etcd transaction; see
// lease.Coordinator. Leaving twice, or a member never seen, is no error.
// An invalid request is refused with an error wrapping lease.ErrInvalid,
// before anything is sent.
func (c *Coordinator) Leave(ctx context.Context, g lease.Group, member string, held []lease.Grant) error {
	if err := c.leave(ctx, g, member, held); err != nil {
		return fmt.Errorf("etcdlease: leave: %w", err)
	}
	return nil
}

func (c *Coordinator) leave(ctx context.Context, g lease.Group, member string, held []lease.Grant) error {
	if err := (lease.SyncRequest{Group: g, Member: member, Release: held}).Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ks := c.keys(g.Name)
	steps := make([]clientv3.Op, 0, len(held))
	for _, gr := range held {
		steps = append(steps, release(ks, member, gr))
	}
	if _, err := c.kv.Txn(ctx).Then(append([]clientv3.Op{clientv3.OpDelete(ks.member(member))}, chunk(steps)...)...).Commit(); err != nil {
		return fmt.Errorf("transaction: %w", err)
	}
	return nil
}

// freePartition is a partition a read found free, with the ModRevisions
// of its keys then (0: absent).
type freePartition struct {
	partition            int
	holder, until, given int64
}

// free reads the group's partitions and returns up to req.Acquire free
// ones that req does not name, those given back first (they need no
// quarantine), each kind in random order (so that members acquiring at
// once spread over the free partitions instead of racing for the first).
func (c *Coordinator) free(ctx context.Context, ks keys, req lease.SyncRequest) ([]freePartition, error) {
	resp, err := c.kv.Get(ctx, ks.partitions(), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	now := c.now().UnixMilli()
	state := make(map[int]*freePartition)
	lapsed := make(map[int]bool)
	for _, kv := range resp.Kvs {
		p, field, ok := ks.partitionKey(string(kv.Key))
		if !ok || p >= req.Group.Partitions {
			continue // not ours, or left by a configuration with more partitions
		}
		f := state[p]
		if f == nil {
			f = &freePartition{partition: p}
			state[p] = f
		}
		switch field {
		case "holder":
			f.holder = kv.ModRevision
		case "until":
			f.until = kv.ModRevision
			// An end that does not parse is no lease: acquiring the
			// partition writes a good one.
			ms, err := strconv.ParseInt(string(kv.Value), 10, 64)
			lapsed[p] = err != nil || ms <= now
		case "given":
			f.given = kv.ModRevision
		}
	}
	named := make(map[int]bool, len(req.Held)+len(req.Release))
	for _, g := range slices.Concat(req.Held, req.Release) {
		named[g.Partition] = true
	}
	var given, other []freePartition
	for p := range req.Group.Partitions {
		f := state[p]
		switch {
		case named[p]:
		case f == nil:
			other = append(other, freePartition{partition: p})
		case f.holder != 0 && f.until != 0 && !lapsed[p]:
			// held
		case f.given != 0:
			given = append(given, *f)
		default:
			other = append(other, *f)
		}
	}
	rand.Shuffle(len(given), func(i, j int) { given[i], given[j] = given[j], given[i] })
	rand.Shuffle(len(other), func(i, j int) { other[i], other[j] = other[j], other[i] })
	all := append(given, other...)
	return all[:min(req.Acquire, len(all))], nil
}

// release gives g back if member holds it under that epoch.
func release(ks keys, member string, g lease.Grant) clientv3.Op {
	p := g.Partition
	return clientv3.OpTxn(heldBy(ks, member, g), []clientv3.Op{
		clientv3.OpDelete(ks.holder(p)),
		clientv3.OpDelete(ks.until(p)),
		clientv3.OpPut(ks.given(p), member),
	}, nil)
}

// renew moves g's end to until if member holds it under that epoch.
func renew(ks keys, member string, g lease.Grant, until string) clientv3.Op {
	return clientv3.OpTxn(heldBy(ks, member, g), []clientv3.Op{
		clientv3.OpPut(ks.until(g.Partition), until),
	}, nil)
}

// acquire takes f for member until then, if no key of f changed since
// it was read.
func acquire(ks keys, member string, f freePartition, until string) clientv3.Op {
	p := f.partition
	return clientv3.OpTxn([]clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(ks.holder(p)), "=", f.holder),
		clientv3.Compare(clientv3.ModRevision(ks.until(p)), "=", f.until),
		clientv3.Compare(clientv3.ModRevision(ks.given(p)), "=", f.given),
	}, []clientv3.Op{
		clientv3.OpPut(ks.holder(p), member),
		clientv3.OpPut(ks.until(p), until),
		clientv3.OpDelete(ks.given(p)),
	}, nil)
}

// heldBy is the condition that member holds g: the holder key names it
// and was last written by the acquisition that issued g's epoch.
func heldBy(ks keys, member string, g lease.Grant) []clientv3.Cmp {
	rev := int64(-1) // an epoch etcd never issued matches no key
	if g.Epoch <= math.MaxInt64 {
		rev = int64(g.Epoch)
	}
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(ks.holder(g.Partition)), "=", member),
		clientv3.Compare(clientv3.ModRevision(ks.holder(g.Partition)), "=", rev),
	}
}

// maxOps is the most operations chunk puts in one level of a
// transaction: below etcd's default --max-txn-ops of 128.
const maxOps = 100

// chunk nests steps into transactions of at most maxOps each, which
// always apply (the steps keep their own conditions). With at most
// lease.MaxPartitions steps, the top level gets at most 11.
func chunk(steps []clientv3.Op) []clientv3.Op {
	var out []clientv3.Op
	for c := range slices.Chunk(steps, maxOps) {
		out = append(out, clientv3.OpTxn(nil, c, nil))
	}
	return out
}

// succeeded returns, for each of n steps chunk nested, whether its
// condition held.
func succeeded(chunks []*pb.ResponseOp, n int) ([]bool, error) {
	out := make([]bool, 0, n)
	for _, c := range chunks {
		t := c.GetResponseTxn()
		if t == nil {
			return nil, errors.New("transaction: a chunk's response is not a transaction's")
		}
		for _, r := range t.Responses {
			s := r.GetResponseTxn()
			if s == nil {
				return nil, errors.New("transaction: a step's response is not a transaction's")
			}
			out = append(out, s.Succeeded)
		}
	}
	if len(out) != n {
		return nil, fmt.Errorf("transaction: %d step responses for %d steps", len(out), n)
	}
	return out, nil
}

// member is a live member and its want.
type member struct {
	id   string
	want int
}

// liveMembers parses the member keys kvs (in key order, which is the
// byte order of the IDs) and keeps those alive at now. A key that does not
// parse as "<until> <want>" is no member: it was not written by a
// Coordinator, and failing every Sync of the group over it would be worse.
func liveMembers(ks keys, kvs []*mvccpb.KeyValue, now time.Time) []member {
	var out []member
	for _, kv := range kvs {
		id := strings.TrimPrefix(string(kv.Key), ks.members())
		u, w, ok := strings.Cut(string(kv.Value), " ")
		until, err1 := strconv.ParseInt(u, 10, 64)
		want, err2 := strconv.Atoi(w)
		if ok && err1 == nil && err2 == nil && until > now.UnixMilli() {
			out = append(out, member{id, want})
		}
	}
	return out
}

// withSelf returns members with self in its place, whatever the read
// returned for it.
func withSelf(members []member, self member) []member {
	i, found := slices.BinarySearchFunc(members, self.id, func(m member, id string) int { return cmp.Compare(m.id, id) })
	if found {
		members[i] = self
		return members
	}
	return slices.Insert(members, i, self)
}
