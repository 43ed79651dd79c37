package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/relay/httpapi"
)

// testRelayToken is the API token of the tests' relays.
const testRelayToken = "enqueue-test-token-0123456789"

// testRelay is a real relay (bbolt queues in a temporary directory, one
// queue "jobs" for a target on 127.0.0.1) behind its real HTTP API on
// 127.0.0.1. It is not run: the tests need acceptance, not delivery.
type testRelay struct {
	r         *relay.Relay
	q         queue.Queue // the queue jobs' backend, for counts fresher than the relay's
	url       string      // the API's base URL
	tokenFile string
	posts     atomic.Int64 // POSTs of tasks that reached the API's server
}

// newTestRelay starts a relay with the API's options o; wrap, if not
// nil, stands in front of the API (a proxy that fails, a test signal).
func newTestRelay(t *testing.T, o httpapi.Options, wrap func(http.Handler) http.Handler) *testRelay {
	t.Helper()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(target.Close)
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr := &testRelay{tokenFile: filepath.Join(dir, "token")}
	r, err := relay.New(context.Background(), relay.Options{
		Targets: []relay.Target{{Name: "api", Origin: target.URL, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}},
		Queues:  []relay.Queue{{Name: "jobs", Target: "api"}},
		Open: func(_ context.Context, name string) (queue.Queue, error) {
			q, err := boltqueue.Open(filepath.Join(dir, name+".db"), boltqueue.Options{Logger: log})
			tr.q = q
			return q, err
		},
		Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	tr.r = r
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("relay Close: %v", err)
		}
	})
	o.Token, o.Logger = testRelayToken, log
	if err := os.WriteFile(tr.tokenFile, []byte(testRelayToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var h http.Handler = httpapi.New(r, o)
	if wrap != nil {
		h = wrap(h)
	}
	api := h
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/tasks") {
			tr.posts.Add(1)
		}
		api.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	tr.url = srv.URL
	return tr
}

// depth is the number of tasks in the queue, read from its backend (the
// relay's Stats may be a second old).
func (tr *testRelay) depth(t *testing.T) int64 {
	t.Helper()
	s, err := tr.q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.Depth
}

// args are sluice enqueue's arguments for path, with more flags.
func (tr *testRelay) args(path string, more ...string) []string {
	return append([]string{"enqueue", "--relay", tr.url, "--queue", "jobs", "--token-file", tr.tokenFile, path}, more...)
}

// writeTasks writes a file of n tasks, line i (from 1) replaced by
// lines[i] when there is one, and returns its path.
func writeTasks(t *testing.T, n int, lines map[int]string) string {
	t.Helper()
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if l, ok := lines[i]; ok {
			b.WriteString(l + "\n")
			continue
		}
		fmt.Fprintf(&b, `{"path":"/items/%d","json":{"n":%d}}`+"\n", i, i)
	}
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runContext(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// runStdin runs sluice with in as its standard input.
func runStdin(in string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut)
	root.SetIn(strings.NewReader(in))
	root.SetArgs(longFlags(root, args))
	cmd, err := root.ExecuteContextC(context.Background())
	code = report(cmd, err, &errOut)
	return code, out.String(), errOut.String()
}

// summary is the last line of a load's output.
func summary(path string, accepted, already, refused int) string {
	return fmt.Sprintf("%s: %d accepted, %d already there, %d refused\n", path, accepted, already, refused)
}

// A file of 2,000 lines goes in, 500 a POST; loaded again, it adds
// nothing: every line is already there.
func TestEnqueueLoadsThenAddsNothingTwice(t *testing.T) {
	t.Parallel()
	tr := newTestRelay(t, httpapi.Options{}, nil)
	path := writeTasks(t, 2000, nil)
	code, out, errOut := run(tr.args(path)...)
	if code != 0 || out != summary(path, 2000, 0, 0) {
		t.Fatalf("first load: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := tr.posts.Load(); got != 4 {
		t.Errorf("%d POSTs; want 4 batches of 500", got)
	}
	if d := tr.depth(t); d != 2000 {
		t.Fatalf("depth %d after the first load; want 2000", d)
	}
	code, out, errOut = run(tr.args(path)...)
	if code != 0 || out != summary(path, 0, 2000, 0) {
		t.Fatalf("second load: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if d := tr.depth(t); d != 2000 {
		t.Fatalf("depth %d after the second load; want 2000", d)
	}
	// A copy elsewhere, under another name, is the same job.
	moved := filepath.Join(t.TempDir(), "renamed.jsonl")
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(moved, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run(tr.args(moved)...); code != 0 || out != summary(moved, 0, 2000, 0) {
		t.Fatalf("the file moved: exit %d, %q; want every line already there", code, out)
	}
}

// A load interrupted while the relay was storing a batch (its answer
// lost), then run again, ends with exactly the file's lines, none twice.
func TestEnqueueInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var posts atomic.Int64
	tr := newTestRelay(t, httpapi.Options{}, func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if posts.Add(1) != 4 {
				api.ServeHTTP(w, r)
				return
			}
			// The 4th batch is stored, but its client stops before the answer.
			api.ServeHTTP(httptest.NewRecorder(), r)
			cancel()
			<-r.Context().Done()
		})
	})
	path := writeTasks(t, 2000, nil)
	code, out, errOut := runContext(ctx, tr.args(path, "--batch", "200")...)
	if code != 1 || out != summary(path, 600, 0, 0) || !strings.Contains(errOut, "stopped at "+path+" line 601: interrupted") || !strings.Contains(errOut, "--from 601") {
		t.Fatalf("interrupted load: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if d := tr.depth(t); d != 800 {
		t.Fatalf("depth %d after the interruption; want 800 (4 batches stored)", d)
	}
	code, out, errOut = run(tr.args(path, "--batch", "200")...)
	if code != 0 || out != summary(path, 1200, 800, 0) {
		t.Fatalf("resumed load: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if d := tr.depth(t); d != 2000 {
		t.Fatalf("depth %d after resuming; want 2000", d)
	}
	// Every line's key is in, and nothing else: a third load finds all.
	if code, out, _ := run(tr.args(path)...); code != 0 || out != summary(path, 0, 2000, 0) {
		t.Fatalf("third load: exit %d, %q", code, out)
	}
}

// sluice enqueue killed (SIGKILL) while the relay stores a batch, then run
// again: the file's lines are in exactly once.
func TestEnqueueKilledThenResumed(t *testing.T) {
	t.Parallel()
	reached, killed, stored := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var posts atomic.Int64
	tr := newTestRelay(t, httpapi.Options{}, func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if posts.Add(1) != 3 {
				api.ServeHTTP(w, r)
				return
			}
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read the 3rd batch: %v", err)
				return
			}
			close(reached)
			<-killed
			// Stored after its client is gone.
			r2 := r.Clone(context.Background())
			r2.Body = io.NopCloser(bytes.NewReader(body))
			api.ServeHTTP(httptest.NewRecorder(), r2)
			close(stored)
		})
	})
	path := writeTasks(t, 2000, nil)
	cmd, _ := sluiceProcess(t, tr.args(path, "--batch", "200", "--quiet")...)
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the child sent no 3rd batch in 30 s")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	close(killed)
	<-stored
	if d := tr.depth(t); d != 600 {
		t.Fatalf("depth %d after the kill; want 600 (3 batches of 200)", d)
	}
	code, out, errOut := run(tr.args(path, "--batch", "200")...)
	if code != 0 || out != summary(path, 1400, 600, 0) {
		t.Fatalf("load after the kill: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if d := tr.depth(t); d != 2000 {
		t.Fatalf("depth %d; want 2000", d)
	}
	if code, out, _ := run(tr.args(path)...); code != 0 || out != summary(path, 0, 2000, 0) {
		t.Fatalf("third load: exit %d, %q", code, out)
	}
}

// Three bad lines — not JSON (refused here), a URL on another origin and
// a Host header (refused by the relay, 403) — are printed with their line
// numbers and reasons, and exit 1; every other line goes in, the good
// lines of a refused batch included.
func TestEnqueueRefusals(t *testing.T) {
	t.Parallel()
	tr := newTestRelay(t, httpapi.Options{}, nil)
	path := writeTasks(t, 30, map[int]string{
		5:  `not json`,
		13: `{"url":"https://elsewhere.example/x"}`,
		17: `{"path":"/x","headers":{"Host":"elsewhere.example"}}`,
	})
	code, out, errOut := run(tr.args(path, "--batch", "10")...)
	if code != 1 {
		t.Fatalf("exit %d; want 1\nstdout %s\nstderr %s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{
		`^` + regexp.QuoteMeta(path) + `:5: not a JSON object: invalid character 'o' in literal null \(expecting 'u'\) \(at byte 2\)$`,
		`^` + regexp.QuoteMeta(path) + `:13: URL is on another origin than the target's http://127\.0\.0\.1:\d+ \(url\)$`,
		`^` + regexp.QuoteMeta(path) + `:17: .*Host.* \(header\)$`,
		`^` + regexp.QuoteMeta(summary(path, 27, 0, 3)[:len(summary(path, 27, 0, 3))-1]) + `$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("stdout has %d lines; want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("line %d: %q; want it to match %s", i+1, lines[i], w)
		}
	}
	if d := tr.depth(t); d != 27 {
		t.Fatalf("depth %d; want the 27 good lines", d)
	}
	// 3 batches, and the second sent 3 times: two refusals, then in.
	if got := tr.posts.Load(); got != 5 {
		t.Errorf("%d POSTs; want 5", got)
	}
}

// Lines refused before they are sent: one longer than --batch-bytes, a
// JSON value that is no object, an empty key, a key that is no string.
func TestEnqueueRefusedHere(t *testing.T) {
	t.Parallel()
	tr := newTestRelay(t, httpapi.Options{}, nil)
	path := writeTasks(t, 8, map[int]string{
		2: `{"path":"/long","body":"` + strings.Repeat("x", 2000) + `"}`,
		3: `[1,2]`,
		4: `{"path":"/k","key":""}`,
		6: `{"path":"/k","key":7}`,
		7: ``,
	})
	code, out, _ := run(tr.args(path, "--batch-bytes", "1024")...)
	want := path + ":2: longer than --batch-bytes (1024 bytes): not sent\n" +
		path + ":3: not a JSON object: a task is an object, {\"url\": …}\n" +
		path + ":4: an empty key: give one, or leave the field out for one derived from the file and the line (key)\n" +
		path + ":6: not a string: 7 (key)\n" +
		summary(path, 3, 0, 4)
	if code != 1 || out != want {
		t.Fatalf("exit %d, stdout:\n%s\nwant exit 1 and:\n%s", code, out, want)
	}
	if d := tr.depth(t); d != 3 {
		t.Fatalf("depth %d; want 3", d)
	}
}

// A proxy in front of the relay that answers 503 is retried, with
// backoff, until the batch goes in; one that keeps answering 503 stops
// the load after --retries, naming the line to resume from.
func TestEnqueueRetries(t *testing.T) {
	t.Parallel()
	unavailable := func(n int64) func(http.Handler) http.Handler {
		var posts atomic.Int64
		return func(api http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if posts.Add(1) <= n {
					http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
					return
				}
				api.ServeHTTP(w, r)
			})
		}
	}
	t.Run("then in", func(t *testing.T) {
		t.Parallel()
		tr := newTestRelay(t, httpapi.Options{}, unavailable(2))
		path := writeTasks(t, 100, nil)
		code, out, errOut := run(tr.args(path)...)
		if code != 0 || out != summary(path, 100, 0, 0) {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		for _, want := range []string{"503 Service Unavailable: upstream unavailable: retry 1 of 10 in ", "retry 2 of 10"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errOut)
			}
		}
		if got, d := tr.posts.Load(), tr.depth(t); got != 3 || d != 100 {
			t.Errorf("%d POSTs, depth %d; want 3 and 100", got, d)
		}
	})
	t.Run("stops", func(t *testing.T) {
		t.Parallel()
		tr := newTestRelay(t, httpapi.Options{}, unavailable(1000))
		path := writeTasks(t, 100, nil)
		code, out, errOut := run(tr.args(path, "--retries", "2", "--quiet")...)
		wantErr := "sluice enqueue: stopped at " + path + " line 1: 503 Service Unavailable: upstream unavailable (after 2 retries); "
		if code != 1 || out != summary(path, 0, 0, 0) || !strings.HasPrefix(errOut, wantErr) {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, wantErr)
		}
		if got := tr.posts.Load(); got != 3 {
			t.Errorf("%d POSTs; want 3 (one and 2 retries)", got)
		}
	})
}

// A relay whose bounds are smaller than the batches (fewer tasks, fewer
// bytes per POST) answers 413: the batches are split until they fit.
func TestEnqueueSplitsWhatIsTooLarge(t *testing.T) {
	t.Parallel()
	for _, o := range []httpapi.Options{{MaxBatch: 64}, {MaxBatchBytes: 4 << 10}} {
		tr := newTestRelay(t, o, nil)
		path := writeTasks(t, 1000, nil)
		code, out, errOut := run(tr.args(path)...)
		if code != 0 || out != summary(path, 1000, 0, 0) {
			t.Fatalf("%+v: exit %d, stdout %q, stderr %q", o, code, out, errOut)
		}
		if d := tr.depth(t); d != 1000 {
			t.Fatalf("%+v: depth %d; want 1000", o, d)
		}
	}
}

// The relay's refusals of the request itself stop the load: a wrong token,
// an unknown queue.
func TestEnqueueRelayRefusesTheRequest(t *testing.T) {
	t.Parallel()
	tr := newTestRelay(t, httpapi.Options{}, nil)
	path := writeTasks(t, 10, nil)
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("another-token-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{append(tr.args(path), "--token-file", wrong), "401 Unauthorized: unauthorized: send Authorization: Bearer and the admin token): check --token-file"},
		{[]string{"enqueue", "--relay", tr.url, "--queue", "nope", "--token-file", tr.tokenFile, path}, `404 Not Found: relay: no such queue: "nope" (check --queue`},
	} {
		code, out, errOut := run(c.args...)
		if code != 1 || out != summary(path, 0, 0, 0) || !strings.Contains(errOut, c.says) || !strings.Contains(errOut, "stopped at "+path+" line 1") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 saying %q", c.args, code, out, errOut, c.says)
		}
	}
}

// stdin has no content to hash ahead: its lines need keys of their own,
// or --key-prefix; with either, a second load adds nothing.
func TestEnqueueStdin(t *testing.T) {
	t.Parallel()
	tr := newTestRelay(t, httpapi.Options{}, nil)
	keyed := `{"path":"/a","key":"a"}` + "\n" + `{"path":"/b","key":"b"}` + "\n"
	if code, out, errOut := runStdin(keyed, tr.args("-")...); code != 0 || out != summary("stdin", 2, 0, 0) {
		t.Fatalf("keyed lines: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	unkeyed := keyed + `{"path":"/c"}` + "\n"
	code, out, errOut := runStdin(unkeyed, tr.args("-")...)
	if code != 2 || out != summary("stdin", 0, 2, 0) || !strings.Contains(errOut, `stdin:3: the line has no "key"`) || !strings.Contains(errOut, "--key-prefix") {
		t.Fatalf("a line without a key: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, want := range []string{summary("stdin", 1, 2, 0), summary("stdin", 0, 3, 0)} {
		if code, out, errOut := runStdin(unkeyed, tr.args("-", "--key-prefix", "nightly")...); code != 0 || out != want {
			t.Fatalf("--key-prefix: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
		}
	}
	if d := tr.depth(t); d != 3 {
		t.Fatalf("depth %d; want 3", d)
	}
}

// --from skips the lines before it; their keys do not move.
func TestEnqueueFrom(t *testing.T) {
	t.Parallel()
	tr := newTestRelay(t, httpapi.Options{}, nil)
	path := writeTasks(t, 50, nil)
	if code, out, _ := run(tr.args(path, "--from", "41")...); code != 0 || out != summary(path, 10, 0, 0) {
		t.Fatalf("--from 41: exit %d, %q", code, out)
	}
	if code, out, _ := run(tr.args(path)...); code != 0 || out != summary(path, 40, 10, 0) {
		t.Fatalf("then the whole file: exit %d, %q", code, out)
	}
}

func TestEnqueueUsage(t *testing.T) {
	t.Parallel()
	path := writeTasks(t, 1, nil)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testRelayToken), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"enqueue", "--queue", "jobs", "--token-file", tokenFile}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"enqueue", "--token-file", tokenFile, path}, "--queue is required"},
		{base, "one FILE of tasks (JSON lines) is needed"},
		{append(base, path, path), "got 2 arguments"},
		{append(base, path, "--batch", "0"), "--batch 0: from 1 to 10000"},
		{append(base, path, "--batch-bytes", "100"), "--batch-bytes 100"},
		{append(base, path, "--retries", "-1"), "--retries -1"},
		{append(base, path, "--from", "0"), "--from 0"},
		{append(base, path, "--key-prefix", "has space"), "--key-prefix"},
		{append(base, path, "--relay", "127.0.0.1:8700"), "an http:// or https:// URL"},
		{append(base, path, "--relay", "http://u:p@127.0.0.1:8700"), "without credentials"},
		{append(base, path, "--token", "secret-on-the-command-line"), "--token: the token is never given on the command line"},
	} {
		code, out, errOut := run(c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.says) || strings.Contains(errOut, "secret-on-the-command-line") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 saying %q", c.args, code, out, errOut, c.says)
		}
	}
	if _, set := os.LookupEnv(relayTokenEnv); !set {
		if code, _, errOut := run("enqueue", "--queue", "jobs", path); code != 2 || !strings.Contains(errOut, "token is needed") {
			t.Errorf("no token: exit %d, stderr %q", code, errOut)
		}
	}
}

func TestWithKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		line, derived, want, refused string
	}{
		{`{"url":"/a"}`, "enq:k:1", `{"key":"enq:k:1","url":"/a"}`, ""},
		{`{ "url" : "/a" , "json" : {"key":1} }`, "p:2", `{"key":"p:2", "url" : "/a" , "json" : {"key":1} }`, ""},
		{`{}`, "p:3", `{"key":"p:3"}`, ""},
		{`{ }`, "p:3", `{"key":"p:3" }`, ""},
		{`{"key":"mine","url":"/a"}`, "p:4", `{"key":"mine","url":"/a"}`, ""},
		{`{"KEY":"mine"}`, "p:4", `{"KEY":"mine"}`, ""}, // the relay matches fields ignoring case
		{`{"url":"/a"}`, `p"\:5`, `{"key":"p\"\\:5","url":"/a"}`, ""},
		{`{"key":null}`, "p:6", "", "an empty key"},
		{`{"key":""}`, "p:6", "", "an empty key"},
		{`{"key":["a"]}`, "p:6", "", "not a string"},
		{`["a"]`, "p:7", "", "not a JSON object: a task is an object"},
		{`"a"`, "p:7", "", "not a JSON object: a task is an object"},
		{`{"a":1} {"b":2}`, "p:8", "", "not a JSON object: invalid character '{' after top-level value"},
		{`{"a":`, "p:8", "", "not a JSON object: unexpected end of JSON input"},
		{`null`, "p:9", "", "not a JSON object"},
	} {
		got, err := withKey([]byte(c.line), c.derived)
		switch {
		case c.refused != "":
			if le, ok := err.(*lineError); !ok || !strings.Contains(le.reason, c.refused) {
				t.Errorf("withKey(%s): %q, %v; want a refusal saying %q", c.line, got, err, c.refused)
			}
		case err != nil || string(got) != c.want:
			t.Errorf("withKey(%s) = %s, %v; want %s", c.line, got, err, c.want)
		}
	}
	if _, err := withKey([]byte(`{"url":"/a"}`), ""); err != errNoKey {
		t.Errorf("no key and none derived: %v; want errNoKey", err)
	}
}

// For any line, withKey refuses it or returns one JSON object that holds
// the line's fields unchanged and a key: the line's own, else the
// derived one.
func FuzzWithKey(f *testing.F) {
	for _, s := range []string{`{"url":"/a"}`, `{}`, `{"key":"k"}`, `{"Key":"k","a":[1,{"key":2}]}`, `[]`, `{"a":1}x`, " {\t}\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		got, err := withKey([]byte(line), "enq:0123456789abcdef:1")
		if err != nil {
			if _, ok := err.(*lineError); !ok {
				t.Fatalf("withKey(%q): %v; want a *lineError", line, err)
			}
			return
		}
		var in, out map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &in); err != nil {
			t.Fatalf("withKey accepted %q, which is no JSON object: %v", line, err)
		}
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("withKey(%q) = %q, no JSON object: %v", line, got, err)
		}
		var key struct{ Key string }
		_ = json.Unmarshal(got, &key)
		if string(got) == line {
			if key.Key == "" {
				t.Fatalf("withKey(%q) kept a line without a key", line)
			}
			return
		}
		if key.Key != "enq:0123456789abcdef:1" || len(out) != len(in)+1 {
			t.Fatalf("withKey(%q) = %q: key %q, %d fields from %d", line, got, key.Key, len(out), len(in))
		}
		for k, v := range in {
			if !bytes.Equal(out[k], v) {
				t.Fatalf("withKey(%q) = %q: field %s changed", line, got, k)
			}
		}
	})
}

func TestLineReader(t *testing.T) {
	t.Parallel()
	type line struct {
		no   int
		text string // "<long>" for a line over the bound
	}
	in := "a\r\n\n" + strings.Repeat("x", 11) + "\nbcdefghijk\n" + strings.Repeat("y", 200<<10) + "\nlast"
	want := []line{{1, "a\r"}, {2, ""}, {3, "<long>"}, {4, "bcdefghijk"}, {5, "<long>"}, {6, "last"}}
	lr := newLineReader(strings.NewReader(in), 10)
	var got []line
	for {
		b, no, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if b == nil {
			text = "<long>"
		}
		got = append(got, line{no, text})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
}

// survey counts lines as the loader numbers them and hashes the content.
func TestSurvey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in    string
		lines int64
	}{{"", 0}, {"a", 1}, {"a\n", 1}, {"a\nb", 2}, {"\n\n", 2}} {
		n, sum, err := survey(strings.NewReader(c.in), true)
		if err != nil || n != c.lines {
			t.Errorf("survey(%q) = %d, %v; want %d", c.in, n, err, c.lines)
		}
		if want := sha256Hex(c.in); fmt.Sprintf("%x", sum) != want {
			t.Errorf("survey(%q): hash %x; want %s", c.in, sum, want)
		}
	}
}

// The keys of a file are enq:, its SHA-256's first 16 hex digits, and the
// line number.
func TestDerivedKeys(t *testing.T) {
	t.Parallel()
	content := `{"path":"/a"}` + "\n"
	path := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := openTaskFile(path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if got, want := src.key(7), "enq:"+sha256Hex(content)[:16]+":7"; got != want || src.lines != 1 {
		t.Fatalf("key %q, %d lines; want %q, 1", got, src.lines, want)
	}
	withPrefix, err := openTaskFile(path, "nightly", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer withPrefix.Close()
	if got := withPrefix.key(7); got != "nightly:7" {
		t.Fatalf("--key-prefix nightly: key %q", got)
	}
}

func sha256Hex(s string) string {
	return fmt.Sprintf("%x", sha256.Sum256([]byte(s)))
}

// When stderr is not a terminal, progress is a plain line every 5 s.
func TestProgressPlainLines(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	var errOut bytes.Buffer
	p := newProgress(&errOut, "tasks.jsonl", 2000, false, clock)
	for _, step := range []struct {
		at time.Duration
		n  int64
	}{{time.Second, 500}, {4 * time.Second, 500}, {5 * time.Second, 500}, {7 * time.Second, 250}, {10 * time.Second, 250}} {
		now = start.Add(step.at)
		p.add(step.n)
	}
	want := "sluice enqueue: tasks.jsonl: 1500 of 2000 lines (75%), 300 lines/s, 2s left\n" +
		"sluice enqueue: tasks.jsonl: 2000 of 2000 lines (100%), 200 lines/s, 0s left\n"
	if errOut.String() != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", errOut.String(), want)
	}
	var quiet bytes.Buffer
	q := newProgress(&quiet, "tasks.jsonl", 2000, true, clock)
	now = start.Add(time.Hour)
	q.add(2000)
	if quiet.Len() != 0 {
		t.Fatalf("--quiet printed %q", quiet.String())
	}
}

// A line edited under a reused --key-prefix holds a key the relay knows
// with another request: it is refused, the other lines are already there.
func TestEnqueueKeyConflict(t *testing.T) {
	t.Parallel()
	tr := newTestRelay(t, httpapi.Options{}, nil)
	path := writeTasks(t, 5, nil)
	if code, out, _ := run(tr.args(path, "--key-prefix", "job-1")...); code != 0 || out != summary(path, 5, 0, 0) {
		t.Fatalf("first load: exit %d, %q", code, out)
	}
	edited := writeTasks(t, 5, map[int]string{2: `{"path":"/items/2","json":{"n":"two"}}`})
	code, out, errOut := run(tr.args(edited, "--key-prefix", "job-1")...)
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(edited) + `:2: .*another payload.* \(key\)\n` + regexp.QuoteMeta(summary(edited, 0, 4, 1)) + `$`)
	if code != 1 || !want.MatchString(out) {
		t.Fatalf("edited file: exit %d, stdout %q, stderr %q; want %s", code, out, errOut, want)
	}
}

// A file that changes while it is loaded is reported: its keys came from
// the content of the first pass.
func TestEnqueueFileChanged(t *testing.T) {
	t.Parallel()
	path := writeTasks(t, 3, nil)
	src, err := openTaskFile(path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.unchanged(); err != nil {
		t.Fatalf("unchanged file: %v", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"path":"/more"}` + "\n")
	f.Close()
	if err := src.unchanged(); err == nil || !strings.Contains(err.Error(), "changed while it was loaded") {
		t.Fatalf("appended file: %v; want it reported", err)
	}
}
