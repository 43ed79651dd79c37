package lease_test

// The fleet's fault tests: 3–4 relay processes (this test binary run again
// as a child: relay.New with a bolt queue and a lease.Holder on
// redislease) share L = 400/s, B = 40 cut into P = 8 partitions, sending
// to one loopback target that records every arrival. A test-owned
// redis-server sits behind a TCP proxy per child, so that one child can be
// cut from Redis. The bound checked everywhere: at most L + B arrivals in
// any 1 s window at the target.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/redisbucket"
	"github.com/sluicehq/sluice/redislease"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/relay"
)

const (
	fleetL     = 400.0
	fleetB     = 40.0
	fleetP     = 8
	fleetTTL   = time.Second
	fleetBound = int(fleetL + fleetB)
	childEnv   = "SLUICE_LEASE_FLEET_CHILD"
)

// childConfig is what a child relay process is told (as JSON in childEnv).
type childConfig struct {
	Redis   string // the proxy's address
	Target  string // the target's origin
	Member  string
	Naive   bool
	Offered float64 // tasks per second enqueued; 0: a backlog of 100k
	Dir     string
	Prefix  string
	Bucket  bool // the other mode: a shared token bucket (redisbucket), not leases
}

// bucketBudget spends from a redisbucket.Budget: no fence.
type bucketBudget struct{ b *redisbucket.Budget }

func (b bucketBudget) Wait(ctx context.Context, cost float64) (string, error) {
	return "", b.b.Wait(ctx, cost)
}
func (bucketBudget) Stale(string)    {}
func (b bucketBudget) Rate() float64 { return b.b.Rate() }

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(fleetChild(v))
	}
	os.Exit(m.Run())
}

// fleetChild is one relay process of the fleet.
func fleetChild(v string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{c.Redis}, ConnectTimeout: 200 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		return 2
	}
	defer conn.Close()
	coord, err := redislease.New(redislease.Options{Client: conn, Prefix: c.Prefix, Timeout: 250 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	limit := sluice.Limit{Name: "fleet", Quota: fleetL, Window: time.Second, Burst: fleetB}
	o := lease.Options{Coordinator: coord, Limit: limit, Partitions: fleetP, TTL: fleetTTL, Member: c.Member, Logger: log}
	if c.Naive {
		o = lease.Naive(o)
	}
	h, err := lease.New(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() { <-sig; cancel() }()
	var wg sync.WaitGroup
	budget := relay.HolderBudget(h)
	if c.Bucket {
		b, err := redisbucket.New(redisbucket.Options{Client: conn, Limit: limit, Prefix: c.Prefix})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer b.Close()
		budget = bucketBudget{b}
	} else {
		wg.Go(func() { _ = h.Run(ctx) })
	}
	r, err := relay.New(ctx, relay.Options{
		Targets: []relay.Target{{
			Name: "api", Origin: c.Target, Limits: []sluice.Limit{limit},
			Allow:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			Timeout: 5 * time.Second, Budget: budget,
		}},
		Queues: []relay.Queue{{Name: "work", Target: "api"}},
		Open: func(_ context.Context, name string) (queue.Queue, error) {
			return boltqueue.Open(filepath.Join(c.Dir, name+".db"), boltqueue.Options{Logger: log})
		},
		Logger: log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	wg.Go(func() { _ = r.Run(ctx) })
	batch := func(n int) {
		reqs := make([]relay.Request, n)
		for i := range reqs {
			reqs[i] = relay.Request{Method: "POST", URL: "/work?from=" + c.Member}
		}
		if _, err := r.Enqueue(ctx, "work", reqs...); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "enqueue:", err)
		}
	}
	if c.Offered == 0 {
		for range 100 {
			batch(1000)
		}
	}
	fmt.Println("ready")
	if c.Offered > 0 {
		t := time.NewTicker(100 * time.Millisecond)
		owed := 0.0
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-t.C:
				owed += c.Offered / 10
				if n := int(owed); n > 0 {
					batch(n)
					owed -= float64(n)
				}
			}
		}
		t.Stop()
	}
	<-ctx.Done()
	wg.Wait()
	_ = r.Close()
	return 0
}

// fleet is a test's target, Redis, proxies and children.
type fleet struct {
	t        *testing.T
	redis    *redistest.Server
	prefix   string
	mu       sync.Mutex
	arrivals []time.Time
	who      []string // the relay each arrival came from
	from     map[string]int
	target   *httptest.Server
	children []*child
}

type child struct {
	member string
	proxy  *proxy
	cmd    *exec.Cmd
	done   chan struct{}
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	if testing.Short() {
		t.Skip("the fleet's fault tests run for minutes; not with -short")
	}
	if raceEnabled {
		t.Skip("timed: the race detector's slowdown breaks the pacing (run in make test's timed step)")
	}
	f := &fleet{t: t, redis: redistest.StartServer(t), prefix: "lt" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":", from: map[string]int{}}
	f.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.arrivals = append(f.arrivals, time.Now())
		f.who = append(f.who, r.URL.Query().Get("from"))
		f.from[r.URL.Query().Get("from")]++
		f.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(f.target.Close)
	return f
}

// start runs a child relay process and waits for it to be ready.
func (f *fleet) start(member string, offered float64, naive bool) *child {
	return f.startMode(member, offered, naive, false)
}

func (f *fleet) startMode(member string, offered float64, naive, bucket bool) *child {
	f.t.Helper()
	p := newProxy(f.t, f.redis.Addr())
	cfg, _ := json.Marshal(childConfig{Redis: p.addr(), Target: f.target.URL, Member: member, Naive: naive, Offered: offered, Dir: f.t.TempDir(), Prefix: f.prefix, Bucket: bucket})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	cmd.Stderr = &prefixWriter{t: f.t, prefix: member + ": "}
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	c := &child{member: member, proxy: p, cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "ready" {
				close(ready)
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(c.done) }()
	select {
	case <-ready:
	case <-c.done:
		f.t.Fatalf("child %s exited before it was ready", member)
	case <-time.After(30 * time.Second):
		f.t.Fatalf("child %s not ready in 30 s", member)
	}
	f.children = append(f.children, c)
	f.t.Cleanup(func() { c.signal(syscall.SIGKILL); <-c.done })
	return c
}

func (c *child) signal(s syscall.Signal) { _ = c.cmd.Process.Signal(s) }

// stop ends the child gracefully and waits.
func (c *child) stop(t *testing.T) {
	c.signal(syscall.SIGCONT)
	c.signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Errorf("child %s did not stop in 20 s", c.member)
	}
}

func (f *fleet) stopAll() {
	for _, c := range f.children {
		c.stop(f.t)
	}
}

// window reports the most arrivals in any 1 s span, and the arrivals per
// second over [from, to).
func (f *fleet) window(from, to time.Time) (most int, rate float64) {
	f.mu.Lock()
	ts := slices.Clone(f.arrivals)
	f.mu.Unlock()
	j, n := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= time.Second {
			j++
		}
		most = max(most, i-j+1)
		if !ts[i].Before(from) && ts[i].Before(to) {
			n++
		}
	}
	return most, float64(n) / to.Sub(from).Seconds()
}

// peak describes the busiest 1 s window: when it started and who sent
// what in it.
func (f *fleet) peak() (time.Time, map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	idx := make([]int, len(f.arrivals))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return f.arrivals[a].Compare(f.arrivals[b]) })
	best, bi, bj, j := 0, 0, 0, 0
	for i := range idx {
		for f.arrivals[idx[i]].Sub(f.arrivals[idx[j]]) >= time.Second {
			j++
		}
		if i-j+1 > best {
			best, bi, bj = i-j+1, i, j
		}
	}
	by := map[string]int{}
	for k := bj; k <= bi && k < len(idx); k++ {
		by[f.who[idx[k]]]++
	}
	if len(idx) == 0 {
		return time.Time{}, by
	}
	return f.arrivals[idx[bj]], by
}

// holders reads who holds each partition now (member, or "" when free or
// lapsed).
func (f *fleet) holders() map[int]string {
	out, err := f.redis.CLI("--no-raw", "HGETALL", f.prefix+"{fleet}:holders")
	if err != nil {
		f.t.Logf("HGETALL: %v %s", err, out)
		return nil
	}
	m := map[int]string{}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if i := strings.Index(l, ") \""); i >= 0 {
			lines = append(lines, strings.Trim(l[i+2:], "\""))
		}
	}
	for i := 0; i+1 < len(lines); i += 2 {
		p, _ := strconv.Atoi(lines[i])
		parts := strings.Split(lines[i+1], "|")
		if len(parts) == 3 {
			m[p] = parts[0]
		}
	}
	return m
}

func (f *fleet) evalCalls() int {
	out, _ := f.redis.CLI("INFO", "commandstats")
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "cmdstat_evalsha:") || strings.HasPrefix(l, "cmdstat_eval:") {
			v := strings.TrimPrefix(strings.SplitN(l, ",", 2)[0], strings.SplitN(l, ":", 2)[0]+":calls=")
			c, _ := strconv.Atoi(v)
			n += c
		}
	}
	return n
}

// proxy is a TCP proxy to Redis that the test can cut.
type proxy struct {
	t      *testing.T
	l      net.Listener
	to     string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
	closed bool
}

func newProxy(t *testing.T, to string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, l: l, to: to, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.to, time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// setCut cuts the link (every connection dropped, new ones refused) or
// mends it.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.l.Close()
}

type prefixWriter struct {
	t      *testing.T
	prefix string
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(b), nil
}

// settle is how long a fleet takes to hold its partitions: the first
// acquisitions of a fresh group are quarantined (TTL + drift).
const settle = 3 * time.Second

func injections() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_FLEET_INJECTIONS")); err == nil && n > 0 {
		return n
	}
	return 5
}

// Steady state: three busy relays use ≥ 95 % of L, never more than L + B
// in any second, for at most one Redis round trip per slice each.
func TestFleetSteady(t *testing.T) {
	f := newFleet(t)
	for _, m := range []string{"a", "b", "c"} {
		f.start(m, 0, false)
	}
	time.Sleep(settle)
	from, calls := time.Now(), f.evalCalls()
	time.Sleep(10 * time.Second)
	to, calls := time.Now(), f.evalCalls()-calls
	f.stopAll()
	most, rate := f.window(from, to)
	perSlice := float64(calls) / 3 / to.Sub(from).Seconds() * 0.2 // pace.DefaultSlice is 200 ms
	t.Logf("steady: %.1f/s (%.1f %% of L), most in a 1 s window %d (bound %d), %d Redis calls: %.2f per slice per process; per relay %v", rate, 100*rate/fleetL, most, fleetBound, calls, perSlice, f.from)
	if rate < 0.95*fleetL {
		t.Errorf("utilization %.1f %% < 95 %%", 100*rate/fleetL)
	}
	if most > fleetBound {
		t.Errorf("%d arrivals in one second > L + B = %d", most, fleetBound)
	}
	if perSlice > 1 {
		t.Errorf("%.2f Redis round trips per slice per process > 1", perSlice)
	}
}

// Uneven demand: one relay offered 80 % of the work, two 10 % each; the
// partitions follow, and the fleet uses ≥ 90 % of L within 3 TTLs.
func TestFleetUneven(t *testing.T) {
	f := newFleet(t)
	a := f.start("a", 0.8*fleetL, false)
	f.start("b", 0.1*fleetL, false)
	f.start("c", 0.1*fleetL, false)
	_ = a
	time.Sleep(settle + 3*fleetTTL)
	from := time.Now()
	for range 4 {
		time.Sleep(2 * time.Second)
		wants, _ := f.redis.CLI("HGETALL", f.prefix+"{fleet}:wants")
		t.Logf("wants %q; holders %v", wants, f.holders())
	}
	to := time.Now()
	f.stopAll()
	most, rate := f.window(from, to)
	t.Logf("uneven 80/10/10: %.1f/s (%.1f %% of L), most in a 1 s window %d (bound %d); per relay %v", rate, 100*rate/fleetL, most, fleetBound, f.from)
	if rate < 0.90*fleetL {
		t.Errorf("utilization %.1f %% < 90 %%", 100*rate/fleetL)
	}
	if most > fleetBound {
		t.Errorf("%d arrivals in one second > L + B = %d", most, fleetBound)
	}
}

// Faults, each injected several times into a busy fleet: the bound holds
// throughout.
func TestFleetFaults(t *testing.T) {
	for _, fault := range []struct {
		name   string
		inject func(f *fleet, victim *child)
	}{
		{"sigstop-2ttl", func(f *fleet, v *child) {
			v.signal(syscall.SIGSTOP)
			time.Sleep(2 * fleetTTL)
			v.signal(syscall.SIGCONT)
		}},
		{"cut-from-redis-2.5s", func(f *fleet, v *child) {
			v.proxy.setCut(true)
			time.Sleep(2500 * time.Millisecond)
			v.proxy.setCut(false)
		}},
		{"redis-restart", func(f *fleet, v *child) {
			f.redis.Kill()
			time.Sleep(200 * time.Millisecond)
			f.redis.Start()
		}},
	} {
		t.Run(fault.name, func(t *testing.T) {
			f := newFleet(t)
			var cs []*child
			for _, m := range []string{"a", "b", "c"} {
				cs = append(cs, f.start(m, 0, false))
			}
			time.Sleep(settle)
			from := time.Now()
			for i := range injections() {
				fault.inject(f, cs[i%len(cs)])
				time.Sleep(3 * fleetTTL)
			}
			to := time.Now()
			f.stopAll()
			most, rate := f.window(from, to)
			t.Logf("%s × %d: most in a 1 s window %d (bound %d), mean %.1f/s (%.1f %% of L) through the faults; per relay %v", fault.name, injections(), most, fleetBound, rate, 100*rate/fleetL, f.from)
			if most > fleetBound {
				t.Errorf("%d arrivals in one second > L + B = %d", most, fleetBound)
			}
		})
	}
}

// A killed holder's partitions are acquired by the others within TTL plus
// a renew interval, and the bound holds.
func TestFleetKilledHolder(t *testing.T) {
	f := newFleet(t)
	for _, m := range []string{"a", "b", "c"} {
		f.start(m, 0, false)
	}
	time.Sleep(settle)
	var worst time.Duration
	for i := range injections() {
		victim := f.start("k"+strconv.Itoa(i), 0, false)
		time.Sleep(3 * fleetTTL) // it takes its share
		held := 0
		for _, m := range f.holders() {
			if m == victim.member {
				held++
			}
		}
		if held == 0 {
			t.Fatalf("injection %d: the victim holds no partition", i)
		}
		victim.signal(syscall.SIGKILL)
		<-victim.done
		killed := time.Now()
		for {
			hs := f.holders()
			taken := 0
			for _, m := range hs {
				if m != victim.member && m != "" {
					taken++
				}
			}
			if taken == fleetP {
				break
			}
			if time.Since(killed) > 10*fleetTTL {
				t.Fatalf("injection %d: partitions not reassigned in %v: %v", i, 10*fleetTTL, hs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		worst = max(worst, time.Since(killed))
	}
	f.stopAll()
	most, _ := f.window(time.Time{}, time.Now())
	renew := fleetTTL / 3
	t.Logf("killed holder × %d: reassigned within %v at worst (TTL + renew = %v); most in a 1 s window %d (bound %d)", injections(), worst, fleetTTL+renew, most, fleetBound)
	if worst > fleetTTL+renew+100*time.Millisecond {
		t.Errorf("reassigned after %v > TTL + renew interval %v (+100 ms for the poll and the round trip)", worst, fleetTTL+renew)
	}
	if most > fleetBound {
		t.Errorf("%d arrivals in one second > L + B = %d", most, fleetBound)
	}
}

// The negative control: naive holders (trusting a lease until Redis says
// otherwise) in the same harness break the bound when one is cut off.
func TestFleetNaiveHolderExceeds(t *testing.T) {
	f := newFleet(t)
	var cs []*child
	for _, m := range []string{"a", "b", "c"} {
		cs = append(cs, f.start(m, 0, true))
	}
	time.Sleep(settle)
	cs[0].proxy.setCut(true)
	time.Sleep(2500 * time.Millisecond)
	cs[0].proxy.setCut(false)
	time.Sleep(fleetTTL)
	f.stopAll()
	most, _ := f.window(time.Time{}, time.Now())
	t.Logf("naive, one cut 2.5 s: most in a 1 s window %d (bound %d)", most, fleetBound)
	if most <= fleetBound {
		t.Errorf("the naive fleet stayed within L + B (%d ≤ %d): this harness cannot tell a safe holder from a naive one", most, fleetBound)
	}
}

// A regional partition: two "regions" (a, b and c, d) share the limit;
// region one loses its link to Redis for 3 TTLs. It stops spending at its
// local deadlines (a relay's policy for what it decides alone is to send
// nothing: share 0); region two takes the lapsed partitions after the
// quarantine; the bound holds throughout; region one's partitions come
// back within one TTL of the link's return.
func TestFleetRegionalPartition(t *testing.T) {
	f := newFleet(t)
	var r1 []*child
	for _, m := range []string{"r1a", "r1b"} {
		r1 = append(r1, f.start(m, 0, false))
	}
	for _, m := range []string{"r2a", "r2b"} {
		f.start(m, 0, false)
	}
	time.Sleep(settle)
	count := func(prefix string) int {
		n := 0
		for _, m := range f.holders() {
			if strings.HasPrefix(m, prefix) {
				n++
			}
		}
		return n
	}
	before := count("r1")
	cut := time.Now()
	for _, c := range r1 {
		c.proxy.setCut(true)
	}
	time.Sleep(3 * fleetTTL)
	during := count("r2")
	for _, c := range r1 {
		c.proxy.setCut(false)
	}
	mended := time.Now()
	var back time.Duration
	for {
		if count("r1") > 0 {
			back = time.Since(mended)
			break
		}
		if time.Since(mended) > 5*fleetTTL {
			t.Fatalf("region one holds nothing %v after the link returned", 5*fleetTTL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2 * fleetTTL)
	f.stopAll()
	_, rate := f.window(cut.Add(2*fleetTTL), mended)
	allMost, _ := f.window(time.Time{}, time.Now())
	// Region one spends nothing past its local deadlines (TTL after its
	// last renew was sent, so at most TTL after the cut; 100 ms for the
	// deliveries already on the wire).
	late := 0
	f.mu.Lock()
	for i, at := range f.arrivals {
		if strings.HasPrefix(f.who[i], "r1") && at.After(cut.Add(fleetTTL+100*time.Millisecond)) && at.Before(mended) {
			late++
		}
	}
	f.mu.Unlock()
	if late > 0 {
		t.Errorf("region one sent %d requests after its local deadlines, while cut off", late)
	}
	t.Logf("regional: region one held %d of %d before the cut; region two held %d at the end of the cut; rate during the cut's last TTL %.1f/s; region one's partitions back %v after the link returned; most in a 1 s window %d (bound %d); per relay %v", before, fleetP, during, rate, back, allMost, fleetBound, f.from)
	if during != fleetP {
		t.Errorf("region two held %d partitions after 3 TTLs of the cut, want all %d", during, fleetP)
	}
	if back > fleetTTL {
		t.Errorf("region one's partitions came back after %v > one TTL", back)
	}
	if allMost > fleetBound {
		at, by := f.peak()
		t.Errorf("%d arrivals in one second > L + B = %d: from %v after the cut (mended %v after it): %v", allMost, fleetBound, at.Sub(cut), mended.Sub(cut), by)
	}
}

// The two coordination modes side by side in the same harness: leased
// partitions and one shared bucket (redisbucket, slices of L × 100 ms),
// steady, uneven (80/10/10) and with one process cut from Redis for 2.5 s.
// The figures go to docs/BENCHMARKS.md; the shared bucket is held to its
// own documented bound, B + L + N × slice in a second.
func TestFleetModes(t *testing.T) {
	if os.Getenv("SLUICE_FLEET_MODES") == "" {
		t.Skip("a comparison for docs/BENCHMARKS.md: make bench-fleet")
	}
	type row struct {
		mode, load string
		rate       float64
		most       int
		calls      float64 // Redis calls per second per process
	}
	var rows []row
	for _, bucket := range []bool{false, true} {
		mode := "leases"
		if bucket {
			mode = "bucket"
		}
		for _, load := range []string{"steady", "uneven", "cut"} {
			f := newFleet(t)
			offered := map[string]float64{"a": 0, "b": 0, "c": 0}
			if load == "uneven" {
				offered = map[string]float64{"a": 0.8 * fleetL, "b": 0.1 * fleetL, "c": 0.1 * fleetL}
			}
			var cs []*child
			for _, m := range []string{"a", "b", "c"} {
				cs = append(cs, f.startMode(m, offered[m], false, bucket))
			}
			time.Sleep(settle + fleetTTL)
			from, calls := time.Now(), f.evalCalls()
			if load == "cut" {
				cs[0].proxy.setCut(true)
				time.Sleep(2500 * time.Millisecond)
				cs[0].proxy.setCut(false)
				time.Sleep(2500 * time.Millisecond)
			} else {
				time.Sleep(5 * time.Second)
			}
			to, calls := time.Now(), f.evalCalls()-calls
			f.stopAll()
			most, rate := f.window(from, to)
			r := row{mode, load, rate, most, float64(calls) / 3 / to.Sub(from).Seconds()}
			rows = append(rows, r)
			bound := fleetBound
			if bucket {
				bound += 3 * int(fleetL/10)
			}
			if most > bound {
				t.Errorf("%s %s: %d in one second > %d", mode, load, most, bound)
			}
		}
	}
	t.Log("| mode | load | admitted/s (% of L) | most in 1 s (L + B = 440) | Redis calls/s per process |")
	for _, r := range rows {
		t.Logf("| %s | %s | %.1f (%.1f %%) | %d | %.1f |", r.mode, r.load, r.rate, 100*r.rate/fleetL, r.most, r.calls)
	}
}
