package rls_test

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// table is a Matcher from a fixed table: domain → first entry "key=value"
// (or "key" for any value) → rule. The configuration format has its own
// package and tests (rls/envoyconfig); this one tests the service.
type table map[string]map[string]*rls.Rule

func (t table) Match(domain string, es []rls.Entry) (*rls.Rule, bool) {
	d, ok := t[domain]
	if !ok || len(es) == 0 {
		return nil, false
	}
	if r, ok := d[es[0].Key+"="+es[0].Value]; ok {
		return r, true
	}
	r, ok := d[es[0].Key]
	return r, ok
}

func (t table) Override(domain string, es []rls.Entry, n uint32, unit rlpb.RateLimitResponse_RateLimit_Unit) (*rls.Rule, bool) {
	if _, ok := t[domain]; !ok {
		return nil, false
	}
	w := map[rlpb.RateLimitResponse_RateLimit_Unit]time.Duration{rlpb.RateLimitResponse_RateLimit_SECOND: time.Second, rlpb.RateLimitResponse_RateLimit_MINUTE: time.Minute}[unit]
	return &rls.Rule{RequestsPerUnit: n, Unit: unit, Limit: sluice.Limit{Name: domain + ".override." + es[0].Key, Algorithm: sluice.FixedWindow, Quota: float64(n), Window: w}}, true
}

func perMinute(name string, n uint32) *rls.Rule {
	return &rls.Rule{Name: name, RequestsPerUnit: n, Unit: rlpb.RateLimitResponse_RateLimit_MINUTE,
		Limit: sluice.Limit{Name: "edge." + name, Algorithm: sluice.FixedWindow, Quota: float64(n), Window: time.Minute}}
}

var rules = table{"edge": {
	"api_key":         perMinute("per_key", 3),
	"path=/slow":      perMinute("slow", 1),
	"path":            perMinute("per_path", 100),
	"ip":              {Name: "per_ip", RequestsPerUnit: 2, Unit: rlpb.RateLimitResponse_RateLimit_MINUTE, ShadowMode: true, Limit: perMinute("per_ip", 2).Limit},
	"internal":        {Unlimited: true},
	"tenant=gold":     {Name: "gold", RequestsPerUnit: 10, Unit: rlpb.RateLimitResponse_RateLimit_MINUTE, Replaces: []string{"per_tenant"}, Limit: perMinute("gold", 10).Limit},
	"tenant":          perMinute("per_tenant", 1),
	"tokens=whatever": perMinute("tokens", 5),
}}

type fixture struct {
	client rlpb.RateLimitServiceClient
	clock  *limittest.Clock
	obs    *recorder
}

type recorder struct {
	events atomic.Pointer[[]enforce.Event]
}

func (r *recorder) Observe(e enforce.Event) {
	for {
		old := r.events.Load()
		var next []enforce.Event
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, e)
		if r.events.CompareAndSwap(old, &next) {
			return
		}
	}
}

func newFixture(t *testing.T, limiter sluice.Limiter, headers bool) *fixture {
	t.Helper()
	return newFixtureOf(t, limiter, headers, rules)
}

// newFixtureOf is newFixture with the configuration matcher.
func newFixtureOf(t *testing.T, limiter sluice.Limiter, headers bool, matcher rls.Matcher) *fixture {
	t.Helper()
	f := &fixture{clock: limittest.NewClock(limittest.Epoch), obs: &recorder{}}
	if limiter == nil {
		ms, err := memstore.New(memstore.Options{Now: f.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ms.Close() })
		limiter = ms
	}
	var m atomic.Pointer[rls.Matcher]
	m.Store(&matcher)
	svc, err := rls.New(rls.Options{Limiter: limiter, Config: &m, Observer: f.obs, Headers: headers, MaxDescriptors: 8})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc.Register(srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop(); <-done })
	f.client = rlpb.NewRateLimitServiceClient(conn)
	return f
}

func desc(kv ...string) *commonrl.RateLimitDescriptor {
	d := &commonrl.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (f *fixture) ask(t *testing.T, hits uint32, ds ...*commonrl.RateLimitDescriptor) *rlpb.RateLimitResponse {
	t.Helper()
	resp, err := f.client.ShouldRateLimit(context.Background(), &rlpb.RateLimitRequest{Domain: "edge", Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A descriptor over its limit: OVER_LIMIT for it and overall, with the
// limit, what remains and when the window ends.
func TestOverLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	f.clock.Add(10 * time.Second) // 10 s into the minute
	for i, want := range []struct {
		code      rlpb.RateLimitResponse_Code
		remaining uint32
		reset     time.Duration
	}{
		{rlpb.RateLimitResponse_OK, 2, 50 * time.Second},
		{rlpb.RateLimitResponse_OK, 1, 50 * time.Second},
		{rlpb.RateLimitResponse_OK, 0, 50 * time.Second},
		{rlpb.RateLimitResponse_OVER_LIMIT, 0, 50 * time.Second},
	} {
		resp := f.ask(t, 0, desc("api_key", "k1"))
		st := resp.Statuses[0]
		if resp.OverallCode != want.code || st.Code != want.code || st.LimitRemaining != want.remaining || st.DurationUntilReset.AsDuration() != want.reset ||
			st.CurrentLimit.GetName() != "per_key" || st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlpb.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
	// Another value of the same value-less key has its own counter.
	if resp := f.ask(t, 0, desc("api_key", "k2")); resp.OverallCode != rlpb.RateLimitResponse_OK {
		t.Fatalf("another key: %v", resp)
	}
	f.clock.Add(50 * time.Second) // the next minute
	if resp := f.ask(t, 0, desc("api_key", "k1")); resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("next window: %v", resp)
	}
}

// hits_addend: the request's, overridden by a descriptor's own.
func TestHitsAddend(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	d := desc("api_key", "k")
	if resp := f.ask(t, 2, d); resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits_addend 2 of 3: %v", resp)
	}
	d2 := desc("api_key", "j")
	d2.HitsAddend = wrapperspb.UInt64(3)
	if resp := f.ask(t, 1, d2); resp.Statuses[0].LimitRemaining != 0 || resp.OverallCode != rlpb.RateLimitResponse_OK {
		t.Fatalf("descriptor hits_addend 3 of 3: %v", resp)
	}
	if resp := f.ask(t, 2, d); resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("2 more of 1 left: %v", resp)
	}
	if resp := f.ask(t, 1, d); resp.OverallCode != rlpb.RateLimitResponse_OK {
		t.Fatalf("a rejection spent its hits: %v", resp)
	}
	// A descriptor's hits_addend of 0 checks without spending.
	check := desc("api_key", "k")
	check.HitsAddend = wrapperspb.UInt64(0)
	for range 3 {
		if resp := f.ask(t, 5, check); resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 || resp.Statuses[0].CurrentLimit == nil {
			t.Fatalf("hits_addend 0 on an exhausted key: %v", resp)
		}
	}
	fresh := desc("api_key", "never-spent")
	fresh.HitsAddend = wrapperspb.UInt64(0)
	if resp := f.ask(t, 1, fresh); resp.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("hits_addend 0 on a fresh key: %v", resp)
	}
	if resp := f.ask(t, 1, desc("api_key", "never-spent")); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the checks spent: %v", resp)
	}
}

// Several descriptors: each its own status, independent (one over its
// limit does not stop the others from spending), overall OVER_LIMIT when
// any is; no match is OK without a limit; unlimited is OK with 2^32−1;
// shadow mode is OK even over the limit.
func TestDescriptors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	f.ask(t, 0, desc("path", "/slow"))
	resp := f.ask(t, 0, desc("path", "/slow"), desc("path", "/fast"), desc("nothing", "x"), desc("internal", "y"))
	codes := []rlpb.RateLimitResponse_Code{rlpb.RateLimitResponse_OVER_LIMIT, rlpb.RateLimitResponse_OK, rlpb.RateLimitResponse_OK, rlpb.RateLimitResponse_OK}
	for i, st := range resp.Statuses {
		if st.Code != codes[i] {
			t.Errorf("descriptor %d: %v, want %v", i, st.Code, codes[i])
		}
	}
	if resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].LimitRemaining != 99 || resp.Statuses[2].CurrentLimit != nil ||
		resp.Statuses[3].LimitRemaining != math.MaxUint32 || resp.Statuses[3].CurrentLimit != nil {
		t.Fatalf("%v", resp)
	}
	for i := range 4 {
		resp := f.ask(t, 0, desc("ip", "10.0.0.1"))
		if resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[0].Code != rlpb.RateLimitResponse_OK {
			t.Fatalf("shadow call %d: %v", i, resp)
		}
	}
	var shadow int
	for _, e := range *f.obs.events.Load() {
		if e.Outcome == enforce.ShadowRejected {
			shadow++
		}
	}
	if shadow != 2 {
		t.Fatalf("%d shadow rejections observed, want 2", shadow)
	}
}

// A matched limit named in another matched limit's replaces is not
// applied; the same descriptor twice spends twice on one counter.
func TestReplacesAndRepeats(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	for range 3 {
		resp := f.ask(t, 0, desc("tenant", "gold"), desc("tenant", "acme"))
		if resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[1].CurrentLimit != nil {
			t.Fatalf("per_tenant (1 a minute) replaced by gold: %v", resp)
		}
	}
	if resp := f.ask(t, 0, desc("tenant", "acme")); resp.OverallCode != rlpb.RateLimitResponse_OK {
		t.Fatalf("alone, per_tenant applies, untouched: %v", resp)
	}
	if resp := f.ask(t, 0, desc("tenant", "acme")); resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("alone, per_tenant applies: %v", resp)
	}
	resp := f.ask(t, 0, desc("api_key", "twice"), desc("api_key", "twice"))
	if resp.Statuses[0].LimitRemaining != 1 || resp.Statuses[1].LimitRemaining != 1 {
		t.Fatalf("the same descriptor twice: %v", resp)
	}
}

// Envoy's per-descriptor limit override replaces the configured limit.
func TestLimitOverride(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	d := desc("api_key", "o")
	d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
	if resp := f.ask(t, 0, d); resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("%v", resp)
	}
	if resp := f.ask(t, 0, d); resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("%v", resp)
	}
}

// Unknown domain: OK, no limits (as envoyproxy/ratelimit answers).
func TestUnknownDomain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	resp, err := f.client.ShouldRateLimit(context.Background(), &rlpb.RateLimitRequest{Domain: "nope", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "k")}})
	if err != nil || resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("%v %v", resp, err)
	}
}

// The RateLimit fields, for Envoy to add to the client's response.
func TestResponseHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, true)
	f.clock.Add(15 * time.Second)
	resp := f.ask(t, 0, desc("api_key", "h"), desc("internal", "x"), desc("ip", "10.0.0.9")) // ip: shadow mode, no fields
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Policy"] != `"edge.per_key";q=3;w=60` || got["RateLimit"] != `"edge.per_key";r=2;t=45` || len(got) != 2 {
		t.Fatalf("%v", got)
	}
}

// Malformed requests are INVALID_ARGUMENT, at once.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, false)
	many := make([]*commonrl.RateLimitDescriptor, 9)
	for i := range many {
		many[i] = desc("api_key", "m")
	}
	negative := desc("api_key", "n")
	negative.IsNegativeHits = true
	for _, c := range []struct {
		name string
		req  *rlpb.RateLimitRequest
		want string
	}{
		{"no domain", &rlpb.RateLimitRequest{Descriptors: []*commonrl.RateLimitDescriptor{desc("a", "b")}}, "domain must not be empty"},
		{"no descriptors", &rlpb.RateLimitRequest{Domain: "edge"}, "descriptor list must not be empty"},
		{"too many", &rlpb.RateLimitRequest{Domain: "edge", Descriptors: many}, "9 descriptors: at most 8"},
		{"no entries", &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{}}}, "0 entries"},
		{"empty key", &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("", "v")}}, "entry key must be 1 to"},
		{"long value", &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("k", strings.Repeat("v", 1025))}}, "a value at most 1024"},
		{"negative hits", &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{negative}}, "is_negative_hits is not supported"},
	} {
		_, err := f.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT saying %q", c.name, err, c.want)
		}
	}
}

// failing is a Limiter whose every call fails: a store answering garbage.
type failing struct{ sluice.Limiter }

var errGarbage = errors.New("garbage reply")

func (failing) Allow(context.Context, string, sluice.Limit, float64) (sluice.Decision, error) {
	return sluice.Decision{}, errGarbage
}

// A limiter that fails is UNAVAILABLE: Envoy's failure_mode_deny decides.
func TestLimiterFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, failing{}, false)
	_, err := f.client.ShouldRateLimit(context.Background(), &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "k")}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "garbage reply") {
		t.Fatalf("%v", err)
	}
}

// envoyMatcher is the Matcher of a configuration in envoyproxy/ratelimit's
// format.
func envoyMatcher(t *testing.T, yaml string) rls.Matcher {
	t.Helper()
	d, err := envoyconfig.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := envoyconfig.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return rls.FromEnvoyConfig(c)
}

// A cost no store can represent (above about 4.5e9 — more than any limit's
// capacity) can never fit: its descriptor is OVER_LIMIT, as any cost above
// the capacity is, and the request's other descriptors are decided as
// usual. It does not fail the request (with Envoy's failure_mode_deny
// false, a failed request is let through with every limit skipped).
func TestCostBeyondAnyCapacity(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, true)
	// The same descriptor twice is decided once for the sum of its hits:
	// 2 × (2^32−1), beyond what a store represents.
	resp := f.ask(t, math.MaxUint32, desc("api_key", "dup1"), desc("api_key", "dup1"))
	for i, st := range resp.Statuses {
		if st.Code != rlpb.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetName() != "per_key" || st.LimitRemaining != 0 {
			t.Errorf("duplicated descriptor %d, hits 2^32-1: %v", i, st)
		}
	}
	if resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("duplicated descriptors, hits 2^32-1: %v", resp)
	}
	// A descriptor's own hits_addend of 5e9 next to another descriptor:
	// the other one is decided, and spends.
	huge := desc("api_key", "huge")
	huge.HitsAddend = wrapperspb.UInt64(5e9)
	resp = f.ask(t, 0, huge, desc("tenant", "acme"))
	if resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlpb.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[1].Code != rlpb.RateLimitResponse_OK || resp.Statuses[1].CurrentLimit.GetName() != "per_tenant" || resp.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("hits_addend 5e9 beside a tenant: %v", resp)
	}
	if resp := f.ask(t, 0, desc("tenant", "acme")); resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the tenant beside the huge cost did not spend: %v", resp)
	}
	// The largest hits_addend there is, alone (one limiter call).
	huge.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	resp = f.ask(t, 0, huge)
	if resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits_addend 2^64-1: %v", resp)
	}
	var fields []string
	for _, h := range resp.ResponseHeadersToAdd {
		fields = append(fields, h.Key+": "+h.Value)
	}
	if strings.Join(fields, "\n") != "RateLimit-Policy: \"edge.per_key\";q=3;w=60\nRateLimit: \"edge.per_key\";r=0" {
		t.Fatalf("fields of a cost that never fits (no t=): %q", fields)
	}
	// The refused descriptors spent nothing.
	for _, k := range []string{"dup1", "huge"} {
		if resp := f.ask(t, 0, desc("api_key", k)); resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("api_key %s after its refused costs: %v", k, resp)
		}
	}
	var rejected int
	for _, e := range *f.obs.events.Load() {
		if e.Rule == "edge.per_key" && e.Outcome == enforce.Rejected {
			rejected++
		}
	}
	if rejected != 4 {
		t.Fatalf("%d rejections of edge.per_key observed, want 4", rejected)
	}
}

// A cost that can never fit is refused whatever the store could say, so
// under every failure policy: the limiter is not asked about it.
func TestCostBeyondAnyCapacityStoreDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, failing{}, false)
	huge := desc("api_key", "k")
	huge.HitsAddend = wrapperspb.UInt64(1 << 40)
	resp, err := f.client.ShouldRateLimit(context.Background(), &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{huge}})
	if err != nil || resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a cost beyond any capacity, the store failing: %v, %v", resp, err)
	}
	// Beside a descriptor the store must decide, the store's failure is
	// the answer (UNAVAILABLE: Envoy's failure_mode_deny decides).
	_, err = f.client.ShouldRateLimit(context.Background(), &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{huge, desc("tenant", "t")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("beside a descriptor the failing store decides: %v", err)
	}
}

// A limit override Envoy would never send — no unit, UNKNOWN, a number
// that is no unit — is the client's bug: INVALID_ARGUMENT saying which
// descriptor and why, before anything is spent. It never disables the
// configured limit (it used to answer OK with no limit, uncounted).
func TestBadLimitOverride(t *testing.T) {
	t.Parallel()
	f := newFixtureOf(t, nil, false, envoyMatcher(t, "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"))
	for _, c := range []struct {
		name string
		o    *commonrl.RateLimitDescriptor_RateLimitOverride
		want string
	}{
		{"no unit", &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}, "unit UNKNOWN"},
		{"UNKNOWN", &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_UNKNOWN}, "unit UNKNOWN"},
		{"99", &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 99}, "unit 99"},
	} {
		bad := desc("api_key", "o")
		bad.Limit = c.o
		for range 5 {
			_, err := f.client.ShouldRateLimit(context.Background(), &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{desc("api_key", "other"), bad}})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptor 1: a limit override needs a unit of time") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("override with %s: %v; want INVALID_ARGUMENT naming descriptor 1 and %q", c.name, err, c.want)
			}
		}
	}
	// Nothing was spent on the request's good descriptor.
	if resp := f.ask(t, 0, desc("api_key", "other")); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the refused requests spent: %v", resp)
	}
	// A valid override still replaces the configured limit.
	good := desc("api_key", "o")
	good.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	if resp := f.ask(t, 0, good); resp.OverallCode != rlpb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetUnit() != rlpb.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("a valid override: %v", resp)
	}
	if resp := f.ask(t, 0, good); resp.OverallCode != rlpb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a valid override, twice: %v", resp)
	}
}

// A limit named by several descriptors is written once, about its
// tightest decision: the fields are formatted by ratelimitheader, which
// refuses a name twice.
func TestResponseHeadersOncePerLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, true)
	f.ask(t, 0, desc("api_key", "busy"), desc("api_key", "busy"))
	resp := f.ask(t, 0, desc("api_key", "idle"), desc("api_key", "busy"))
	got := map[string][]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = append(got[h.Key], h.Value)
	}
	if p := got["RateLimit-Policy"]; len(p) != 1 || p[0] != `"edge.per_key";q=3;w=60` {
		t.Fatalf("RateLimit-Policy %q", p)
	}
	if l := got["RateLimit"]; len(l) != 1 || !strings.HasPrefix(l[0], `"edge.per_key";r=0;t=`) {
		t.Fatalf("RateLimit %q, want the busy key's r=0", l)
	}
}
