package grpclimit_test

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/ratelimitheader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The test services, registered by hand (no generated code): test.Echo
// with unary Say, Other and Free and the bidirectional stream Chat, and
// test.Admin with unary Ping. Every method echoes its StringValue; the
// value "block" makes the handler wait until the test releases it.
const (
	say   = "/test.Echo/Say"
	other = "/test.Echo/Other"
	free  = "/test.Echo/Free"
	chat  = "/test.Echo/Chat"
	ping  = "/test.Admin/Ping"
)

var chatDesc = grpc.StreamDesc{StreamName: "Chat", Handler: chatHandler, ServerStreams: true, ClientStreams: true}

var echoService = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Say", Handler: unaryHandler(say)},
		{MethodName: "Other", Handler: unaryHandler(other)},
		{MethodName: "Free", Handler: unaryHandler(free)},
	},
	Streams: []grpc.StreamDesc{chatDesc},
}

var adminService = grpc.ServiceDesc{
	ServiceName: "test.Admin",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Ping", Handler: unaryHandler(ping)}},
}

func unaryHandler(method string) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return srv.(*fixture).serve(ctx, req.(*wrapperspb.StringValue)), nil
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

func chatHandler(srv any, ss grpc.ServerStream) error {
	for {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := ss.SendMsg(srv.(*fixture).serve(ss.Context(), in)); err != nil {
			return err
		}
	}
}

// fixture is a real gRPC server on 127.0.0.1:0 whose calls go through an
// Interceptor over a memstore on a fake clock, and a client of it.
type fixture struct {
	t       *testing.T
	clock   *limittest.Clock
	store   *counting
	addr    string
	conn    *grpc.ClientConn // from 127.0.0.1
	served  atomic.Int64
	entered chan struct{} // a "block" call has started
	release chan struct{} // lets a "block" call finish
}

// counting is a real store that counts the calls made to it.
type counting struct {
	*memstore.Store
	calls atomic.Int64
}

func (c *counting) Allow(ctx context.Context, key string, l sluice.Limit, cost float64) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.Store.Allow(ctx, key, l, cost)
}

func (c *counting) AllowAll(ctx context.Context, reqs []sluice.Request, mode sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.Store.AllowAll(ctx, reqs, mode, each)
}

func newFixture(t *testing.T, opts grpclimit.Options, setup ...func(*grpclimit.Interceptor)) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: limittest.NewClock(limittest.Epoch), entered: make(chan struct{}), release: make(chan struct{})}
	ms, err := memstore.New(memstore.Options{Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	f.store = &counting{Store: ms}
	if opts.Limiter == nil {
		opts.Limiter = f.store
	}
	in, err := grpclimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(in)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	srv.RegisterService(&echoService, f)
	srv.RegisterService(&adminService, f)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	f.addr = lis.Addr().String()
	f.conn = f.dial("127.0.0.1")
	return f
}

// dial connects to the server from the local address ip (any address of
// 127.0.0.0/8 is the loopback interface's).
func (f *fixture) dial(ip string) *grpc.ClientConn {
	f.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient("passthrough:///"+f.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return conn
}

func (f *fixture) serve(ctx context.Context, in *wrapperspb.StringValue) *wrapperspb.StringValue {
	f.served.Add(1)
	if in.GetValue() == "block" {
		f.entered <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
		}
	}
	return in
}

// reply is what the client saw of a call.
type reply struct {
	code    codes.Code
	msg     string
	retry   time.Duration // RetryInfo's delay; -1 when there is none
	details int           // how many details the status has
	header  metadata.MD
}

// policy is the name of the first limit in the reply's ratelimit-policy,
// "" when it has none.
func (r reply) policy() string {
	ps, _ := ratelimitheader.ParsePolicies(r.header["ratelimit-policy"])
	if len(ps) == 0 {
		return ""
	}
	return ps[0].Name
}

func (r reply) ratelimit() string { return strings.Join(r.header["ratelimit"], ", ") }

func replyOf(t *testing.T, err error, header metadata.MD) reply {
	t.Helper()
	st := status.Convert(err)
	r := reply{code: st.Code(), msg: st.Message(), retry: -1, details: len(st.Details()), header: header}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			r.retry = ri.GetRetryDelay().AsDuration()
		}
	}
	return r
}

func outgoing(md []string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	return metadata.AppendToOutgoingContext(ctx, md...), cancel
}

// call makes a unary call of method on conn (nil: from 127.0.0.1) with
// the value and the metadata pairs md.
func (f *fixture) call(conn *grpc.ClientConn, method, value string, md ...string) reply {
	f.t.Helper()
	if conn == nil {
		conn = f.conn
	}
	ctx, cancel := outgoing(md)
	defer cancel()
	var header metadata.MD
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, method, wrapperspb.String(value), out, grpc.Header(&header))
	if err == nil && out.GetValue() != value {
		f.t.Fatalf("%s answered %q, want the echo %q", method, out.GetValue(), value)
	}
	return replyOf(f.t, err, header)
}

// stream opens a Chat stream with the metadata pairs md, sends the values
// and reads their echoes.
func (f *fixture) stream(values []string, md ...string) reply {
	f.t.Helper()
	ctx, cancel := outgoing(md)
	defer cancel()
	cs, err := f.conn.NewStream(ctx, &chatDesc, chat)
	if err != nil {
		return replyOf(f.t, err, nil)
	}
	// The header is read last: a server sends it with its first message
	// or its status, not before.
	end := func(err error) reply {
		header, _ := cs.Header()
		return replyOf(f.t, err, header)
	}
	for _, v := range values {
		if err := cs.SendMsg(wrapperspb.String(v)); err != nil {
			break // the status comes from RecvMsg
		}
		out := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(out); err != nil {
			return end(err)
		}
		if out.GetValue() != v {
			f.t.Fatalf("chat answered %q, want %q", out.GetValue(), v)
		}
	}
	_ = cs.CloseSend()
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		return end(err)
	}
	return end(nil)
}

var perKey = sluice.Limit{Name: "per-key", Quota: 2, Window: time.Minute} // a token every 30 s

func metadataKey(name string) grpclimit.Key {
	return grpclimit.Key{Kind: grpclimit.Metadata, Metadata: name}
}

var global = grpclimit.Key{Kind: grpclimit.Global}

// The rejection contract, exactly: status code, message, the one detail
// and its delay, and the header metadata of the allowed calls before it.
func TestRejectionContract(t *testing.T) {
	t.Parallel()
	f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{{Name: "keyed", Quotas: []grpclimit.Quota{{Limit: perKey, Key: metadataKey("X-Api-Key")}}}}})
	for i, want := range []string{`"per-key";r=1;t=30`, `"per-key";r=0;t=60`} {
		r := f.call(nil, say, "hi", "x-api-key", "k1")
		if r.code != codes.OK || r.ratelimit() != want || r.header.Get("ratelimit-policy")[0] != `"per-key";q=2;w=60` {
			t.Fatalf("call %d: %v %q %v", i, r.code, r.msg, r.header)
		}
	}
	f.clock.Add(10 * time.Second) // a token every 30 s: the next in 20 s
	r := f.call(nil, say, "hi", "x-api-key", "k1")
	if r.code != codes.ResourceExhausted || r.msg != "rate limited" || r.retry != 20*time.Second || r.details != 1 {
		t.Fatalf("third call: %v %q, retry %v, %d details; want RESOURCE_EXHAUSTED \"rate limited\", one RetryInfo of 20s", r.code, r.msg, r.retry, r.details)
	}
	if r.ratelimit() != `"per-key";r=0;t=20` || r.header.Get("ratelimit-policy")[0] != `"per-key";q=2;w=60` {
		t.Errorf("rejection's metadata: %v", r.header)
	}
	limits, err := ratelimitheader.ParseLimits(r.header["ratelimit"])
	if err != nil || len(limits) != 1 || limits[0].Name != "per-key" || limits[0].Remaining != 0 || limits[0].Reset != 20*time.Second {
		t.Errorf("ParseLimits: %+v, %v", limits, err)
	}
	if n := f.served.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

// RetryInfo's delay is the decision's RetryAfter rounded up to whole
// milliseconds, at least 1 ms — checked against the store's own decision
// at the same instant.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		limit   sluice.Limit
		spend   int           // allowed calls first
		advance time.Duration // then the clock moves
		want    time.Duration
	}{
		{"whole seconds", perKey, 2, 10 * time.Second, 20 * time.Second},
		{"whole milliseconds", sluice.Limit{Name: "l", Quota: 10, Window: time.Second, Burst: 1}, 1, 0, 100 * time.Millisecond},
		{"a third of a second", sluice.Limit{Name: "l", Quota: 3, Window: time.Second, Burst: 1}, 1, 0, 334 * time.Millisecond},
		{"below a millisecond", sluice.Limit{Name: "l", Quota: 1000, Window: time.Second, Burst: 1}, 1, 400 * time.Microsecond, time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{{Name: "r", Quotas: []grpclimit.Quota{{Limit: c.limit, Key: global}}}}})
			for i := range c.spend {
				if r := f.call(nil, say, "hi"); r.code != codes.OK {
					t.Fatalf("call %d: %v", i, r.code)
				}
			}
			f.clock.Add(c.advance)
			r := f.call(nil, say, "hi")
			if r.code != codes.ResourceExhausted || r.retry != c.want {
				t.Fatalf("%v, retry %v; want RESOURCE_EXHAUSTED, %v", r.code, r.retry, c.want)
			}
			d, _ := f.store.Store.Allow(context.Background(), "global", c.limit, 1) // a rejection spends nothing
			if ceil := (d.RetryAfter + time.Millisecond - 1) / time.Millisecond * time.Millisecond; d.Allowed || ceil != r.retry {
				t.Fatalf("the store says %+v: RetryAfter rounds up to %v, the client was told %v", d, ceil, r.retry)
			}
		})
	}
}

// A cost that can never fit is refused without RetryInfo, saying why; the
// ratelimit field has no t.
func TestCostNeverFits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{
		{Name: "computed", Match: grpclimit.Match{Methods: []string{say}}, Quotas: []grpclimit.Quota{{Limit: perKey, Key: global,
			CostFunc: func(context.Context, string) float64 { return 3 }}}}, // a static cost of 3 is refused by New
		{Name: "declared", Quotas: []grpclimit.Quota{{Limit: perKey, Key: global, CostMetadata: "x-cost"}}},
	}})
	for _, r := range []reply{f.call(nil, say, "hi"), f.call(nil, other, "hi", "x-cost", "5"), f.stream([]string{"hi"}, "x-cost", "2.5")} {
		if r.code != codes.ResourceExhausted || r.msg != "rate limited: the cost exceeds the limit's capacity" || r.details != 0 {
			t.Errorf("%v %q with %d details; want RESOURCE_EXHAUSTED, cost exceeds, no RetryInfo", r.code, r.msg, r.details)
		}
		if r.ratelimit() != `"per-key";r=2` {
			t.Errorf("ratelimit %q, want no t for a cost that never fits", r.ratelimit())
		}
	}
	if n := f.served.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

// Rules apply in order, the first whose methods and keys fit: an API key
// rule for clients that send one, a peer rule for the anonymous, a global
// rule for a whole service, nothing for methods no rule covers.
func TestRuleOrderAndKeys(t *testing.T) {
	t.Parallel()
	one := func(name string) sluice.Limit { return sluice.Limit{Name: name, Quota: 1, Window: time.Hour} }
	echo := grpclimit.Match{Methods: []string{say, other}}
	f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{
		{Name: "admin", Match: grpclimit.Match{Methods: []string{"/test.Admin/*"}}, Quotas: []grpclimit.Quota{{Limit: one("admin"), Key: global}}},
		{Name: "keyed", Match: echo, Quotas: []grpclimit.Quota{{Limit: one("per-key"), Key: metadataKey("X-Api-Key")}}},
		{Name: "anonymous", Match: echo, Quotas: []grpclimit.Quota{{Limit: one("anon"), Key: grpclimit.Key{Kind: grpclimit.Peer}}}},
	}})
	two := f.dial("127.0.0.2")
	for i, c := range []struct {
		conn   *grpc.ClientConn
		method string
		md     []string
		code   codes.Code
		policy string // the limit that applies, "" for none
	}{
		{nil, say, []string{"x-api-key", "k1"}, codes.OK, "per-key"},
		{nil, other, []string{"x-api-key", "k1"}, codes.ResourceExhausted, "per-key"}, // one key, every method of the rule
		{two, say, []string{"x-api-key", "k1"}, codes.ResourceExhausted, "per-key"},   // from anywhere
		{nil, say, []string{"x-api-key", "k2"}, codes.OK, "per-key"},                  // another key
		{nil, say, nil, codes.OK, "anon"},                                             // no key: by peer
		{nil, other, nil, codes.ResourceExhausted, "anon"},
		{two, say, nil, codes.OK, "anon"},                                      // another peer
		{nil, say, []string{"x-api-key", ""}, codes.ResourceExhausted, "anon"}, // an empty key is none
		{nil, ping, nil, codes.OK, "admin"},
		{two, ping, []string{"x-api-key", "k3"}, codes.ResourceExhausted, "admin"}, // one global key
		{nil, free, nil, codes.OK, ""},                                             // no rule
		{nil, free, nil, codes.OK, ""},
	} {
		r := f.call(c.conn, c.method, "hi", c.md...)
		if r.code != c.code || r.policy() != c.policy {
			t.Errorf("call %d (%s %v): %v under %q, want %v under %q", i, c.method, c.md, r.code, r.policy(), c.code, c.policy)
		}
	}
}

// Each key kind counts for its own: one budget per method, per peer, per
// principal, or for all.
func TestKeyKinds(t *testing.T) {
	t.Parallel()
	one := sluice.Limit{Name: "one", Quota: 1, Window: time.Hour}
	principal := func(ctx context.Context) (string, bool) {
		v := metadata.ValueFromIncomingContext(ctx, "x-user") // an authentication layer's result
		return strings.Join(v, ""), len(v) > 0
	}
	type step struct {
		from   string // local address
		method string
		md     []string
		code   codes.Code
	}
	for _, c := range []struct {
		kind  grpclimit.KeyKind
		steps []step
	}{
		{grpclimit.Global, []step{
			{"127.0.0.1", say, nil, codes.OK},
			{"127.0.0.2", other, nil, codes.ResourceExhausted},
		}},
		{grpclimit.Method, []step{
			{"127.0.0.1", say, nil, codes.OK},
			{"127.0.0.2", say, nil, codes.ResourceExhausted},
			{"127.0.0.1", other, nil, codes.OK},
			{"127.0.0.1", other, nil, codes.ResourceExhausted},
			{"127.0.0.1", ping, nil, codes.OK},
		}},
		{grpclimit.Peer, []step{
			{"127.0.0.1", say, nil, codes.OK},
			{"127.0.0.1", other, nil, codes.ResourceExhausted},
			{"127.0.0.2", say, nil, codes.OK},
			{"127.0.0.3", say, nil, codes.OK},
		}},
		{grpclimit.Principal, []step{
			{"127.0.0.1", say, []string{"x-user", "ana"}, codes.OK},
			{"127.0.0.2", other, []string{"x-user", "ana"}, codes.ResourceExhausted},
			{"127.0.0.1", say, []string{"x-user", "bo"}, codes.OK},
			{"127.0.0.1", say, nil, codes.OK}, // no principal: no rule
			{"127.0.0.1", say, nil, codes.OK},
		}},
	} {
		t.Run(c.kind.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, grpclimit.Options{Principal: principal, Rules: []grpclimit.Rule{{Name: "r", Quotas: []grpclimit.Quota{{Limit: one, Key: grpclimit.Key{Kind: c.kind}}}}}})
			conns := map[string]*grpc.ClientConn{}
			for i, s := range c.steps {
				if conns[s.from] == nil {
					conns[s.from] = f.dial(s.from)
				}
				if r := f.call(conns[s.from], s.method, "hi", s.md...); r.code != s.code {
					t.Errorf("call %d (%s from %s, %v): %v, want %v", i, s.method, s.from, s.md, r.code, s.code)
				}
			}
		})
	}
}

// Costs: static, computed per method, declared by the client in metadata;
// a malformed declaration is INVALID_ARGUMENT and spends nothing.
func TestCosts(t *testing.T) {
	t.Parallel()
	tokens := sluice.Limit{Name: "tokens", Quota: 10, Window: time.Hour}
	var obs recorder
	f := newFixture(t, grpclimit.Options{Observer: &obs, Rules: []grpclimit.Rule{
		{Name: "computed", Match: grpclimit.Match{Methods: []string{other}}, Quotas: []grpclimit.Quota{{Limit: tokens, Key: global,
			CostFunc: func(ctx context.Context, method string) float64 { return 3 }}}},
		{Name: "declared", Quotas: []grpclimit.Quota{{Limit: tokens, Key: global, Cost: 2, CostMetadata: "X-Cost"}}},
	}})
	const syntax = `invalid cost: metadata "x-cost" must hold one positive decimal number, such as 1 or 2.5`
	for i, c := range []struct {
		method string
		md     []string
		code   codes.Code
		msg    string
		left   int64 // the ratelimit field's r; -1 for none
	}{
		{say, nil, codes.OK, "", 8},                       // Cost
		{say, []string{"x-cost", "2.5"}, codes.OK, "", 5}, // 5.5, rounded down
		{other, nil, codes.OK, "", 2},                     // CostFunc
		{say, []string{"x-cost", "abc"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "-1"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "0"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "0.000"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "1e0"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "NaN"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "Inf"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "0x1"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", ".5"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "1."}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "1,5"}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", ""}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", strings.Repeat("1", 33)}, codes.InvalidArgument, syntax, -1},
		{say, []string{"x-cost", "1", "x-cost", "1"}, codes.InvalidArgument, syntax, -1}, // two values
		{say, []string{"x-cost", "0.0000001"}, codes.InvalidArgument, `invalid cost: metadata "x-cost": cost 1e-07 for limit "tokens": below the resolution of 0.000001`, -1},
		{say, []string{"x-cost", "1"}, codes.OK, "", 1},                            // nothing was spent by the malformed
		{say, []string{"x-cost", "2"}, codes.ResourceExhausted, "rate limited", 1}, // 1.5 left
	} {
		r := f.call(nil, c.method, "hi", c.md...)
		left := int64(-1)
		if ls, _ := ratelimitheader.ParseLimits(r.header["ratelimit"]); len(ls) == 1 {
			left = ls[0].Remaining
		}
		if r.code != c.code || (c.msg != "" && r.msg != c.msg) || left != c.left {
			t.Errorf("call %d (%s %q): %v %q r=%d; want %v %q r=%d", i, c.method, c.md, r.code, r.msg, left, c.code, c.msg, c.left)
		}
	}
	var costs []float64
	invalid := 0
	for _, e := range obs.all() {
		if e.Outcome == enforce.Invalid {
			invalid++
			continue
		}
		costs = append(costs, e.Cost)
	}
	if want := []float64{2, 2.5, 3, 1, 2}; !slices.Equal(costs, want) || invalid != 15 {
		t.Errorf("observed costs %v and %d invalid, want %v and 15 (malformed calls decide nothing)", costs, invalid, want)
	}
}

// Several limits in declared order: all or nothing by default (a
// rejection spends nothing), rejections count when asked.
func TestModes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode  sluice.Mode
		after codes.Code // the call after the global limit refilled
	}{
		{sluice.AllOrNothing, codes.OK},                   // the user's budget was untouched by the rejections
		{sluice.RejectionsCount, codes.ResourceExhausted}, // the rejected calls drained the user's budget
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			t.Parallel()
			user := sluice.Limit{Name: "user", Quota: 3, Window: time.Hour}
			globalLimit := sluice.Limit{Name: "global", Quota: 1, Window: time.Minute}
			f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{{Name: "r", Mode: c.mode, Quotas: []grpclimit.Quota{
				{Limit: user, Key: metadataKey("x-user")},
				{Limit: globalLimit, Key: global},
			}}}})
			if r := f.call(nil, say, "hi", "x-user", "a"); r.code != codes.OK || r.ratelimit() != `"user";r=2;t=1200, "global";r=0;t=60` {
				t.Fatalf("first: %v %q", r.code, r.ratelimit())
			}
			for range 2 {
				r := f.call(nil, say, "hi", "x-user", "a")
				ls, _ := ratelimitheader.ParseLimits(r.header["ratelimit"])
				if r.code != codes.ResourceExhausted || r.retry != time.Minute || len(ls) != 2 || ls[0].Name != "user" || ls[1].Name != "global" {
					t.Fatalf("while global is spent: %v, retry %v, %q", r.code, r.retry, r.ratelimit())
				}
			}
			f.clock.Add(time.Minute)
			if r := f.call(nil, say, "hi", "x-user", "a"); r.code != c.after {
				t.Fatalf("after the global refill: %v, want %v (%q)", r.code, c.after, r.ratelimit())
			}
		})
	}
}

// Shadow mode decides and counts, never rejects, and says nothing to the
// client.
func TestShadow(t *testing.T) {
	t.Parallel()
	var obs recorder
	f := newFixture(t, grpclimit.Options{Observer: &obs, Rules: []grpclimit.Rule{{Name: "trial", Shadow: true, Quotas: []grpclimit.Quota{{Limit: perKey, Key: global}}}}})
	for i := range 4 {
		var r reply
		if i < 3 {
			r = f.call(nil, say, "hi")
		} else {
			r = f.stream([]string{"hi"})
		}
		if r.code != codes.OK || len(r.header["ratelimit"]) != 0 || len(r.header["ratelimit-policy"]) != 0 {
			t.Fatalf("shadow call %d: %v %v", i, r.code, r.header)
		}
	}
	want := []enforce.Outcome{enforce.Allowed, enforce.Allowed, enforce.ShadowRejected, enforce.ShadowRejected}
	if got := obs.outcomes(); !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// recorder is an Observer that keeps the events.
type recorder struct {
	mu     sync.Mutex
	events []enforce.Event
}

func (r *recorder) Observe(e enforce.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []enforce.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) outcomes() []enforce.Outcome {
	var out []enforce.Outcome
	for _, e := range r.all() {
		out = append(out, e.Outcome)
	}
	return out
}

// The Observer hears the rule, the outcome, the cost and a tenant: a
// pseudonym of the key by default (never the key), or TenantLabel's.
func TestObserver(t *testing.T) {
	t.Parallel()
	var plain, labelled recorder
	rules := []grpclimit.Rule{{Name: "keyed", Quotas: []grpclimit.Quota{{Limit: perKey, Key: metadataKey("x-api-key"), Cost: 2}}}}
	f := newFixture(t, grpclimit.Options{Observer: &plain, Rules: rules})
	g := newFixture(t, grpclimit.Options{Observer: &labelled, Rules: rules, TenantLabel: func(ctx context.Context, method string) string { return "acct-7 " + method }})
	for _, key := range []string{"secret-1", "secret-1", "secret-2"} {
		f.call(nil, say, "hi", "x-api-key", key)
		g.call(nil, say, "hi", "x-api-key", key)
	}
	ev := plain.all()
	if len(ev) != 3 || ev[0].Rule != "keyed" || ev[0].Cost != 2 || ev[0].Outcome != enforce.Allowed || ev[1].Outcome != enforce.Rejected {
		t.Fatalf("events %+v", ev)
	}
	if ev[0].Tenant != ev[1].Tenant || ev[0].Tenant == ev[2].Tenant || !strings.HasPrefix(ev[0].Tenant, "metadata:") || strings.Contains(ev[0].Tenant, "secret") {
		t.Errorf("tenants %q, %q, %q: want a stable pseudonym per key", ev[0].Tenant, ev[1].Tenant, ev[2].Tenant)
	}
	if lv := labelled.all(); len(lv) != 3 || lv[0].Tenant != "acct-7 "+say {
		t.Errorf("labelled events %+v", lv)
	}
}

// failing is a Limiter whose every call fails: a store answering garbage
// (fault injection, not a mock of a store's behaviour); with err set, it
// answers d and err (a decision only its error qualifies).
type failing struct {
	sluice.Limiter
	d   sluice.Decision
	err error
}

var errGarbage = errors.New("store: unexpected reply")

func (f failing) Allow(context.Context, string, sluice.Limit, float64) (sluice.Decision, error) {
	return f.d, cmp.Or(f.err, errGarbage)
}

// A limiter that fails: the rule's OnError lets the call through, or
// refuses it UNAVAILABLE with a retry in one second; the Observer hears
// the error.
func TestOnError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy sluice.FailurePolicy
		code   codes.Code
		msg    string
		retry  time.Duration
	}{
		{sluice.FailOpen, codes.OK, "", -1},
		{sluice.FailClosed, codes.Unavailable, "rate limiter unavailable", time.Second},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			t.Parallel()
			var obs recorder
			f := newFixture(t, grpclimit.Options{Limiter: failing{}, Observer: &obs, Rules: []grpclimit.Rule{{Name: "r", OnError: c.policy, Quotas: []grpclimit.Quota{{Limit: perKey, Key: global}}}}})
			for _, r := range []reply{f.call(nil, say, "hi"), f.stream([]string{"hi"})} {
				if r.code != c.code || r.msg != c.msg || r.retry != c.retry || len(r.header["ratelimit"]) != 0 {
					t.Errorf("%v %q retry %v %v; want %v %q retry %v, no ratelimit", r.code, r.msg, r.retry, r.header, c.code, c.msg, c.retry)
				}
			}
			ev := obs.all()
			if len(ev) != 2 || ev[0].Outcome != enforce.Failed || !errors.Is(ev[0].Err, errGarbage) {
				t.Errorf("events %+v", ev)
			}
		})
	}
}

// A stream is decided once, when it starts, whatever it sends; its cost
// may be declared in its metadata.
func TestStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{{Name: "chat", Match: grpclimit.Match{Methods: []string{chat}}, Quotas: []grpclimit.Quota{{Limit: perKey, Key: metadataKey("x-api-key"), CostMetadata: "x-cost"}}}}})
	for i, c := range []struct {
		md     []string
		code   codes.Code
		retry  time.Duration
		header string
	}{
		{[]string{"x-api-key", "k"}, codes.OK, -1, `"per-key";r=1;t=30`},
		{[]string{"x-api-key", "k"}, codes.OK, -1, `"per-key";r=0;t=60`},
		{[]string{"x-api-key", "k"}, codes.ResourceExhausted, 30 * time.Second, `"per-key";r=0;t=30`},
		{[]string{"x-api-key", "other", "x-cost", "2"}, codes.OK, -1, `"per-key";r=0;t=60`},
		{[]string{"x-api-key", "third", "x-cost", "two"}, codes.InvalidArgument, -1, ""},
		{nil, codes.OK, -1, ""}, // no key: no rule
	} {
		r := f.stream([]string{"a", "b", "c"}, c.md...)
		if r.code != c.code || r.retry != c.retry || r.ratelimit() != c.header {
			t.Errorf("stream %d (%v): %v %q retry %v %q; want %v retry %v %q", i, c.md, r.code, r.msg, r.retry, r.ratelimit(), c.code, c.retry, c.header)
		}
	}
	if n := f.served.Load(); n != 4*3 {
		t.Errorf("handler served %d messages, want 12 (4 streams of 3)", n)
	}
}

// A concurrency quota holds its slot while the handler runs, unary or
// stream, and frees it when the handler returns; a rejected call holds
// none, even when rejections count.
func TestConcurrencyQuota(t *testing.T) {
	t.Parallel()
	slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
	hourly := sluice.Limit{Name: "hourly", Quota: 1, Window: time.Hour}
	f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{
		{Name: "both", Mode: sluice.RejectionsCount, Match: grpclimit.Match{Methods: []string{ping}}, Quotas: []grpclimit.Quota{{Limit: slots, Key: global}, {Limit: hourly, Key: global}}},
		{Name: "slots", Quotas: []grpclimit.Quota{{Limit: slots, Key: global}}},
	}})
	for _, first := range []func() reply{
		func() reply { return f.call(nil, say, "block") },
		func() reply { return f.stream([]string{"block"}) },
	} {
		done := make(chan reply)
		go func() { done <- first() }()
		<-f.entered
		r := f.call(nil, other, "hi")
		if r.code != codes.ResourceExhausted || r.header.Get("ratelimit-policy")[0] != `"slots";q=1;qu="concurrent-requests"` {
			t.Fatalf("a second call while the slot is held: %v %v", r.code, r.header)
		}
		if r := f.stream([]string{"hi"}); r.code != codes.ResourceExhausted {
			t.Fatalf("a stream while the slot is held: %v", r.code)
		}
		f.release <- struct{}{}
		if r := <-done; r.code != codes.OK {
			t.Fatalf("the blocking call: %v %q", r.code, r.msg)
		}
		if r := f.call(nil, other, "hi"); r.code != codes.OK {
			t.Fatalf("after the slot was released: %v", r.code)
		}
	}
	if r := f.call(nil, ping, "hi"); r.code != codes.OK {
		t.Fatalf("ping: %v", r.code)
	}
	if r := f.call(nil, ping, "hi"); r.code != codes.ResourceExhausted { // slots allows, hourly rejects
		t.Fatalf("second ping: %v", r.code)
	}
	if r := f.call(nil, other, "hi"); r.code != codes.OK {
		t.Fatalf("the rejected ping kept its slot: %v", r.code)
	}
}

// Every branch looks the same from outside: a known or an unknown key, a
// hot key or a cold one, get the same metadata fields and the same single
// call to the store, and no key reaches a status, detail or metadata.
func TestNoIdentityLeak(t *testing.T) {
	t.Parallel()
	limit := sluice.Limit{Name: "per-key", Quota: 3, Window: time.Hour}
	f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{{Name: "k", Quotas: []grpclimit.Quota{{Limit: limit, Key: metadataKey("x-api-key")}}}}})
	f.call(nil, say, "hi", "x-api-key", "hot")
	f.call(nil, say, "hi", "x-api-key", "hot")
	type shape struct {
		fields []string
		calls  int64
	}
	look := func(key string) shape {
		before := f.store.calls.Load()
		r := f.call(nil, say, "hi", "x-api-key", key)
		var fields []string
		for k := range r.header {
			fields = append(fields, k)
		}
		slices.Sort(fields)
		return shape{fields, f.store.calls.Load() - before}
	}
	hot, cold := look("hot"), look("never-seen")
	if !slices.Equal(hot.fields, cold.fields) || hot.calls != 1 || cold.calls != 1 {
		t.Fatalf("hot %+v, cold %+v", hot, cold)
	}
	for range 3 {
		ctx, cancel := outgoing([]string{"x-api-key", "secret-key-123"})
		var header metadata.MD
		err := f.conn.Invoke(ctx, say, wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&header))
		cancel()
		st := status.Convert(err)
		all := []string{st.Message()}
		for _, d := range st.Proto().GetDetails() {
			all = append(all, string(d.GetValue()))
		}
		for _, v := range header {
			all = append(all, v...)
		}
		for _, s := range all {
			if strings.Contains(s, "secret-key-123") {
				t.Fatalf("the reply carries the key: %q", s)
			}
		}
	}
}

// A bad configuration is refused at New, saying which rule and why.
func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	ok := grpclimit.Quota{Limit: perKey, Key: global}
	rule := func(r grpclimit.Rule) grpclimit.Options {
		if r.Name == "" {
			r.Name = "r"
		}
		return grpclimit.Options{Limiter: ms, Rules: []grpclimit.Rule{r}}
	}
	quota := func(q grpclimit.Quota) grpclimit.Options { return rule(grpclimit.Rule{Quotas: []grpclimit.Quota{q}}) }
	methods := func(ms ...string) grpclimit.Options {
		return rule(grpclimit.Rule{Match: grpclimit.Match{Methods: ms}, Quotas: []grpclimit.Quota{ok}})
	}
	cost := func(context.Context, string) float64 { return 1 }
	for _, c := range []struct {
		name  string
		opts  grpclimit.Options
		wants string
	}{
		{"no limiter", grpclimit.Options{Rules: []grpclimit.Rule{{Name: "r", Quotas: []grpclimit.Quota{ok}}}}, "Options.Limiter is required"},
		{"no rules", grpclimit.Options{Limiter: ms}, "no rules"},
		{"unnamed", grpclimit.Options{Limiter: ms, Rules: []grpclimit.Rule{{Quotas: []grpclimit.Quota{ok}}}}, `rule "": the name must be 1 to 64 bytes`},
		{"twice", grpclimit.Options{Limiter: ms, Rules: []grpclimit.Rule{{Name: "r", Quotas: []grpclimit.Quota{ok}}, {Name: "r", Quotas: []grpclimit.Quota{ok}}}}, `two rules named "r"`},
		{"no quotas", rule(grpclimit.Rule{}), `rule "r": 0 quotas: a rule spends on 1 to 8 limits`},
		{"bad mode", rule(grpclimit.Rule{Mode: 7, Quotas: []grpclimit.Quota{ok}}), "unknown mode 7"},
		{"bad OnError", rule(grpclimit.Rule{OnError: 9, Quotas: []grpclimit.Quota{ok}}), "unknown OnError 9"},
		{"fail_local", rule(grpclimit.Rule{OnError: sluice.FailLocal, Quotas: []grpclimit.Quota{ok}}), `rule "r": OnError fail_local: a middleware has no local fallback; use fail_open or fail_closed`},
		{"same limit twice", rule(grpclimit.Rule{Quotas: []grpclimit.Quota{ok, ok}}), `limit "per-key" is used twice`},
		{"no slash", methods("test.Echo/Say"), `method pattern "test.Echo/Say": must start with /`},
		{"no method", methods("/test.Echo"), `method pattern "/test.Echo": must have exactly two slashes`},
		{"three parts", methods("/test/Echo/Say"), "must have exactly two slashes"},
		{"empty method", methods("/test.Echo/"), "the method must be an identifier or *"},
		{"partial wildcard", methods("/test.Echo/Sa*"), "the method must be an identifier or *"},
		{"service wildcard", methods("/*/Say"), "the service must be identifiers separated by dots"},
		{"empty package", methods("/.Echo/Say"), "the service must be identifiers separated by dots"},
		{"everything", methods("*"), "must start with /"},
		{"bad limit", quota(grpclimit.Quota{Limit: sluice.Limit{Name: "x", Quota: -1, Window: time.Second}}), `rule "r", quota 0 (x): sluice: invalid limit`},
		{"bad cost", quota(grpclimit.Quota{Limit: perKey, Cost: -2}), "cost -2: must be positive"},
		{"fractional cost of slots", quota(grpclimit.Quota{Limit: sluice.Limit{Name: "s", Algorithm: sluice.Concurrency, Quota: 2, Window: time.Second}, Cost: 1.5}), "counts whole units"},
		{"no metadata name", quota(grpclimit.Quota{Limit: perKey, Key: grpclimit.Key{Kind: grpclimit.Metadata}}), "needs Key.Metadata"},
		{"bad metadata name", quota(grpclimit.Quota{Limit: perKey, Key: metadataKey("x api key")}), `Key.Metadata: "x api key": a metadata key holds only`},
		{"reserved metadata", quota(grpclimit.Quota{Limit: perKey, Key: metadataKey("grpc-timeout")}), "reserved"},
		{"pseudo-header", quota(grpclimit.Quota{Limit: perKey, Key: metadataKey(":authority")}), "holds only"},
		{"cost above capacity", quota(grpclimit.Quota{Limit: perKey, Key: global, Cost: 3}), "cost 3 exceeds the limit's capacity 2"},
		{"both costs", quota(grpclimit.Quota{Limit: perKey, CostMetadata: "x-cost", CostFunc: cost}), "at most one of CostMetadata and CostFunc"},
		{"binary cost", quota(grpclimit.Quota{Limit: perKey, CostMetadata: "x-cost-bin"}), "not a binary (-bin) key"},
		{"bad cost metadata", quota(grpclimit.Quota{Limit: perKey, CostMetadata: "x/cost"}), `CostMetadata: "x/cost"`},
		{"no principal", quota(grpclimit.Quota{Limit: perKey, Key: grpclimit.Key{Kind: grpclimit.Principal}}), "needs Options.Principal"},
		{"bad kind", quota(grpclimit.Quota{Limit: perKey, Key: grpclimit.Key{Kind: 42}}), "unknown key kind 42"},
	} {
		_, err := grpclimit.New(c.opts)
		if err == nil || !strings.Contains(err.Error(), c.wants) || !strings.HasPrefix(err.Error(), "grpclimit: ") {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.wants)
		}
	}
}

// Keys are built as httplimit builds them: one limiter and one limit
// behind an HTTP and a gRPC server count an API key, or a client address,
// once.
func TestKeysSharedWithHTTP(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		httpKey httplimit.Key
		grpcKey grpclimit.Key
	}{
		{"api key", httplimit.Key{Kind: httplimit.Header, Header: "X-Api-Key"}, metadataKey("x-api-key")},
		{"address", httplimit.Key{Kind: httplimit.IP}, grpclimit.Key{Kind: grpclimit.Peer}},
		{"global", httplimit.Key{Kind: httplimit.Global}, global},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{{Name: "r", Quotas: []grpclimit.Quota{{Limit: perKey, Key: c.grpcKey}}}}})
			mw, err := httplimit.New(httplimit.Options{Limiter: f.store, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: perKey, Key: c.httpKey}}}}})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "127.0.0.1:4711"
			r.Header.Set("X-Api-Key", "k")
			w := httptest.NewRecorder()
			mw.Handler(http.NotFoundHandler()).ServeHTTP(w, r)
			if got := w.Header().Get("RateLimit"); got != `"per-key";r=1;t=30` {
				t.Fatalf("over HTTP: %q", got)
			}
			if g := f.call(nil, say, "hi", "x-api-key", "k"); g.ratelimit() != `"per-key";r=0;t=60` {
				t.Fatalf("then over gRPC: %v %q, want the HTTP call's spend counted", g.code, g.ratelimit())
			}
		})
	}
}

// A leaky bucket admits calls to be served later: the interceptor holds
// each for its Delay, and a call whose client gives up is not served.
func TestLeakyBucketDelays(t *testing.T) {
	t.Parallel()
	queue := sluice.Limit{Name: "queue", Algorithm: sluice.LeakyBucket, Quota: 10, Window: time.Second, Burst: 3}
	var mu sync.Mutex
	var waited []time.Duration
	giveUp := false
	f := newFixture(t, grpclimit.Options{Rules: []grpclimit.Rule{{Name: "q", Quotas: []grpclimit.Quota{{Limit: queue, Key: global}}}}},
		func(in *grpclimit.Interceptor) {
			grpclimit.SetSleep(in, func(ctx context.Context, d time.Duration) error {
				mu.Lock()
				defer mu.Unlock()
				waited = append(waited, d)
				if giveUp {
					return status.Error(codes.Canceled, "gone")
				}
				return nil
			})
		})
	var got []codes.Code
	for range 4 {
		got = append(got, f.call(nil, say, "hi").code)
	}
	mu.Lock()
	w := slices.Clone(waited)
	giveUp = true
	mu.Unlock()
	if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(got, []codes.Code{codes.OK, codes.OK, codes.OK, codes.ResourceExhausted}) || !slices.Equal(w, want) {
		t.Fatalf("codes %v, waits %v; want three served (two delayed %v), the fourth refused", got, w, want)
	}
	f.clock.Add(time.Second)
	f.call(nil, say, "hi")
	if r := f.call(nil, say, "hi"); r.code != codes.Canceled || f.served.Load() != 4 {
		t.Fatalf("a call abandoned while waiting: %v, %d served; want CANCELED and 4", r.code, f.served.Load())
	}
}

// A computed cost that cannot be a cost is INVALID_ARGUMENT, nothing
// spent — not a limiter failure, which FailOpen would let through.
func TestInvalidComputedCost(t *testing.T) {
	t.Parallel()
	one := sluice.Limit{Name: "one", Quota: 1, Window: time.Hour}
	var obs recorder
	f := newFixture(t, grpclimit.Options{Observer: &obs, Rules: []grpclimit.Rule{{Name: "r", Quotas: []grpclimit.Quota{{Limit: one, Key: global,
		CostFunc: func(_ context.Context, m string) float64 {
			if m == say {
				return -1
			}
			return 1e-9 // below the resolution: the store refuses it
		}}}}}})
	for _, m := range []string{say, other} {
		if r := f.call(nil, m, "hi"); r.code != codes.InvalidArgument || !strings.HasPrefix(r.msg, "invalid cost: ") {
			t.Errorf("%s: %v %q, want INVALID_ARGUMENT", m, r.code, r.msg)
		}
	}
	if f.served.Load() != 0 {
		t.Fatal("a call of invalid cost was served")
	}
	for _, e := range obs.all() {
		if e.Outcome != enforce.Invalid {
			t.Fatalf("observed %v, want invalid", e.Outcome)
		}
	}
}
