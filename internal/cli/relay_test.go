package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/redisstore"
)

// relayAPIAddr reads the API's address from the relay's "relay running"
// line.
var relayAPIAddr = regexp.MustCompile(`"api":"([^"]+)"`)

// keyCounter is a target that counts each Idempotency-Key it receives.
type keyCounter struct {
	mu    sync.Mutex
	sends int
	keys  map[string]int
}

func (k *keyCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	k.mu.Lock()
	k.sends++
	k.keys[r.Header.Get("Idempotency-Key")]++
	k.mu.Unlock()
	_, _ = w.Write([]byte("ok"))
}

func (k *keyCounter) counts() (sends, distinct int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sends, len(k.keys)
}

func writeRelayConfig(t *testing.T, dir, origin string, rate int) string {
	t.Helper()
	cfg := filepath.Join(dir, "relay.yaml")
	body := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
store:
  bolt:
    dir: %s
targets:
  - name: api
    origin: %s
    allow: [127.0.0.0/8]
    limits:
      - {name: per_second, quota: %d, window: 1s}
queues:
  - {name: records, target: api}
`, filepath.Join(dir, "data"), origin, rate)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startRelay starts sluice relay as a child and returns it with its API's
// base URL.
func startRelay(t *testing.T, cfg, token string) (*processHandle, string) {
	t.Helper()
	t.Setenv(relayTokenEnv, token)
	cmd, lines := sluiceProcess(t, "relay", "--config", cfg)
	line := waitLine(t, lines, `"msg":"relay running"`)
	m := relayAPIAddr.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no API address in %s", line)
	}
	go func() {
		for range lines {
		}
	}()
	return &processHandle{cmd.Process.Pid, cmd.Wait}, "http://" + m[1]
}

type processHandle struct {
	pid  int
	wait func() error
}

func (p *processHandle) kill(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.wait()
}

// TestRelaySurvivesSIGKILL is the seed's scenario with a restart: 10,000
// records accepted, the relay killed with SIGKILL twice during the run
// and restarted: every record delivered, at most 10,100 sends, and every
// duplicate with the same Idempotency-Key.
func TestRelaySurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("an end-to-end run of several seconds")
	}
	const records, rate = 10000, 1000
	kc := &keyCounter{keys: map[string]int{}}
	target := httptest.NewServer(kc)
	defer target.Close()
	dir := t.TempDir()
	cfg := writeRelayConfig(t, dir, target.URL, rate)
	token := "relay-test-token-0123456789"
	p, api := startRelay(t, cfg, token)

	// Enqueue the 10,000 records as NDJSON batches of 1,000.
	for i := 0; i < records; i += 1000 {
		var b bytes.Buffer
		for j := i; j < i+1000; j++ {
			fmt.Fprintf(&b, `{"path":"/records/%d","json":{"n":%d},"key":"record-%d"}`+"\n", j, j, j)
		}
		req, _ := http.NewRequest("POST", api+"/v1/queues/records/tasks", &b)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
		}
	}
	waitSends := func(n int, within time.Duration) {
		t.Helper()
		end := time.Now().Add(within)
		for {
			if _, distinct := kc.counts(); distinct >= n {
				return
			}
			if time.Now().After(end) {
				sends, distinct := kc.counts()
				t.Fatalf("%d distinct records of %d after %v (%d sends)", distinct, n, within, sends)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitSends(records*3/10, 30*time.Second)
	p.kill(t)
	p, _ = startRelay(t, cfg, token)
	waitSends(records*6/10, 30*time.Second)
	p.kill(t)
	p, api = startRelay(t, cfg, token)
	waitSends(records, 60*time.Second)
	time.Sleep(200 * time.Millisecond) // a last in-flight duplicate, if any
	sends, distinct := kc.counts()
	kc.mu.Lock()
	dups := 0
	for key, n := range kc.keys {
		if !strings.HasPrefix(key, "record-") {
			t.Errorf("a send without its record's key: %q", key)
		}
		dups += n - 1
	}
	kc.mu.Unlock()
	t.Logf("%d records, 2 SIGKILLs: %d distinct delivered, %d sends, %d duplicates (each with its record's Idempotency-Key)", records, distinct, sends, dups)
	if distinct != records {
		t.Errorf("%d records delivered, want %d", distinct, records)
	}
	if sends > records+100 {
		t.Errorf("%d sends, want at most %d", sends, records+100)
	}
	// The queue agrees: nothing left, all succeeded.
	req, _ := http.NewRequest("GET", api+"/v1/queues/records", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	var stats struct {
		Depth, Succeeded int64
	}
	for end := time.Now().Add(10 * time.Second); ; {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&stats)
		resp.Body.Close()
		if stats.Depth == 0 && stats.Succeeded == records || time.Now().After(end) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if stats.Depth != 0 || stats.Succeeded != records {
		t.Errorf("queue after the run: depth %d, succeeded %d", stats.Depth, stats.Succeeded)
	}
	if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Errorf("SIGTERM: %v, want a graceful exit", err)
	}
}

// TestRelayReloads: SIGHUP and a change of the file reload the relay; a
// bad file is refused with its line and the running configuration kept.
func TestRelayReloads(t *testing.T) {
	dir := t.TempDir()
	target := httptest.NewServer(&keyCounter{keys: map[string]int{}})
	defer target.Close()
	cfg := writeRelayConfig(t, dir, target.URL, 50)
	t.Setenv(relayTokenEnv, "relay-test-token-0123456789")
	cmd, lines := sluiceProcess(t, "relay", "--config", cfg)
	waitLine(t, lines, `"msg":"relay running"`)
	data, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, bytes.Replace(data, []byte("quota: 50"), []byte("quota: 80"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	waitLine(t, lines, `"msg":"relay: configuration reloaded"`)
	if err := os.WriteFile(cfg, bytes.Replace(data, []byte("quota: 50"), []byte("quota: -1"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	line := waitLine(t, lines, `"msg":"relay: configuration refused; the running one is kept"`)
	if !strings.Contains(line, "relay.yaml:11:") {
		t.Errorf("refusal without the file's line: %s", line)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLine(t, lines, `"msg":"relay: configuration refused; the running one is kept"`)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}

// fenceRecorder is a target that records the Sluice-Lease-Epoch header of
// each request, by the task's Idempotency-Key.
type fenceRecorder struct {
	mu     sync.Mutex
	fences map[string][]string // Idempotency-Key → the header of each send
}

func (f *fenceRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	f.fences[r.Header.Get("Idempotency-Key")] = append(f.fences[r.Header.Get("Idempotency-Key")], r.Header.Get(lease.FenceHeader))
	f.mu.Unlock()
	_, _ = w.Write([]byte("ok"))
}

func (f *fenceRecorder) received() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.fences)
}

// writeFleetConfig writes a relay's file sharing api's per_second with
// the relays of the same Redis and prefix.
func writeFleetConfig(t *testing.T, dir, origin, redis, prefix string) string {
	t.Helper()
	cfg := filepath.Join(dir, "relay.yaml")
	body := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
store:
  bolt:
    dir: %s
fleet:
  redis: {addrs: ['%s']}
  prefix: '%s'
targets:
  - name: api
    origin: %s
    allow: [127.0.0.0/8]
    limits:
      - {name: per_second, quota: 200, window: 1s, burst: 20}
    fleet: {partitions: 4, ttl: 500ms}
queues:
  - {name: records, target: api}
`, filepath.Join(dir, "data"), redis, prefix, origin)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// enqueueRecords posts n tasks whose keys are name-0 … name-(n-1).
func enqueueRecords(t *testing.T, api, token, name string, n int) {
	t.Helper()
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"path":"/records/%d","key":"%s-%d"}`+"\n", i, name, i)
	}
	req, _ := http.NewRequest("POST", api+"/v1/queues/records/tasks", &b)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
}

// fleetRelay is a sluice relay child sharing a limit.
type fleetRelay struct {
	cmd          *exec.Cmd
	lines        <-chan string
	api, admin   string
	member, name string
}

func startFleetRelay(t *testing.T, name, cfg string) *fleetRelay {
	t.Helper()
	cmd, lines := sluiceProcess(t, "relay", "--config", cfg)
	line := waitLine(t, lines, `"msg":"relay running"`)
	r := &fleetRelay{cmd: cmd, lines: lines, name: name}
	for _, f := range []struct {
		re  *regexp.Regexp
		dst *string
	}{{relayAPIAddr, &r.api}, {regexp.MustCompile(`"admin":"([^"]+)"`), &r.admin}, {regexp.MustCompile(`"fleet_member":"([^"]+)"`), &r.member}} {
		m := f.re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s: no %v in %s", name, f.re, line)
		}
		*f.dst = m[1]
	}
	r.api, r.admin = "http://"+r.api, "http://"+r.admin
	if !strings.Contains(line, `"fleet_groups":"api:relay.api.per_second"`) {
		t.Fatalf("%s: the running line does not name the lease group: %s", name, line)
	}
	return r
}

// stop sends SIGTERM and waits for a graceful exit.
func (r *fleetRelay) stop(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitLine(t, r.lines, `"msg":"relay stopped"`)
	go func() {
		for range r.lines {
		}
	}()
	if err := r.cmd.Wait(); err != nil {
		t.Errorf("%s: SIGTERM: %v, want a graceful exit", r.name, err)
	}
}

// TestRelayFleet: two relays share api's per_second through Redis. Every
// task reaches the target with a fence (Sluice-Lease-Epoch) of the lease
// group relay.api.per_second, no partition's epoch is spent by both
// relays, a reload keeps the share (and refuses a change of the fleet
// settings), the relay exports its leases on /metrics, and after SIGTERM
// both have given every partition back: Redis's holders hash is empty.
func TestRelayFleet(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := fmt.Sprintf("sluicetest:relayfleet:%d:", time.Now().UnixNano())
	rec := &fenceRecorder{fences: map[string][]string{}}
	target := httptest.NewServer(rec)
	defer target.Close()
	const token = "relay-test-token-0123456789"
	t.Setenv(relayTokenEnv, token)
	cfgA := writeFleetConfig(t, t.TempDir(), target.URL, addr, prefix)
	a := startFleetRelay(t, "a", cfgA)
	b := startFleetRelay(t, "b", writeFleetConfig(t, t.TempDir(), target.URL, addr, prefix))
	if a.member == b.member {
		t.Fatalf("both relays are member %s: a random member is new at each start", a.member)
	}
	const n = 40
	enqueueRecords(t, a.api, token, "a", n)
	enqueueRecords(t, b.api, token, "b", n)
	waitDelivered := func(want int) map[string][]string {
		t.Helper()
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got := rec.received()
			if len(got) == want {
				return got
			}
			if time.Now().After(end) {
				t.Fatalf("%d of %d tasks delivered in 30 s", len(got), want)
			}
		}
	}
	waitDelivered(2 * n)

	// A reload that keeps the fleet settings keeps the share (the next
	// tasks still carry fences); one that changes them is refused.
	data, err := os.ReadFile(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgA, bytes.Replace(data, []byte("    fleet:"), []byte("    timeout: 5s\n    fleet:"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	waitLine(t, a.lines, `"msg":"relay: configuration reloaded"`)
	for _, change := range [][2]string{{"ttl: 500ms", "ttl: 1s"}, {"quota: 200", "quota: 160"}} {
		if err := os.WriteFile(cfgA, bytes.Replace(data, []byte(change[0]), []byte(change[1]), 1), 0o600); err != nil {
			t.Fatal(err)
		}
		if line := waitLine(t, a.lines, `"msg":"relay: configuration refused; the running one is kept"`); !strings.Contains(line, "the fleet settings changed") {
			t.Errorf("%s → %s: refusal without its reason: %s", change[0], change[1], line)
		}
	}
	enqueueRecords(t, a.api, token, "c", 10)
	got := waitDelivered(2*n + 10)
	spentBy := map[lease.Grant]string{} // a partition under an epoch → the relay that spent it
	for key, fences := range got {
		relay, _, _ := strings.Cut(key, "-")
		if relay == "c" { // enqueued on a after the reloads
			relay = "a"
		}
		for _, v := range fences {
			s, err := lease.ParseFence(v)
			if err != nil {
				t.Fatalf("task %s: %s: %q: %v", key, lease.FenceHeader, v, err)
			}
			if s.Group != "relay.api.per_second" || s.Partition >= 4 {
				t.Fatalf("task %s: fence %q: want group relay.api.per_second, partition 0 to 3", key, v)
			}
			if other, ok := spentBy[s.Grant]; ok && other != relay {
				t.Fatalf("partition %d under epoch %d spent by relays %s and %s", s.Partition, s.Epoch, other, relay)
			}
			spentBy[s.Grant] = relay
		}
	}
	t.Logf("%d tasks delivered with fences of %d (partition, epoch) leases", len(got), len(spentBy))

	req, _ := http.NewRequest("GET", a.admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, metricsText)
	}
	resp.Body.Close()
	for _, series := range []string{`sluice_lease_partitions_held{limit="relay.api.per_second"}`, `sluice_lease_acquired_total{limit="relay.api.per_second"}`} {
		if !bytes.Contains(metricsText, []byte(series)) {
			t.Errorf("/metrics has no %s", series)
		}
	}

	holders := prefix + "{relay.api.per_second}:holders"
	if h := hlen(t, addr, holders); h == 0 {
		t.Fatalf("HLEN %s = 0 while the relays run: the leases are not in Redis", holders)
	}
	a.stop(t)
	b.stop(t)
	if h := hlen(t, addr, holders); h != 0 {
		t.Errorf("HLEN %s = %d after both relays stopped, want 0: partitions not given back", holders, h)
	}
}

// TestRelayFleetRedisDown: a relay whose fleet Redis is down at start
// starts anyway, says so once, holds nothing and sends nothing; once
// Redis answers, its tasks are delivered.
func TestRelayFleetRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Kill()
	rec := &fenceRecorder{fences: map[string][]string{}}
	target := httptest.NewServer(rec)
	defer target.Close()
	const token = "relay-test-token-0123456789"
	t.Setenv(relayTokenEnv, token)
	cmd, lines := sluiceProcess(t, "relay", "--config", writeFleetConfig(t, t.TempDir(), target.URL, srv.Addr(), "sluicetest:down:"))
	waitLine(t, lines, `"msg":"relay: the fleet's Redis does not answer yet`)
	m := relayAPIAddr.FindStringSubmatch(waitLine(t, lines, `"msg":"relay running"`))
	if m == nil {
		t.Fatal("no API address")
	}
	enqueueRecords(t, "http://"+m[1], token, "t", 5)
	time.Sleep(time.Second) // a window in which nothing may be sent
	if got := rec.received(); len(got) != 0 {
		t.Fatalf("%d tasks sent without a lease", len(got))
	}
	srv.Start()
	for end := time.Now().Add(20 * time.Second); len(rec.received()) < 5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d of 5 tasks delivered 20 s after Redis came up", len(rec.received()))
		}
	}
	waitLine(t, lines, `"msg":"lease: coordinator reachable again"`)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}

// hlen is HLEN key on the Redis at addr.
func hlen(t *testing.T, addr, key string) int64 {
	t.Helper()
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := conn.Eval(ctx, "return {redis.call('HLEN', KEYS[1])}", []string{key}, nil)
	if err != nil || len(r) != 1 {
		t.Fatalf("HLEN %s: %v, %v", key, r, err)
	}
	return r[0]
}

// TestCheckRelayFleet: sluice check describes the fleet settings of a
// relay file, and refuses one whose Redis password file is missing, with
// its line.
func TestCheckRelayFleet(t *testing.T) {
	t.Parallel()
	code, out, errOut := run("check", "../../examples/relay-fleet.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"examples/relay-fleet.yaml: ok (1 targets, 2 queues, bolt ./sluice-relay-data store, for sluice relay)",
		"  fleet: redis 127.0.0.1:6379, password: none, clear text; key prefix sluice:lease:; member random at each start; 1 target(s) share a limit",
		"    fleet: per_second shared as lease group relay.demo.per_second: 8 partitions of 6.25 per 1s (burst 6.25), ttl 2s, renew 666ms, drift 100ms",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no line %q in\n%s", want, out)
		}
	}
	dir := t.TempDir()
	cfg := writeFleetConfig(t, dir, "http://127.0.0.1:9", "127.0.0.1:6379", "p:")
	data, _ := os.ReadFile(cfg)
	data = bytes.Replace(data, []byte("redis: {addrs: ['127.0.0.1:6379']}"), []byte("redis: {addrs: ['127.0.0.1:6379'], password_file: "+filepath.Join(dir, "missing")+"}"), 1)
	if err := os.WriteFile(cfg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run("check", cfg); code != 1 || !strings.Contains(errOut, "relay.yaml:7: fleet.redis.password_file") {
		t.Fatalf("exit %d: %s (want 1, at line 7, naming fleet.redis.password_file)", code, errOut)
	}
}
