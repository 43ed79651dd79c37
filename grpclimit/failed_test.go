package grpclimit_test

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
)

// spentThenFailed is a real memstore whose multi-limit calls, while fail
// is set, decide for real (a concurrency slot is taken) and then report an
// error (err, or errGarbage), as a store does whose reply fails its checks
// after the spend — fault injection after the real decision, not a mock
// of one.
type spentThenFailed struct {
	*counting
	fail atomic.Bool
	err  error
}

func (s *spentThenFailed) AllowAll(ctx context.Context, reqs []sluice.Request, mode sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	d, err := s.counting.AllowAll(ctx, reqs, mode, each)
	if err == nil && s.fail.Load() {
		err = cmp.Or(s.err, errGarbage)
	}
	return d, err
}

// errInvalid is what a store says of a cost finer than a limit's
// resolution.
var errInvalid = fmt.Errorf("request 1: %w: cost 1e-09 for limit \"hourly\": below the resolution of 0.000001", sluice.ErrInvalidCost)

// A limiter that failed after it took a concurrency slot: the call that
// does not run (fail_closed) gives it back at once, and the call that runs
// (fail_open) gives it back when its handler returns. Before, both kept it
// until the limit's window ended, and the next call was refused.
func TestFailedCallReleasesItsSlots(t *testing.T) {
	t.Parallel()
	slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
	hourly := sluice.Limit{Name: "hourly", Quota: 100, Window: time.Hour}
	for _, policy := range []sluice.FailurePolicy{sluice.FailClosed, sluice.FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			var store spentThenFailed
			f := newFixture(t, grpclimit.Options{Limiter: &store, Rules: []grpclimit.Rule{
				{Name: "r", OnError: policy, Quotas: []grpclimit.Quota{{Limit: slots, Key: global}, {Limit: hourly, Key: global}}},
			}})
			store.counting = f.store
			store.fail.Store(true)
			want := codes.Unavailable
			if policy == sluice.FailOpen {
				want = codes.OK
			}
			for _, r := range []reply{f.call(nil, say, "hi"), f.stream([]string{"hi"})} {
				if r.code != want {
					t.Fatalf("while the limiter fails: %v %q, want %v", r.code, r.msg, want)
				}
			}
			store.fail.Store(false)
			if r := f.call(nil, say, "hi"); r.code != codes.OK {
				t.Fatalf("once the limiter answers: %v %q; the failed calls kept their slot", r.code, r.msg)
			}
		})
	}
}

// A computed cost the store refuses is INVALID_ARGUMENT with the reason
// once, not "invalid cost: invalid cost: …", alone or in a rule of several
// limits.
func TestInvalidCostMessage(t *testing.T) {
	t.Parallel()
	one := sluice.Limit{Name: "one", Quota: 1, Window: time.Hour}
	two := sluice.Limit{Name: "two", Quota: 1, Window: time.Hour}
	tiny := func(context.Context, string) float64 { return 1e-9 }
	f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{
		{Name: "both", Match: grpclimit.Match{Methods: []string{other}}, Quotas: []grpclimit.Quota{{Limit: two, Key: global}, {Limit: one, Key: global, CostFunc: tiny}}},
		{Name: "single", Quotas: []grpclimit.Quota{{Limit: one, Key: global, CostFunc: tiny}}},
	}})
	for method, want := range map[string]string{
		say:   `invalid cost: cost 1e-09 for limit "one": below the resolution of 0.000001`,
		other: `invalid cost: request 1: cost 1e-09 for limit "one": below the resolution of 0.000001`,
	} {
		if r := f.call(nil, method, "hi"); r.code != codes.InvalidArgument || r.msg != want {
			t.Errorf("%s: %v %q, want INVALID_ARGUMENT %q", method, r.code, r.msg, want)
		}
	}
}

// A limiter that took a concurrency slot and then refused a cost as
// invalid: the call, which does not run (INVALID_ARGUMENT), gives the slot
// back at once, as httplimit now does too.
func TestInvalidCallReleasesItsSlots(t *testing.T) {
	t.Parallel()
	slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
	hourly := sluice.Limit{Name: "hourly", Quota: 100, Window: time.Hour}
	store := spentThenFailed{err: errInvalid}
	f := newFixture(t, grpclimit.Options{Limiter: &store, Rules: []grpclimit.Rule{
		{Name: "r", Quotas: []grpclimit.Quota{{Limit: slots, Key: global}, {Limit: hourly, Key: global}}},
	}})
	store.counting = f.store
	store.fail.Store(true)
	for _, r := range []reply{f.call(nil, say, "hi"), f.stream([]string{"hi"})} {
		if r.code != codes.InvalidArgument {
			t.Fatalf("a cost the limiter refuses: %v %q, want INVALID_ARGUMENT", r.code, r.msg)
		}
	}
	store.fail.Store(false)
	if r := f.call(nil, say, "hi"); r.code != codes.OK {
		t.Fatalf("the next call: %v %q; the invalid calls kept their slot", r.code, r.msg)
	}
}

// A cost the limiter says can never fit (its error wraps
// sluice.ErrCostExceedsLimit) is a final rejection whatever the decision
// beside the error says: RESOURCE_EXHAUSTED without RetryInfo, the handler
// not run.
func TestCostExceedsLimitByError(t *testing.T) {
	t.Parallel()
	never := fmt.Errorf("%w: cost 3 for limit %q", sluice.ErrCostExceedsLimit, perKey.Name)
	for name, d := range map[string]sluice.Decision{"allowed": {Allowed: true, Remaining: 2}, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, grpclimit.Options{Limiter: failing{d: d, err: never}, Rules: []grpclimit.Rule{{Name: "r", Quotas: []grpclimit.Quota{{Limit: perKey, Key: global}}}}})
			r := f.call(nil, say, "hi")
			if r.code != codes.ResourceExhausted || r.msg != "rate limited: the cost exceeds the limit's capacity" || r.details != 0 || f.served.Load() != 0 {
				t.Fatalf("%v %q, %d details, %d served; want a final RESOURCE_EXHAUSTED", r.code, r.msg, r.details, f.served.Load())
			}
		})
	}
}
