package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/relay/console"
	"github.com/sluicehq/sluice/relay/httpapi"
)

// The little of relay/harness_test.go these tests need: a relay over
// bbolt files in a temporary directory, delivering to real HTTP servers
// on 127.0.0.1.

// token is the tests' relay token.
const token = "a-console-token-of-some-length"

// newTarget is a real HTTP server on 127.0.0.1:0 answering with h.
func newTarget(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// options is one target "api" at origin, limited to 50 per second, fed by
// the queue "jobs".
func options(origin string) relay.Options {
	return relay.Options{
		Targets: []relay.Target{{
			Name: "api", Origin: origin, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			Limits: []sluice.Limit{{Name: "per-second", Quota: 50, Window: time.Second}},
			Retry:  relay.Retry{BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
		}},
		Queues: []relay.Queue{{Name: "jobs", Target: "api"}},
	}
}

// newRelay creates a relay with o over bbolt files in a temporary
// directory; run says whether it delivers (Run) until the test ends.
func newRelay(t *testing.T, o relay.Options, run bool) *relay.Relay {
	t.Helper()
	dir := t.TempDir()
	o.Open = func(_ context.Context, name string) (queue.Queue, error) {
		return boltqueue.Open(filepath.Join(dir, name+".db"), boltqueue.Options{Logger: quietLog()})
	}
	o.Logger = quietLog()
	r, err := relay.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !run {
		t.Cleanup(func() {
			if err := r.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// enqueue accepts reqs into the queue jobs and returns their IDs.
func enqueue(t *testing.T, r *relay.Relay, reqs ...relay.Request) []string {
	t.Helper()
	got, err := r.Enqueue(context.Background(), "jobs", reqs...)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(got))
	for i, a := range got {
		ids[i] = a.ID
	}
	return ids
}

// waitState polls a task until it is in state, or fails the test after
// within.
func waitState(t *testing.T, r *relay.Relay, id string, state queue.State, within time.Duration) relay.TaskInfo {
	t.Helper()
	end := time.Now().Add(within)
	for {
		info, err := r.Task(context.Background(), id)
		if err != nil {
			t.Fatalf("Task(%s): %v", id, err)
		}
		if info.State == state {
			return info
		}
		if time.Now().After(end) {
			t.Fatalf("task %s still %s after %v, want %s (attempts %d, outcome %q)", id, info.State, within, state, info.Attempts, info.Outcome)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// get sends a GET to the console with the cookie ck (nil: none) and
// returns the status and body.
func get(t *testing.T, srv *httptest.Server, path string, ck *http.Cookie) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ck != nil {
		req.AddCookie(ck)
	}
	return do(t, req)
}

// post sends a form to the console with the cookie ck and the request
// headers of hdr ("Origin", "Sec-Fetch-Site", "Referer").
func post(t *testing.T, srv *httptest.Server, path string, form url.Values, ck *http.Cookie, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if ck != nil {
		req.AddCookie(ck)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// serve starts the console over r on 127.0.0.1:0.
func serve(t *testing.T, r *relay.Relay, o console.Options) *httptest.Server {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quietLog()
	}
	srv := httptest.NewServer(console.New(r, o))
	t.Cleanup(srv.Close)
	return srv
}

// login opens /?token= and returns the session cookie it sets.
func login(t *testing.T, srv *httptest.Server) *http.Cookie {
	t.Helper()
	resp, _ := get(t, srv, "/?token="+url.QueryEscape(token), nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: status %d, want 303", resp.StatusCode)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "sluice_console" {
			return ck
		}
	}
	t.Fatalf("login: no session cookie in %q", resp.Header.Values("Set-Cookie"))
	return nil
}

// sameSite is what a browser sends with a form of the console's own page.
func sameSite(srv *httptest.Server) map[string]string {
	return map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"}
}

// apiView is GET /v1/queues/{queue} of the relay's API, field by field.
func apiView(t *testing.T, r *relay.Relay, queueName string) map[string]json.RawMessage {
	t.Helper()
	req := httptest.NewRequest("GET", "/v1/queues/"+queueName, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	httpapi.New(r, httpapi.Options{Token: token, Logger: quietLog()}).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("API: %d %s", rec.Code, rec.Body)
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// pageFields reads the data-field figures of the element with the ID id
// in a page: field → data-value.
func pageFields(t *testing.T, page, id string) map[string]string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	root := byID(doc, id)
	if root == nil {
		t.Fatalf("no element #%s in the page", id)
	}
	out := map[string]string{}
	for n := range root.Descendants() {
		if field, ok := attr(n, "data-field"); ok {
			value, _ := attr(n, "data-value")
			out[field] = value
		}
	}
	return out
}

func byID(doc *html.Node, id string) *html.Node {
	for n := range doc.Descendants() {
		if v, ok := attr(n, "id"); ok && v == id {
			return n
		}
	}
	return nil
}

func attr(n *html.Node, name string) (string, bool) {
	if n.Type != html.ElementNode {
		return "", false
	}
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val, true
		}
	}
	return "", false
}

// countAttr counts the elements of a page that carry the attribute name.
func countAttr(t *testing.T, page, name string) int {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for node := range doc.Descendants() {
		if _, ok := attr(node, name); ok {
			n++
		}
	}
	return n
}

// goneUntil answers 404 (the task dies at once) until healthy is set,
// then 200.
type goneUntil struct {
	mu      sync.Mutex
	healthy bool
}

func (g *goneUntil) set() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.healthy = true
}

func (g *goneUntil) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	g.mu.Lock()
	ok := g.healthy
	g.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	_, _ = io.WriteString(w, "ok")
}
