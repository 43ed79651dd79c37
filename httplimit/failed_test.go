package httplimit_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
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

// A limiter that failed after it took a concurrency slot: the request that
// does not run (fail_closed) gives it back at once, and the request that
// runs (fail_open) gives it back when its handler returns. Before, the
// fail_open one kept it until the limit's window ended, and the next
// request was refused.
func TestFailedRequestReleasesItsSlots(t *testing.T) {
	t.Parallel()
	slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
	hourly := sluice.Limit{Name: "hourly", Quota: 100, Window: time.Hour}
	global := httplimit.Key{Kind: httplimit.Global}
	for _, c := range []struct {
		policy sluice.FailurePolicy
		status int
	}{{sluice.FailClosed, http.StatusServiceUnavailable}, {sluice.FailOpen, http.StatusOK}} {
		t.Run(c.policy.String(), func(t *testing.T) {
			t.Parallel()
			var store spentThenFailed
			f := newFixture(t, httplimit.Options{Limiter: &store, Rules: []httplimit.Rule{
				{Name: "r", OnError: c.policy, Quotas: []httplimit.Quota{{Limit: slots, Key: global}, {Limit: hourly, Key: global}}},
			}}, nil)
			store.counting = f.store
			store.fail.Store(true)
			if r := f.do("GET", "/", peer); r.StatusCode != c.status {
				t.Fatalf("while the limiter fails: %d, want %d", r.StatusCode, c.status)
			}
			store.fail.Store(false)
			if r := f.do("GET", "/", peer); r.StatusCode != http.StatusOK {
				t.Fatalf("once the limiter answers: %d; the failed request kept its slot", r.StatusCode)
			}
		})
	}
}

// A limiter that took a concurrency slot and then refused a cost as
// invalid: the request, which does not run (400), gives the slot back at
// once. Before, httplimit kept it until the limit's window ended (grpclimit
// gave it back), and the next request was refused.
func TestInvalidRequestReleasesItsSlots(t *testing.T) {
	t.Parallel()
	slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
	hourly := sluice.Limit{Name: "hourly", Quota: 100, Window: time.Hour}
	global := httplimit.Key{Kind: httplimit.Global}
	store := spentThenFailed{err: errInvalid}
	f := newFixture(t, httplimit.Options{Limiter: &store, Rules: []httplimit.Rule{
		{Name: "r", Quotas: []httplimit.Quota{{Limit: slots, Key: global}, {Limit: hourly, Key: global}}},
	}}, nil)
	store.counting = f.store
	store.fail.Store(true)
	if r := f.do("GET", "/", peer); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("a cost the limiter refuses: %d, want 400", r.StatusCode)
	}
	store.fail.Store(false)
	if r := f.do("GET", "/", peer); r.StatusCode != http.StatusOK {
		t.Fatalf("the next request: %d; the invalid request kept its slot", r.StatusCode)
	}
}

// A cost the limiter says can never fit (its error wraps
// sluice.ErrCostExceedsLimit) is a final rejection whatever the decision
// beside the error says: 429, no Retry-After, not retryable. Before,
// httplimit read only the decision: an allowed one let the request
// through, a zero one told the client to retry in a second.
func TestCostExceedsLimitByError(t *testing.T) {
	t.Parallel()
	never := fmt.Errorf("%w: cost 3 for limit %q", sluice.ErrCostExceedsLimit, perIP.Name)
	for name, d := range map[string]sluice.Decision{"allowed": {Allowed: true, Remaining: 2}, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, httplimit.Options{Limiter: failing{d: d, err: never}, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP}}}}}, nil)
			r := f.do("GET", "/", peer)
			if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "" || body(t, r) != `{"error":"rate_limited","retryable":false}` || f.served.Load() != 0 {
				t.Fatalf("%d, Retry-After %q, %d served; want a final 429", r.StatusCode, r.Header.Get("Retry-After"), f.served.Load())
			}
		})
	}
}
