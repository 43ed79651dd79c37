package leasestore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/leasestore"
	"github.com/sluicehq/sluice/memlease"
	"github.com/sluicehq/sluice/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// hot is L = 8/s, B = 8: with 2 partitions, each 4/s with burst 4.
var hot = sluice.Limit{Name: "hot", Quota: 8, Window: time.Second, Burst: 8}

// newStore returns a Store on c with Next a memory store on the same
// clock, closed (with Run ended) at the test's end.
func newStore(t *testing.T, c lease.Coordinator, o leasestore.Options) *leasestore.Store {
	t.Helper()
	next, err := memstore.New(memstore.Options{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	o.Coordinator, o.Next, o.Now = c, next, time.Now // the bubble's clock
	s, err := leasestore.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		next.Close()
	})
	return s
}

type want struct {
	allowed bool
	retry   time.Duration
	// orRetry, when set, is the other retry a key's first request may
	// get: its Holder's first rounds may or may not have acquired
	// partitions by the time the request takes (they run at once, in a
	// goroutine of their own).
	orRetry time.Duration
}

func check(t *testing.T, s sluice.Limiter, key string, limit sluice.Limit, cost float64, w want) sluice.Decision {
	t.Helper()
	d, err := s.Allow(context.Background(), key, limit, cost)
	if err != nil {
		t.Fatalf("Allow(%v): %v", cost, err)
	}
	if d.Allowed != w.allowed || d.RetryAfter != w.retry && (w.orRetry == 0 || d.RetryAfter != w.orRetry) || d.Limit != limit {
		t.Fatalf("Allow(%v) at +%v = allowed %v, retry %v (limit %q); want allowed %v, retry %v", cost, since(), d.Allowed, d.RetryAfter, d.Limit.Name, w.allowed, w.retry)
	}
	return d
}

var start time.Time

// acquire asks for key until its Holder holds partitions (the lease
// Holder's first round only registers the member), on a synctest bubble's
// clock that does not move meanwhile.
func acquire(t *testing.T, s *leasestore.Store, key string, limit sluice.Limit) {
	t.Helper()
	for i := range 10 {
		if d, err := s.Allow(context.Background(), key, limit, 1); err != nil || d.Allowed {
			t.Fatalf("asking for partitions: %+v, %v", d, err)
		}
		synctest.Wait()
		for _, st := range s.Stats() {
			if st.Limit == limit.Name && st.Held > 0 {
				return
			}
		}
		if i > 0 {
			// Another member must give a partition back first, at its
			// next round.
			time.Sleep(100 * ms)
		}
	}
	t.Fatalf("no partition after 10 requests: %+v", s.Stats())
}

func since() time.Duration { return time.Since(start) }

// The leased path's own timeline, on one instance: what a key's first
// requests get (nothing held, then a quarantine), then a token bucket of
// the held partitions that starts empty.
func TestLeasedTimeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start = time.Now()
		s := newStore(t, memlease.New(nil), leasestore.Options{
			Limits: []leasestore.Leased{{Name: "hot", Partitions: 2, TTL: 900 * ms}}, // renew 300 ms, drift 50 ms
		})
		// Nothing held: rejected for a renew interval, the round kicked
		// (or, if the Holder's first rounds were quicker than the
		// request, quarantined: see below).
		check(t, s, "k", hot, 1, want{retry: 300 * ms, orRetry: 950 * ms})
		acquire(t, s, "k", hot)
		// The round acquired both partitions (the only member), never
		// held before: quarantined for TTL + drift, 950 ms.
		check(t, s, "k", hot, 1, want{retry: 950 * ms})
		time.Sleep(950 * ms)
		// Usable, and empty: one unit in 250 ms (4/s per partition).
		check(t, s, "k", hot, 1, want{retry: 250 * ms})
		time.Sleep(250 * ms)
		// One unit in each partition.
		check(t, s, "k", hot, 1, want{allowed: true})
		check(t, s, "k", hot, 1, want{allowed: true})
		check(t, s, "k", hot, 1, want{retry: 250 * ms})
		// A second of idle fills each partition to its burst (4), no more.
		time.Sleep(2 * time.Second)
		for range 8 {
			check(t, s, "k", hot, 1, want{allowed: true})
		}
		check(t, s, "k", hot, 1, want{retry: 250 * ms})
		// A cost above one partition's burst never fits, though it is
		// within the limit's.
		d, err := s.Allow(context.Background(), "k", hot, 5)
		if !errors.Is(err, sluice.ErrCostExceedsLimit) || !d.Never() {
			t.Fatalf("cost 5 of partitions of burst 4: %+v, %v; want Never, ErrCostExceedsLimit", d, err)
		}
		// Another key is another group: it starts over.
		check(t, s, "other", hot, 1, want{retry: 300 * ms, orRetry: 950 * ms})
	})
}

// Every leased decision says Remaining 0 (a lower bound) and ResetAfter
// the refill of an empty partition (an upper bound).
func TestLeasedDecisionFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, memlease.New(nil), leasestore.Options{Limits: []leasestore.Leased{{Name: "hot", Partitions: 2, TTL: 900 * ms}}})
		d, _ := s.Allow(context.Background(), "k", hot, 1)
		acquire(t, s, "k", hot)
		if d.Remaining != 0 || d.ResetAfter != time.Second {
			t.Fatalf("rejected: %+v; want Remaining 0, ResetAfter 1s (8 at 8/s)", d)
		}
		time.Sleep(2 * time.Second)
		d, _ = s.Allow(context.Background(), "k", hot, 1)
		if !d.Allowed || d.Remaining != 0 || d.ResetAfter != time.Second || d.Delay != 0 || d.Ticket != 0 {
			t.Fatalf("allowed: %+v; want Remaining 0, ResetAfter 1s", d)
		}
	})
}

// Limits not leased go to Next unchanged, and so does Release; bad input
// on a leased limit is refused as a store refuses it.
func TestNotLeasedAndBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, memlease.New(nil), leasestore.Options{Limits: []leasestore.Leased{{Name: "hot", Partitions: 2}}})
		ctx := context.Background()
		cold := sluice.Limit{Name: "cold", Quota: 2, Window: time.Second}
		for i, w := range []bool{true, true, false} {
			if d, err := s.Allow(ctx, "k", cold, 1); err != nil || d.Allowed != w {
				t.Fatalf("cold %d: %+v, %v; want allowed %v (Next's bucket)", i, d, err, w)
			}
		}
		slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Minute}
		d, _ := s.Allow(ctx, "k", slots, 1)
		if err := s.Release(ctx, "k", slots, d.Ticket); err != nil {
			t.Fatal(err)
		}
		if d, _ := s.Allow(ctx, "k", slots, 1); !d.Allowed {
			t.Fatalf("after Release: %+v; want the slot back", d)
		}
		for _, c := range []struct {
			key   string
			limit sluice.Limit
			cost  float64
			err   error
		}{
			{"k", hot, 0, sluice.ErrInvalidCost},
			{"k", hot, -1, sluice.ErrInvalidCost},
			{"k", hot, 1e-9, sluice.ErrInvalidCost},
			{"", hot, 1, sluice.ErrInvalidKey},
			{strings.Repeat("k", sluice.MaxKeyLen+1), hot, 1, sluice.ErrInvalidKey},
			{"k", sluice.Limit{Name: "hot", Quota: -1, Window: time.Second}, 1, sluice.ErrInvalidLimit},
			{"k", sluice.Limit{Name: "hot", Algorithm: sluice.FixedWindow, Quota: 8, Window: time.Second}, 1, sluice.ErrInvalidLimit},
			// Fewer units than partitions.
			{"k", sluice.Limit{Name: "hot", Quota: 1, Window: time.Second}, 1, sluice.ErrInvalidLimit},
		} {
			if d, err := s.Allow(ctx, c.key, c.limit, c.cost); !errors.Is(err, c.err) || d.Allowed {
				t.Errorf("Allow(key of %d bytes, %v, %v) = %+v, %v; want %v", len(c.key), c.limit, c.cost, d, err, c.err)
			}
		}
		if _, err := s.Charge(ctx, "k", hot, 1); !errors.Is(err, sluice.ErrInvalidRequest) || !errors.Is(err, leasestore.ErrLeased) {
			t.Errorf("Charge on a leased limit: %v; want ErrInvalidRequest, ErrLeased", err)
		}
		if _, err := s.Peek(ctx, "k", hot); !errors.Is(err, leasestore.ErrLeased) {
			t.Errorf("Peek on a leased limit: %v; want ErrLeased", err)
		}
		if d, err := s.Charge(ctx, "k", cold, 5); err != nil || !d.Allowed {
			t.Errorf("Charge on Next: %+v, %v", d, err)
		}
		if st, err := s.Peek(ctx, "k", cold); err != nil || st.Remaining != 0 {
			t.Errorf("Peek on Next: %+v, %v; want in debt, 0 left", st, err)
		}
		if st := s.Stats(); len(st) != 1 || st[0].Limit != "hot" || st[0].Keys != 0 {
			t.Errorf("Stats: %+v; want one leased limit and no key (bad input makes no Holder)", st)
		}
	})
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	c := memlease.New(nil)
	next, _ := memstore.New(memstore.Options{})
	defer next.Close()
	for _, c := range []struct {
		o    leasestore.Options
		says string
	}{
		{leasestore.Options{Next: next}, "Coordinator"},
		{leasestore.Options{Coordinator: c}, "Next"},
		{leasestore.Options{Coordinator: c, Next: next, MaxKeys: -1}, "MaxKeys"},
		{leasestore.Options{Coordinator: c, Next: next, Member: "bad member"}, "member"},
		{leasestore.Options{Coordinator: c, Next: next, Limits: []leasestore.Leased{{Name: "bad name"}}}, "name"},
		{leasestore.Options{Coordinator: c, Next: next, Limits: []leasestore.Leased{{Name: "a"}, {Name: "a"}}}, "twice"},
		{leasestore.Options{Coordinator: c, Next: next, Limits: []leasestore.Leased{{Name: "a", Partitions: 2000}}}, "partitions"},
		{leasestore.Options{Coordinator: c, Next: next, Limits: []leasestore.Leased{{Name: "a", TTL: 10 * ms}}}, "ttl"},
		{leasestore.Options{Coordinator: c, Next: next, Limits: []leasestore.Leased{{Name: "a", OutageShare: 1}}}, "outage share"},
		{leasestore.Options{Coordinator: c, Next: next, Limits: []leasestore.Leased{{Name: "a", OutageShare: -0.1}}}, "outage share"},
		{leasestore.Options{Coordinator: c, Next: next, Limits: []leasestore.Leased{{Name: "a", Policy: 9}}}, "failure policy"},
		{leasestore.Options{Coordinator: c, Next: next, Limits: []leasestore.Leased{{Name: "a", Idle: -1}}}, "idle"},
	} {
		if _, err := leasestore.New(c.o); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("New(%+v) = %v; want an error saying %q", c.o.Limits, err, c.says)
		}
	}
}

// recording is a Coordinator that remembers the groups it was asked
// about.
type recording struct {
	lease.Coordinator
	mu     sync.Mutex
	groups map[string]bool
}

func (r *recording) Sync(ctx context.Context, req lease.SyncRequest) (lease.SyncReply, error) {
	r.mu.Lock()
	r.groups[req.Group.Name] = true
	r.mu.Unlock()
	return r.Coordinator.Sync(ctx, req)
}

// A key's group is named by the limit and a hash of the key, keyed by
// the secret: the Coordinator never sees the key, and two secrets give
// two names.
func TestGroupNamesHideTheKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		names := map[string]string{}
		for _, secret := range []string{"", "s3cret-s3cret-s3cret-s3cret-s3cret"} {
			rec := &recording{Coordinator: memlease.New(nil), groups: map[string]bool{}}
			s := newStore(t, rec, leasestore.Options{Secret: []byte(secret), Limits: []leasestore.Leased{{Name: "hot", Partitions: 2}}})
			s.Allow(context.Background(), "tenant-42@example.com", hot, 1)
			synctest.Wait()
			if len(rec.groups) != 1 {
				t.Fatalf("groups %v; want one", rec.groups)
			}
			for g := range rec.groups {
				if strings.Contains(g, "tenant") || strings.Contains(g, "example") || !strings.HasPrefix(g, "hot:") || len(g) != len("hot:")+16 {
					t.Fatalf("group %q: want hot:<16 hex digits>, nothing of the key", g)
				}
				names[secret] = g
			}
		}
		if names[""] == names["s3cret-s3cret-s3cret-s3cret-s3cret"] {
			t.Fatalf("the secret does not key the group's name: %v", names)
		}
	})
}

// cuttable is a Coordinator whose link can be cut: a cut call fails after
// the time a timeout takes, as a dead link does.
type cuttable struct {
	lease.Coordinator
	cut atomic.Bool
}

var errCut = errors.New("link cut")

func (c *cuttable) Sync(ctx context.Context, req lease.SyncRequest) (lease.SyncReply, error) {
	if c.cut.Load() {
		<-ctx.Done()
		return lease.SyncReply{}, errCut
	}
	return c.Coordinator.Sync(ctx, req)
}

// Cut off from the Coordinator, an instance spends what it holds until
// the local deadline, and then its failure policy decides.
func TestFailurePolicies(t *testing.T) {
	for _, c := range []struct {
		policy  sluice.FailurePolicy
		share   float64
		allowed int // of 10 unit requests at once, once the leases ran out
		retry   time.Duration
	}{
		{sluice.FailOpen, 0, 10, 0},
		{sluice.FailClosed, 0, 0, 300 * ms},
		{sluice.FailLocal, 0, 0, 300 * ms}, // no share: closed
		// A share of 1/2 of 8/s, burst 8: 4/2 = 2 per second and a burst
		// of 2 for each of the two members.
		{sluice.FailLocal, 0.5, 2, 500 * ms},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				link := &cuttable{Coordinator: memlease.New(nil)}
				limits := []leasestore.Leased{{Name: "hot", Partitions: 2, TTL: 900 * ms, Policy: c.policy, OutageShare: c.share}}
				s := newStore(t, link, leasestore.Options{Member: "a", Limits: limits})
				other := newStore(t, link, leasestore.Options{Member: "b", Limits: limits})
				ctx := context.Background()
				acquire(t, s, "k", hot)
				time.Sleep(50 * ms)
				acquire(t, other, "k", hot)
				time.Sleep(3 * time.Second) // both members seen; partitions out of quarantine
				if d, _ := s.Allow(ctx, "k", hot, 1); !d.Allowed {
					t.Fatalf("before the cut: %+v; want allowed", d)
				}
				link.cut.Store(true)
				// The first round cut off fails within two renew
				// intervals; a TTL after the last renew sent, which is
				// later, a's leases still hold.
				time.Sleep(600 * ms)
				if st := s.Stats()[0]; st.Usable == 0 || st.Unreachable != 1 {
					t.Fatalf("just cut: %+v; want partitions still usable, the key unreachable", st)
				}
				time.Sleep(time.Second) // past every local deadline
				if st := s.Stats()[0]; st.Held != 0 || st.Lost == 0 {
					t.Fatalf("past the deadline: %+v; want nothing held, leases lost", st)
				}
				allowed := 0
				var last sluice.Decision
				for range 10 {
					d, err := s.Allow(ctx, "k", hot, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					} else {
						last = d
					}
				}
				if allowed != c.allowed || allowed < 10 && last.RetryAfter != c.retry {
					t.Fatalf("cut off: %d of 10 allowed, last rejection %+v; want %d allowed, retry %v", allowed, last, c.allowed, c.retry)
				}
				st := s.Stats()[0]
				if got := st.FailOpen + st.FailClosed + st.FailLocal; got != 10 {
					t.Fatalf("policy decisions counted: %+v; want 10", st)
				}
				link.cut.Store(false)
			})
		})
	}
}

// Keys beyond MaxKeys are refused — even under fail_open — counted, and
// logged once; an idle key's Holder is stopped, its partitions given
// back, which makes room.
func TestMaxKeysAndIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, memlease.New(nil), leasestore.Options{MaxKeys: 1,
			Limits: []leasestore.Leased{{Name: "hot", Partitions: 2, TTL: 900 * ms, Idle: 3 * time.Second, Policy: sluice.FailOpen}}})
		ctx := context.Background()
		check(t, s, "a", hot, 1, want{retry: 300 * ms, orRetry: 950 * ms})
		acquire(t, s, "a", hot)
		check(t, s, "b", hot, 1, want{retry: 300 * ms}) // refused, not the policy's allow
		if st := s.Stats()[0]; st.Keys != 1 || st.Overflow != 1 || st.FailOpen != 0 {
			t.Fatalf("%+v; want 1 key, 1 overflow refused (not decided open)", st)
		}
		time.Sleep(1500 * ms)
		if d, _ := s.Allow(ctx, "a", hot, 1); !d.Allowed {
			t.Fatalf("a: %+v", d)
		}
		if st := s.Stats()[0]; st.Held != 2 {
			t.Fatalf("%+v; want a's 2 partitions", st)
		}
		time.Sleep(5 * time.Second) // a idle past 3 s
		st := s.Stats()[0]
		if st.Keys != 0 || st.Stopped != 1 || st.Released != 2 || st.Held != 0 {
			t.Fatalf("after a's idle time: %+v; want no key, 1 stopped, its 2 partitions given back", st)
		}
		// Given back gracefully, but more than a TTL ago: a group silent
		// for a TTL trusts no "given back" (Redis may have come back from
		// an older copy), so a's group, asked again, is quarantined.
		check(t, s, "a", hot, 1, want{retry: 300 * ms, orRetry: 950 * ms})
		acquire(t, s, "a", hot)
		check(t, s, "a", hot, 1, want{retry: 950 * ms}) // TTL + drift
	})
}

// AllowAll across a leased limit and Next's: Next decides first, then
// the partitions; what each mode spends when one side rejects.
func TestAllowAllMixed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, memlease.New(nil), leasestore.Options{Limits: []leasestore.Leased{{Name: "hot", Partitions: 2, TTL: 900 * ms}}})
		ctx := context.Background()
		acquire(t, s, "g", hot)
		time.Sleep(2 * time.Second) // out of quarantine, full: 4 + 4
		tenant := sluice.Limit{Name: "tenant", Quota: 1, Window: time.Hour}
		slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 5, Window: time.Hour}
		reqs := func(tenantKey string) []sluice.Request {
			return []sluice.Request{{Key: "g", Limit: hot, Cost: 1}, {Key: tenantKey, Limit: tenant, Cost: 1}, {Key: "s", Limit: slots, Cost: 1}}
		}
		each := make([]sluice.Decision, 3)
		// Allowed: every part spent, the slot held.
		d, err := s.AllowAll(ctx, reqs("t1"), sluice.AllOrNothing, each)
		if err != nil || !d.Allowed || each[2].Ticket == 0 || d.Limit.Name != "hot" {
			t.Fatalf("%+v / %+v, %v; want allowed, reported by hot (Remaining 0), a ticket", d, each, err)
		}
		// The tenant rejects: AllOrNothing touches no partition, holds no slot.
		d, err = s.AllowAll(ctx, reqs("t1"), sluice.AllOrNothing, each)
		if err != nil || d.Allowed || d.Limit.Name != "tenant" || !each[0].Allowed || each[2].Ticket != 0 {
			t.Fatalf("%+v / %+v, %v; want rejected by tenant, hot not tried, no ticket", d, each, err)
		}
		// RejectionsCount charges the partitions all the same.
		if d, _ := s.AllowAll(ctx, reqs("t1"), sluice.RejectionsCount, each); d.Allowed || !each[0].Allowed || each[2].Ticket != 0 {
			t.Fatalf("%+v / %+v; want rejected by tenant, hot charged, no ticket", d, each)
		}
		// 8 - 2 spent: 6 left in the partitions.
		for i := range 6 {
			if d, _ := s.Allow(ctx, "g", hot, 1); !d.Allowed {
				t.Fatalf("hot, unit %d of the 6 left: %+v", i, d)
			}
		}
		// The partitions reject after Next allowed: Next's token stays
		// spent (under-admission, documented), the slot is released.
		d, err = s.AllowAll(ctx, reqs("t2"), sluice.AllOrNothing, each)
		if err != nil || d.Allowed || d.Limit.Name != "hot" || !each[1].Allowed || each[2].Ticket != 0 {
			t.Fatalf("%+v / %+v, %v; want rejected by hot, no ticket", d, each, err)
		}
		if d, _ := s.Allow(ctx, "t2", tenant, 1); d.Allowed {
			t.Fatalf("t2 after a call the partitions rejected: %+v; want its token spent", d)
		}
		// One slot held by the first call, the rejected calls' released.
		for i := range 4 {
			if d, _ := s.Allow(ctx, "s", slots, 1); !d.Allowed {
				t.Fatalf("slot %d of the 4 free: %+v", i, d)
			}
		}
		if d, _ := s.Allow(ctx, "s", slots, 1); d.Allowed {
			t.Fatalf("a sixth slot: %+v; want a rejected call to have held none", d)
		}
		// A leased part that never fits rejects the call before Next is asked.
		never := []sluice.Request{{Key: "t3", Limit: tenant, Cost: 1}, {Key: "g", Limit: hot, Cost: 5}}
		d, err = s.AllowAll(ctx, never, sluice.AllOrNothing, each[:2])
		if !errors.Is(err, sluice.ErrCostExceedsLimit) || !d.Never() || d.Limit.Name != "hot" || !each[0].Allowed {
			t.Fatalf("%+v / %+v, %v; want Never from hot", d, each[:2], err)
		}
		if d, _ := s.Allow(ctx, "t3", tenant, 1); !d.Allowed {
			t.Fatalf("t3 after the never call: %+v; want its token unspent", d)
		}
		dup := []sluice.Request{{Key: "g", Limit: hot, Cost: 1}, {Key: "g", Limit: hot, Cost: 1}}
		if _, err := s.AllowAll(ctx, dup, sluice.AllOrNothing, nil); !errors.Is(err, sluice.ErrInvalidRequest) {
			t.Fatalf("duplicate leased request: %v; want ErrInvalidRequest", err)
		}
		bad := []sluice.Request{{Key: "t4", Limit: tenant, Cost: 1}, {Key: "g", Limit: hot, Cost: -1}}
		if _, err := s.AllowAll(ctx, bad, sluice.AllOrNothing, nil); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Fatalf("bad leased cost: %v; want ErrInvalidCost", err)
		}
		if d, _ := s.Allow(ctx, "t4", tenant, 1); !d.Allowed {
			t.Fatalf("t4 after a refused call: %+v; want nothing spent", d)
		}
	})
}

// Many goroutines on keys that come and go (MaxKeys reached, idle keys
// stopped, parameters changed) while Stats is read and the Store closes:
// no race, no leak, and every answer a decision or ErrClosed.
func TestChurnAndClose(t *testing.T) {
	t.Parallel()
	next, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	s, err := leasestore.New(leasestore.Options{Coordinator: memlease.New(nil), Next: next, MaxKeys: 8,
		Limits: []leasestore.Leased{{Name: "hot", Partitions: 2, TTL: 60 * ms, Idle: 120 * ms}, {Name: "warm", Partitions: 1, TTL: 60 * ms, Policy: sluice.FailClosed}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	limits := []sluice.Limit{hot, {Name: "hot", Quota: 16, Window: time.Second}, {Name: "warm", Quota: 4, Window: time.Second}, {Name: "cold", Quota: 4, Window: time.Second}}
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := string(rune('a' + (g+i)%12))
				_, err := s.Allow(ctx, key, limits[(g+i)%len(limits)], 1)
				if err != nil && !errors.Is(err, leasestore.ErrClosed) {
					t.Errorf("Allow: %v", err)
					return
				}
				if i%16 == 0 {
					reqs := []sluice.Request{{Key: key, Limit: hot, Cost: 1}, {Key: key, Limit: limits[3], Cost: 1}}
					if _, err := s.AllowAll(ctx, reqs, sluice.AllOrNothing, nil); err != nil && !errors.Is(err, leasestore.ErrClosed) {
						t.Errorf("AllowAll: %v", err)
						return
					}
				}
				if i%64 == 0 {
					s.Stats()
					time.Sleep(ms)
				}
			}
		})
	}
	time.Sleep(500 * ms)
	cancel() // Run closes the Store while the goroutines decide
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	close(stop)
	wg.Wait()
	if _, err := s.Allow(context.Background(), "a", hot, 1); !errors.Is(err, leasestore.ErrClosed) {
		t.Errorf("Allow after Close: %v; want ErrClosed", err)
	}
	st := s.Stats()
	if st[0].Limit != "hot" || st[0].Syncs == 0 || st[1].Syncs == 0 {
		t.Errorf("Stats after Close: %+v; want the rounds of both limits counted", st)
	}
	s.Close() // again: nothing
}

// MaxCost is one partition's burst: a cost of it fits once the partitions
// are full, a cost above it never fits; a limit the leases cannot hold is
// Check's error.
func TestMaxCost(t *testing.T) {
	for _, c := range []struct {
		leased leasestore.Leased
		want   float64
	}{
		{leasestore.Leased{Name: "hot", Partitions: 2}, 4},                   // 8 / 2
		{leasestore.Leased{Name: "hot", Partitions: 2, OutageShare: 0.5}, 2}, // 8 × 0.5 / 2
		{leasestore.Leased{Name: "hot", Partitions: 8}, 1},
	} {
		got, err := c.leased.MaxCost(hot)
		if err != nil || got != c.want {
			t.Errorf("%+v: MaxCost = %v, %v; want %v", c.leased, got, err, c.want)
		}
	}
	window := hot
	window.Algorithm = sluice.FixedWindow
	if _, err := (leasestore.Leased{Name: "hot"}).MaxCost(window); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("a fixed window: %v; want ErrInvalidLimit", err)
	}
	synctest.Test(t, func(t *testing.T) {
		start = time.Now()
		leased := leasestore.Leased{Name: "hot", Partitions: 2, TTL: 900 * ms}
		most, err := leased.MaxCost(hot)
		if err != nil {
			t.Fatal(err)
		}
		s := newStore(t, memlease.New(nil), leasestore.Options{Limits: []leasestore.Leased{leased}})
		acquire(t, s, "k", hot)
		time.Sleep(3 * time.Second) // out of quarantine, both partitions full
		if d, err := s.Allow(context.Background(), "k", hot, most+0.5); !errors.Is(err, sluice.ErrCostExceedsLimit) || !d.Never() {
			t.Fatalf("cost %v, above MaxCost: %+v, %v; want Never", most+0.5, d, err)
		}
		check(t, s, "k", hot, most, want{allowed: true})
	})
}
