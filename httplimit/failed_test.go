package httplimit_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/httplimit"
)

// spentThenFailed is a real memstore whose multi-limit calls, while fail
// is set, decide for real (a concurrency slot is taken) and then report an
// error, as a store does whose reply fails its checks after the spend —
// fault injection after the real decision, not a mock of one.
type spentThenFailed struct {
	*counting
	fail atomic.Bool
}

func (s *spentThenFailed) AllowAll(ctx context.Context, reqs []sluice.Request, mode sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	d, err := s.counting.AllowAll(ctx, reqs, mode, each)
	if err == nil && s.fail.Load() {
		err = errGarbage
	}
	return d, err
}

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
		policy enforce.OnError
		status int
	}{{enforce.FailClosed, http.StatusServiceUnavailable}, {enforce.FailOpen, http.StatusOK}} {
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
