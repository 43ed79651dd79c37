package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
