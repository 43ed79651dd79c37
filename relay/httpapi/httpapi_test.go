package httpapi_test

import (
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
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/relay/httpapi"
)

const token = "api-test-token-0123456789"

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// api is a relay (not running: acceptance only unless run) behind the API.
type api struct {
	*httptest.Server
	r      *relay.Relay
	target *httptest.Server
}

func newAPI(t *testing.T, open func(context.Context, string) (queue.Queue, error)) *api {
	t.Helper()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(target.Close)
	if open == nil {
		dir := t.TempDir()
		open = func(_ context.Context, name string) (queue.Queue, error) {
			return boltqueue.Open(filepath.Join(dir, name+".db"), boltqueue.Options{Logger: quiet()})
		}
	}
	r, err := relay.New(context.Background(), relay.Options{
		Targets: []relay.Target{{Name: "api", Origin: target.URL, Allow: loopback}},
		Queues:  []relay.Queue{{Name: "jobs", Target: "api", MaxBody: 1024}},
		Open:    open,
		Logger:  quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	srv := httptest.NewServer(httpapi.New(r, httpapi.Options{Token: token, MaxBatch: 100, MaxBatchBytes: 64 << 10, Logger: quiet()}))
	t.Cleanup(srv.Close)
	return &api{Server: srv, r: r, target: target}
}

func (a *api) do(t *testing.T, method, path, contentType, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, a.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, resp.Header
}

func (a *api) depth(t *testing.T) int64 {
	t.Helper()
	time.Sleep(1100 * time.Millisecond) // figures are read at most once a second
	s, err := a.r.Stats(context.Background(), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	return s.Depth
}

func TestAuth(t *testing.T) {
	a := newAPI(t, nil)
	for _, h := range []string{"", "Bearer wrong-token-0123456789", "Basic " + token} {
		req, _ := http.NewRequest("GET", a.URL+"/v1/queues", nil)
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", h, resp.StatusCode)
		}
	}
	off := httptest.NewServer(httpapi.New(a.r, httpapi.Options{}))
	defer off.Close()
	resp, err := http.Get(off.URL + "/v1/queues")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("no token configured: %d, want 403", resp.StatusCode)
	}
}

// TestEnqueueForms: one task, a JSON array, NDJSON; ids, Location, the
// task's view.
func TestEnqueueForms(t *testing.T) {
	a := newAPI(t, nil)
	code, out, h := a.do(t, "POST", "/v1/queues/jobs/tasks", "application/json", `{"path":"/a","json":{"x":1},"key":"k1","timeout":"1h"}`)
	if code != 202 || h.Get("Location") != "/v1/tasks/"+out["id"].(string) || !strings.HasPrefix(out["id"].(string), "jobs.") {
		t.Fatalf("one task: %d %v %v", code, out, h)
	}
	code, task, _ := a.do(t, "GET", h.Get("Location"), "", "")
	if code != 200 || task["state"] != "queued" || task["key"] != "k1" || task["method"] != "POST" || !strings.HasSuffix(task["url"].(string), "/a") || task["deadline"] == nil {
		t.Fatalf("task: %d %v", code, task)
	}
	code, out, _ = a.do(t, "POST", "/v1/queues/jobs/tasks", "", `[{"path":"/b"},{"url":"`+a.target.URL+`/c","method":"PUT","body":"text"}]`)
	if code != 202 || len(out["tasks"].([]any)) != 2 {
		t.Fatalf("array: %d %v", code, out)
	}
	code, out, _ = a.do(t, "POST", "/v1/queues/jobs/tasks", "application/x-ndjson", "{\"path\":\"/d\"}\n\n{\"path\":\"/a\",\"key\":\"k1\",\"json\":{\"x\":1}}\n")
	tasks, _ := out["tasks"].([]any)
	if code != 202 || len(tasks) != 2 || tasks[1].(map[string]any)["duplicate"] != nil && tasks[1].(map[string]any)["duplicate"] != true {
		t.Fatalf("ndjson: %d %v", code, out)
	}
	if d := a.depth(t); d != 4 {
		t.Fatalf("depth %d, want 4", d)
	}
	// The same key with another request: 409, naming the line.
	code, out, _ = a.do(t, "POST", "/v1/queues/jobs/tasks", "application/x-ndjson", "{\"path\":\"/f\"}\n{\"path\":\"/other\",\"key\":\"k1\"}\n")
	if code != 409 || out["line"] != 2.0 || out["field"] != "key" {
		t.Fatalf("a key conflict: %d %v", code, out)
	}
}

// TestBadInput is the table of refusals: status, line and field, and the
// batch refused whole (nothing stored).
func TestBadInput(t *testing.T) {
	a := newAPI(t, nil)
	big := strings.Repeat("x", 2000)
	cases := []struct {
		name, path, ct, body string
		status, line         int
		field                string
	}{
		{"not JSON", "/v1/queues/jobs/tasks", "application/json", `{"path":`, 400, 1, ""},
		{"unknown field", "/v1/queues/jobs/tasks", "application/json", `{"path":"/a","bogus":1}`, 400, 1, "bogus"},
		{"wrong kind", "/v1/queues/jobs/tasks", "application/json", `{"path":"/a","cost":"x"}`, 400, 1, "cost"},
		{"ndjson refusal on its physical line", "/v1/queues/jobs/tasks", "application/x-ndjson", "{\"path\":\"/a\"}\n\n\n{\"url\":\"http://example.com/\"}\n", 403, 4, "url"},
		{"ndjson bad line 3", "/v1/queues/jobs/tasks", "application/x-ndjson", "{\"path\":\"/a\"}\n{\"path\":\"/b\"}\nnope\n", 400, 3, ""},
		{"array bad 2nd", "/v1/queues/jobs/tasks", "", `[{"path":"/a"},{"path":"/b","delay":"soon"}]`, 400, 2, "delay"},
		{"unknown queue", "/v1/queues/nope/tasks", "", `{"path":"/a"}`, 404, 0, ""},
		{"another origin", "/v1/queues/jobs/tasks", "", `[{"path":"/a"},{"url":"http://169.254.169.254/latest/meta-data"}]`, 403, 2, "url"},
		{"Host header", "/v1/queues/jobs/tasks", "", `[{"path":"/a","headers":{"Host":"evil"}}]`, 403, 1, "header"},
		{"body over the queue's bound", "/v1/queues/jobs/tasks", "", `[{"path":"/a"},{"path":"/b","body":"` + big + `"}]`, 413, 2, "body"},
		{"deadline past", "/v1/queues/jobs/tasks", "", `{"path":"/a","deadline":"2020-01-01T00:00:00Z"}`, 400, 1, "deadline"},
		{"two bodies", "/v1/queues/jobs/tasks", "", `{"path":"/a","body":"x","json":{}}`, 400, 1, "body"},
		{"too many", "/v1/queues/jobs/tasks", "", "[" + strings.TrimSuffix(strings.Repeat(`{"path":"/a"},`, 101), ",") + "]", 413, 0, ""},
		{"too many bytes", "/v1/queues/jobs/tasks", "", `{"path":"/a","body":"` + strings.Repeat("y", 70<<10) + `"}`, 413, 0, ""},
		{"content type", "/v1/queues/jobs/tasks", "text/plain", `{"path":"/a"}`, 415, 0, ""},
		{"empty", "/v1/queues/jobs/tasks", "", ``, 400, 0, ""},
		{"unknown route", "/v1/nothing", "", ``, 404, 0, ""},
	}
	for _, c := range cases {
		code, out, _ := a.do(t, "POST", c.path, c.ct, c.body)
		line, _ := out["line"].(float64)
		field, _ := out["field"].(string)
		if code != c.status || int(line) != c.line || field != c.field || out["error"] == "" {
			t.Errorf("%s: %d %v, want %d line %d field %q", c.name, code, out, c.status, c.line, c.field)
		}
	}
	if code, _, _ := a.do(t, "GET", "/v1/tasks/jobs.ffffffffffffffff", "", ""); code != 404 {
		t.Errorf("unknown task: %d", code)
	}
	if code, _, _ := a.do(t, "GET", "/v1/tasks/nodot", "", ""); code != 400 {
		t.Errorf("malformed task ID: %d", code)
	}
	if d := a.depth(t); d != 0 {
		t.Fatalf("refused batches stored %d tasks", d)
	}
	// A replay of a task that is not dead, a cancel of a finished one: 409.
	_, out, _ := a.do(t, "POST", "/v1/queues/jobs/tasks", "", `{"path":"/a"}`)
	id := out["id"].(string)
	if code, out, _ := a.do(t, "POST", "/v1/tasks/"+id+"/replay", "", ""); code != 409 {
		t.Errorf("replay of a queued task: %d %v", code, out)
	}
	if code, _, _ := a.do(t, "DELETE", "/v1/tasks/"+id, "", ""); code != 200 {
		t.Errorf("cancel: %d", code)
	}
	if code, _, _ := a.do(t, "DELETE", "/v1/tasks/"+id, "", ""); code != 409 {
		t.Errorf("cancel of a cancelled task: %d", code)
	}
	// Limits through the API.
	if code, out, _ := a.do(t, "PUT", "/v1/targets/api/limits", "", `{"limits":[{"name":"s","quota":5,"window":"1s"}]}`); code != 200 || out["source"] != "api" {
		t.Errorf("set limits: %d %v", code, out)
	}
	if code, _, _ := a.do(t, "PUT", "/v1/targets/api/limits", "", `{"limits":[{"name":"s","quota":-5,"window":"1s"}]}`); code != 400 {
		t.Errorf("a bad limit: %d", code)
	}
	if code, _, _ := a.do(t, "PUT", "/v1/targets/nope/limits", "", `{"limits":[]}`); code != 404 {
		t.Errorf("unknown target: %d", code)
	}
}

// TestFullDisk: a queue that cannot grow answers 503 and keeps nothing.
func TestFullDisk(t *testing.T) {
	dir := t.TempDir()
	a := newAPI(t, func(_ context.Context, name string) (queue.Queue, error) {
		return boltqueue.Open(filepath.Join(dir, name+".db"), boltqueue.Options{Logger: quiet(), MaxFileSize: 1 << 20})
	})
	var accepted int
	for i := range 200 {
		var b strings.Builder
		for j := range 50 {
			fmt.Fprintf(&b, `{"path":"/x/%d/%d","body":"%s"}`+"\n", i, j, strings.Repeat("z", 900))
		}
		code, out, _ := a.do(t, "POST", "/v1/queues/jobs/tasks", "application/x-ndjson", b.String())
		if code == 503 {
			if !strings.Contains(out["error"].(string), "cannot keep") {
				t.Fatalf("503 without its reason: %v", out)
			}
			if d := a.depth(t); d != int64(accepted) {
				t.Fatalf("after a full disk: depth %d, accepted %d", d, accepted)
			}
			return
		}
		if code != 202 {
			t.Fatalf("batch %d: %d %v", i, code, out)
		}
		accepted += 50
	}
	t.Fatal("the queue never filled its 1 MiB")
}

// TestNATSOutage: with the queue's NATS server gone, the API answers 503
// and accepts nothing.
func TestNATSOutage(t *testing.T) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("nats-server is not installed")
		}
		t.Skip("SKIPPED LOUDLY: nats-server is not installed")
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	for end := time.Now().Add(10 * time.Second); ; {
		nc, err := nats.Connect(url, nats.NoReconnect())
		if err == nil {
			nc.Close()
			break
		}
		if time.Now().After(end) {
			t.Fatalf("nats-server does not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a := newAPI(t, func(ctx context.Context, name string) (queue.Queue, error) {
		return jsqueue.Open(ctx, jsqueue.Options{URL: url, Name: name, Logger: quiet(), Timeout: time.Second})
	})
	if code, out, _ := a.do(t, "POST", "/v1/queues/jobs/tasks", "", `{"path":"/before"}`); code != 202 {
		t.Fatalf("before the outage: %d %v", code, out)
	}
	_ = cmd.Process.Kill()
	<-done
	code, out, _ := a.do(t, "POST", "/v1/queues/jobs/tasks", "", `[{"path":"/a"},{"path":"/b"}]`)
	if code != 503 {
		t.Fatalf("during the outage: %d %v, want 503", code, out)
	}
}

// TestBatchesReadAtOnceAreBounded: batches being read hold their bytes;
// past two of the largest, a batch waits, then is refused with 503 and
// Retry-After (an attacker probe held 1.9 GB with 16 batches of 32 MiB).
func TestBatchesReadAtOnceAreBounded(t *testing.T) {
	a := newAPI(t, nil) // MaxBatchBytes 64 KiB
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", a.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/queues/jobs/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n[", token, 64<<10)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond) // both are in the handler, reading
	code, out, h := a.do(t, "POST", "/v1/queues/jobs/tasks", "", `{"path":"/a"}`)
	if code != 503 || h.Get("Retry-After") == "" || !strings.Contains(out["error"].(string), "large batches") {
		t.Fatalf("a third batch while two of the largest are read: %d %v %v", code, out, h)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	time.Sleep(100 * time.Millisecond)
	if code, out, _ := a.do(t, "POST", "/v1/queues/jobs/tasks", "", `{"path":"/a"}`); code != 202 {
		t.Fatalf("once they are gone: %d %v", code, out)
	}
}
