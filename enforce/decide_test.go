package enforce_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
)

// newStore is a memstore on a clock that moves only when told.
func newStore(t testing.TB) (*memstore.Store, *limittest.Clock) {
	t.Helper()
	clock := limittest.NewClock(limittest.Epoch)
	ms, err := memstore.New(memstore.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	return ms, clock
}

func compile(t testing.TB, r enforce.Rule) *enforce.CompiledRule {
	t.Helper()
	c, err := enforce.Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var (
	two   = sluice.Limit{Name: "two", Quota: 2, Window: time.Minute}
	slots = sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
)

// A rule is refused for what no transport could enforce, saying which
// rule, which quota and why.
func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	ok := enforce.Quota{Limit: two, KeyPrefix: enforce.GlobalKey}
	nine := make([]enforce.Quota, 9)
	for i := range nine {
		nine[i] = enforce.Quota{Limit: sluice.Limit{Name: fmt.Sprint("l", i), Quota: 1, Window: time.Second}}
	}
	for _, c := range []struct {
		name string
		rule enforce.Rule
		want string
	}{
		{"no name", enforce.Rule{Quotas: []enforce.Quota{ok}}, `rule "": the name must be 1 to 64 bytes of printable ASCII`},
		{"no quotas", enforce.Rule{Name: "r"}, `rule "r": 0 quotas: a rule spends on 1 to 8 limits`},
		{"nine quotas", enforce.Rule{Name: "r", Quotas: nine}, `rule "r": 9 quotas`},
		{"bad mode", enforce.Rule{Name: "r", Mode: 7, Quotas: []enforce.Quota{ok}}, `rule "r": unknown mode 7`},
		{"bad OnError", enforce.Rule{Name: "r", OnError: 9, Quotas: []enforce.Quota{ok}}, `rule "r": unknown OnError 9`},
		{"fail_local", enforce.Rule{Name: "r", OnError: sluice.FailLocal, Quotas: []enforce.Quota{ok}},
			`rule "r": OnError fail_local: a middleware has no local fallback; use fail_open or fail_closed`},
		{"bad limit", enforce.Rule{Name: "r", Quotas: []enforce.Quota{ok, {Limit: sluice.Limit{Name: "x", Quota: -1, Window: time.Second}}}}, `rule "r", quota 1 (x): sluice: invalid limit`},
		{"bad cost", enforce.Rule{Name: "r", Quotas: []enforce.Quota{{Limit: two, Cost: 3}}}, `rule "r", quota 0 (two): cost 3 exceeds the limit's capacity 2`},
		{"limit twice", enforce.Rule{Name: "r", Quotas: []enforce.Quota{ok, ok}}, `rule "r": limit "two" is used twice`},
		{"the transport's check", enforce.Rule{Name: "r", Quotas: []enforce.Quota{ok, {Limit: slots}},
			CheckQuota: func(_ *enforce.CompiledRule, i int) (string, error) {
				if i == 1 {
					return "", errors.New("no key")
				}
				return enforce.GlobalKey, nil
			}}, `rule "r", quota 1 (slots): no key`},
		{"the transport's check, after the core's", enforce.Rule{Name: "r", Quotas: []enforce.Quota{ok, ok},
			CheckQuota: func(*enforce.CompiledRule, int) (string, error) { return "", errors.New("no key") }}, "used twice"},
	} {
		if _, err := enforce.Compile(c.rule); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// A compiled rule keeps its own quotas, formats its policies once, and
// answers for each quota's cost and charges.
func TestCompile(t *testing.T) {
	t.Parallel()
	quotas := []enforce.Quota{{Limit: two, KeyPrefix: enforce.IPPrefix}, {Limit: slots, KeyPrefix: enforce.GlobalKey}}
	c := compile(t, enforce.Rule{Name: "r", Quotas: quotas})
	quotas[0].Limit.Name = "changed"
	if c.Quotas[0].Limit.Name != "two" || c.Quotas[0].KeyPrefix != "ip:" {
		t.Errorf("the compiled rule shares its caller's quotas: %+v", c.Quotas)
	}
	checked := compile(t, enforce.Rule{Name: "r", Quotas: quotas[1:], CheckQuota: func(r *enforce.CompiledRule, i int) (string, error) {
		return enforce.HeaderPrefix("x-key"), r.CheckCost(i, 1)
	}})
	if checked.Quotas[0].KeyPrefix != "h:X-Key:" {
		t.Errorf("CheckQuota's prefix: %q", checked.Quotas[0].KeyPrefix)
	}
	if want := `"two";q=2;w=60, "slots";q=1;qu="concurrent-requests"`; c.PolicyField != want || len(c.Policies) != 2 {
		t.Errorf("policies %q, want %q", c.PolicyField, want)
	}
	if err := c.CheckCost(0, 1e-9); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("cost 1e-9: %v", err)
	}
	if err := c.CheckCost(1, 1.5); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("cost 1.5 of slots: %v", err)
	}
	if err := c.CheckCost(0, 2.5); err != nil {
		t.Errorf("cost 2.5: %v", err)
	}
	if c.Chargeable(0) != nil || c.Chargeable(1) == nil {
		t.Errorf("chargeable: %v, %v; want a token bucket yes, slots no", c.Chargeable(0), c.Chargeable(1))
	}
	err := (&c.Rule).QuotaError(1, errors.New("no key"))
	if err.Error() != `rule "r", quota 1 (slots): no key` {
		t.Errorf("QuotaError: %v", err)
	}
	ds := []sluice.Decision{{Allowed: true, Remaining: 1.5, ResetAfter: 1500 * time.Millisecond}, {RetryAfter: sluice.Never}}
	if got := string(c.AppendLimits([]byte("RateLimit: "), ds)); got != `RateLimit: "two";r=1;t=2, "slots";r=0` {
		t.Errorf("AppendLimits: %s", got)
	}
	if ls := c.Limits(ds); len(ls) != 2 || ls[0].Name != "two" || ls[0].Remaining != 1 || ls[0].Reset != 2*time.Second || ls[1].Reset >= 0 {
		t.Errorf("Limits: %+v", ls)
	}
}

// answer is a Limiter whose every call answers its result: a store's
// failure, or a decision only its error qualifies.
type answer func() (sluice.Decision, error)

func (a answer) Allow(context.Context, string, sluice.Limit, float64) (sluice.Decision, error) {
	return a()
}

func (a answer) AllowAll(_ context.Context, _ []sluice.Request, _ sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	d, err := a()
	for i := range each {
		each[i] = d
	}
	return d, err
}

func (a answer) Release(context.Context, string, sluice.Limit, uint64) error { return nil }

var errGarbage = errors.New("store: unexpected reply")

// Every answer of a limiter, classified: the outcome, whether the request
// runs, and whether the cost can never fit.
func TestDecideClassifies(t *testing.T) {
	t.Parallel()
	never := fmt.Errorf("%w: cost 3", sluice.ErrCostExceedsLimit)
	invalid := fmt.Errorf("%w: cost 1e-09", sluice.ErrInvalidCost)
	allowed := sluice.Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second}
	rejected := sluice.Decision{RetryAfter: 20 * time.Second, ResetAfter: time.Minute}
	for _, c := range []struct {
		name    string
		rule    enforce.Rule
		d       sluice.Decision
		err     error
		outcome enforce.Outcome
		serve   bool
		never   bool
	}{
		{"allowed", enforce.Rule{}, allowed, nil, enforce.Allowed, true, false},
		{"rejected", enforce.Rule{}, rejected, nil, enforce.Rejected, false, false},
		{"rejected in shadow", enforce.Rule{Shadow: true}, rejected, nil, enforce.ShadowRejected, true, false},
		{"never", enforce.Rule{}, sluice.Decision{RetryAfter: sluice.Never}, never, enforce.Rejected, false, true},
		{"never by the decision alone", enforce.Rule{}, sluice.Decision{RetryAfter: sluice.Never}, nil, enforce.Rejected, false, true},
		{"never by the error alone", enforce.Rule{}, allowed, never, enforce.Rejected, false, true},
		{"never in shadow", enforce.Rule{Shadow: true}, allowed, never, enforce.ShadowRejected, true, true},
		{"invalid", enforce.Rule{}, sluice.Decision{}, invalid, enforce.Invalid, false, false},
		{"failed open", enforce.Rule{}, sluice.Decision{}, errGarbage, enforce.Failed, true, false},
		{"failed closed", enforce.Rule{OnError: sluice.FailClosed}, sluice.Decision{}, errGarbage, enforce.Failed, false, false},
		{"failed in shadow", enforce.Rule{Shadow: true, OnError: sluice.FailClosed}, sluice.Decision{}, errGarbage, enforce.Failed, false, false},
	} {
		for _, n := range []int{1, 3} {
			r := c.rule
			r.Name = "r"
			for i := range n {
				r.Quotas = append(r.Quotas, enforce.Quota{Limit: sluice.Limit{Name: fmt.Sprint("l", i), Quota: 2, Window: time.Minute}})
			}
			limiter := answer(func() (sluice.Decision, error) { return c.d, c.err })
			v := decide(compile(t, r), context.Background(), limiter, &enforce.Request{})
			if v.Outcome != c.outcome || v.Serve != c.serve || v.Never != c.never || v.Held || !errors.Is(v.Err, c.err) || len(v.Decisions()) != n {
				t.Errorf("%s, %d quotas: %v serve %v never %v held %v err %v, %d decisions; want %v serve %v never %v",
					c.name, n, v.Outcome, v.Serve, v.Never, v.Held, v.Err, len(v.Decisions()), c.outcome, c.serve, c.never)
			}
			if decided := c.err == nil || c.never; decided != (*v.Combined() != sluice.Decision{}) {
				t.Errorf("%s, %d quotas: combined %+v", c.name, n, *v.Combined())
			}
		}
	}
}

// Decisions on a real store: what one rule of one quota and one of two
// spend, the combined decision, and the slots a request holds — released
// at once when it does not run, by Release when it has.
func TestDecideOnAStore(t *testing.T) {
	t.Parallel()
	ms, clock := newStore(t)
	ctx := context.Background()
	one := compile(t, enforce.Rule{Name: "one", Quotas: []enforce.Quota{{Limit: two}}})
	req := enforce.Request{Keys: [enforce.MaxQuotas]string{"k"}, Costs: [enforce.MaxQuotas]float64{1}}
	for i, want := range []enforce.Outcome{enforce.Allowed, enforce.Allowed, enforce.Rejected} {
		if v := decide(one, ctx, ms, &req); v.Outcome != want || v.Combined().Limit.Name != "two" {
			t.Fatalf("request %d: %v %+v, want %v", i, v.Outcome, *v.Combined(), want)
		}
	}
	clock.Add(30 * time.Second)

	both := compile(t, enforce.Rule{Name: "both", Quotas: []enforce.Quota{{Limit: slots}, {Limit: two}}})
	req = enforce.Request{Keys: [enforce.MaxQuotas]string{"s", "k"}, Costs: [enforce.MaxQuotas]float64{1, 1}}
	v := decide(both, ctx, ms, &req) // two has one token again
	if v.Outcome != enforce.Allowed || !v.Serve || !v.Held || v.Decisions()[0].Ticket == 0 {
		t.Fatalf("first: %+v", v)
	}
	if w := decide(both, ctx, ms, &req); w.Outcome != enforce.Rejected || w.Held {
		t.Fatalf("while the slot is held: %+v", w)
	}
	both.Release(ctx, ms, &req, v.Decisions())
	clock.Add(30 * time.Second)
	if w := decide(both, ctx, ms, &req); w.Outcome != enforce.Allowed {
		t.Fatalf("after Release: %+v", w)
	}
}

// rejectedHolding is a real store whose multi-limit calls, while reject
// is set, decide for real (a slot is taken) and then report the request
// rejected, as a Limiter may (the contract does not promise a rejection
// holds nothing).
type rejectedHolding struct {
	*memstore.Store
	reject bool
}

func (s *rejectedHolding) AllowAll(ctx context.Context, reqs []sluice.Request, mode sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	d, err := s.Store.AllowAll(ctx, reqs, mode, each)
	if s.reject {
		each[1].Allowed, each[1].RetryAfter = false, time.Second
	}
	return d, err
}

// A request that does not run gives back the slots its decisions took
// before Decide returns.
func TestDecideReleasesWhatDoesNotRun(t *testing.T) {
	t.Parallel()
	ms, _ := newStore(t)
	store := &rejectedHolding{Store: ms, reject: true}
	ctx := context.Background()
	rule := compile(t, enforce.Rule{Name: "r", Quotas: []enforce.Quota{{Limit: slots}, {Limit: sluice.Limit{Name: "many", Quota: 100, Window: time.Hour}}}})
	req := enforce.Request{Keys: [enforce.MaxQuotas]string{"s", "k"}, Costs: [enforce.MaxQuotas]float64{1, 1}}
	if v := decide(rule, ctx, store, &req); v.Outcome != enforce.Rejected || v.Decisions()[0].Ticket == 0 {
		t.Fatalf("%+v, want a rejection that took a slot", v)
	}
	store.reject = false
	if v := decide(rule, ctx, store, &req); v.Outcome != enforce.Allowed {
		t.Fatalf("next: %v; the rejected request kept its slot", v.Outcome)
	}
}

// The decision of a rule of one quota allocates nothing.
func TestDecideDoesNotAllocate(t *testing.T) {
	ms, _ := newStore(t)
	rule := compile(t, enforce.Rule{Name: "r", Quotas: []enforce.Quota{{Limit: sluice.Limit{Name: "big", Quota: 1e9, Window: time.Second}}}})
	ctx := context.Background()
	req := enforce.Request{Keys: [enforce.MaxQuotas]string{enforce.GlobalKey}, Costs: [enforce.MaxQuotas]float64{1}}
	if n := testing.AllocsPerRun(100, func() {
		if v := decide(rule, ctx, ms, &req); v.Outcome != enforce.Allowed {
			t.Fatal(v.Outcome)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per decision", n)
	}
}

func TestHeaderPrefix(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"x-api-key", "X-API-KEY", "X-Api-Key"} {
		if got := enforce.HeaderPrefix(name); got != "h:X-Api-Key:" {
			t.Errorf("HeaderPrefix(%q) = %q", name, got)
		}
	}
}

// decide is Decide with the Verdict returned.
func decide(r *enforce.CompiledRule, ctx context.Context, l sluice.Limiter, req *enforce.Request) *enforce.Verdict {
	var v enforce.Verdict
	r.Decide(ctx, l, req, &v)
	return &v
}
