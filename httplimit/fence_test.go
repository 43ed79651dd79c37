package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
)

// fenced is a real server on 127.0.0.1:0: a middleware with a rule on
// /api/ (one global limit of 100 an hour) in front of a handler that
// counts what reaches it.
type fenced struct {
	t       *testing.T
	srv     *httptest.Server
	store   *counting
	fences  *lease.Fences
	served  atomic.Int64
	mu      sync.Mutex
	refused []string // what Fence.Refused heard
}

var fenceLimit = sluice.Limit{Name: "global", Quota: 100, Window: time.Hour}

// newFenced starts the server with fence; when it has Fences, Refused
// is recorded.
func newFenced(t *testing.T, fence httplimit.Fence) *fenced {
	t.Helper()
	f := &fenced{t: t, fences: fence.Fences}
	clock := limittest.NewClock(limittest.Epoch) // still: what a request spends stays spent
	ms, err := memstore.New(memstore.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	f.store = &counting{Store: ms}
	if fence.Fences != nil {
		fence.Refused = func(_ *http.Request, reason string) {
			f.mu.Lock()
			f.refused = append(f.refused, reason)
			f.mu.Unlock()
		}
	}
	mw, err := httplimit.New(httplimit.Options{
		Limiter: f.store,
		Rules:   []httplimit.Rule{{Name: "api", Match: httplimit.Match{Path: "/api/"}, Quotas: []httplimit.Quota{{Limit: fenceLimit}}}},
		Fence:   fence,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.served.Add(1)
		io.WriteString(w, "ok")
	})))
	t.Cleanup(f.srv.Close)
	return f
}

// newFencedWith starts the server with fencing on: a table of fo, and
// Required as given.
func newFencedWith(t *testing.T, fo lease.FenceOptions, required bool) *fenced {
	t.Helper()
	fences, err := lease.NewFences(fo)
	if err != nil {
		t.Fatal(err)
	}
	return newFenced(t, httplimit.Fence{Fences: fences, Required: required})
}

// send sends a request to path with the fence fields given (none, one,
// or several), and returns the status, the body and the header.
func (f *fenced) send(path string, fields ...string) (int, string, http.Header) {
	f.t.Helper()
	req, err := http.NewRequest("GET", f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, v := range fields {
		req.Header.Add(lease.FenceHeader, v)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// remaining is what the limit has left: Peek spends nothing.
func (f *fenced) remaining() float64 {
	f.t.Helper()
	st, err := f.store.Peek(context.Background(), enforce.GlobalKey, fenceLimit)
	if err != nil {
		f.t.Fatal(err)
	}
	return st.Remaining
}

// The timeline of a paused holder, over a real connection: each row is
// a request, the status and body it gets, and whether it reached the
// handler and spent on the limit. A refused request spends nothing.
func TestFenceTimeline(t *testing.T) {
	t.Parallel()
	f := newFencedWith(t, lease.FenceOptions{Groups: []string{"g", "h"}}, false)
	for i, c := range []struct {
		path   string
		fields []string
		status int
		body   string // exact, or a prefix ending in "…"
		passes bool
	}{
		{"/api/x", nil, 200, "ok", true}, // no field, not required: not fenced
		{"/api/x", []string{"5 3 g"}, 200, "ok", true},
		{"/api/x", []string{"5 3 g"}, 200, "ok", true}, // the holder's next request
		{"/api/x", []string{"9 3 g"}, 200, "ok", true}, // taken over: the floor moves
		{"/api/x", []string{"5 3 g"}, 409, `{"error":"stale_lease_epoch","retryable":false}`, false},
		{"/other", []string{"8 3 g"}, 409, `{"error":"stale_lease_epoch","retryable":false}`, false}, // no rule applies: fenced all the same
		{"/api/x", []string{"9 3 g"}, 200, "ok", true},
		{"/api/x", []string{"1 2 g"}, 200, "ok", true}, // another partition
		{"/api/x", []string{"1 3 h"}, 200, "ok", true}, // another group
		{"/api/x", []string{"1 3 nope"}, 403, `{"error":"unknown_lease_group","retryable":false}`, false},
		{"/api/x", []string{"nine 3 g"}, 400, `{"error":"invalid_lease_epoch","reason":"Sluice-Lease-Epoch: fence \"nine 3 g\": epoch is not a positive decimal integer","retryable":false}`, false},
		{"/api/x", []string{"9 3"}, 400, `{"error":"invalid_lease_epoch","reason":"Sluice-Lease-Epoch: fence \"9 3\": want \"<epoch> <partition> <group>\"","retryable":false}`, false},
		{"/api/x", []string{"9 3 g", "9 3 g"}, 400, `{"error":"invalid_lease_epoch","reason":"more than one Sluice-Lease-Epoch field…`, false},
		{"/api/x", []string{""}, 400, `{"error":"invalid_lease_epoch"…`, false},
		{"/api/x", []string{"10 3 g"}, 200, "ok", true},
	} {
		served, left, calls := f.served.Load(), f.remaining(), f.store.calls.Load()
		status, body, h := f.send(c.path, c.fields...)
		prefix, isPrefix := strings.CutSuffix(c.body, "…")
		if status != c.status || (isPrefix && !strings.HasPrefix(body, prefix)) || (!isPrefix && body != c.body) {
			t.Fatalf("request %d %q: %d %s; want %d %s", i, c.fields, status, body, c.status, c.body)
		}
		if !c.passes && (h.Get("Cache-Control") != "no-store" || h.Get("Content-Type") != "application/json" || h.Get("Retry-After") != "") {
			t.Errorf("request %d: refusal fields %v", i, h)
		}
		reached := f.served.Load() - served
		spent := left - f.remaining()
		called := f.store.calls.Load() - calls
		switch {
		case c.passes && reached != 1:
			t.Errorf("request %d: reached the handler %d times, want once", i, reached)
		case !c.passes && (reached != 0 || spent != 0 || called != 0):
			t.Errorf("request %d refused, yet reached the handler %d times, spent %v, called the limiter %d times", i, reached, spent, called)
		case c.passes && c.path == "/api/x" && spent != 1:
			t.Errorf("request %d: spent %v, want 1", i, spent)
		}
	}
	want := []string{"stale_lease_epoch", "stale_lease_epoch", "unknown_lease_group", "invalid_lease_epoch", "invalid_lease_epoch", "invalid_lease_epoch", "invalid_lease_epoch"}
	if !slices.Equal(f.refused, want) {
		t.Errorf("Refused heard %q, want %q", f.refused, want)
	}
	if st := f.fences.Stats(); st.Accepted != 7 || st.Stale != 2 || st.Refused != 1 {
		t.Errorf("fences: %+v, want 7 accepted, 2 stale, 1 refused", st)
	}
}

// Required: a request without the field is refused with 428, spending
// nothing; one with it is checked as always.
func TestFenceRequired(t *testing.T) {
	t.Parallel()
	f := newFencedWith(t, lease.FenceOptions{}, true)
	left := f.remaining()
	status, body, h := f.send("/api/x")
	if status != http.StatusPreconditionRequired || body != `{"error":"lease_epoch_required","reason":"this target fences leases: send Sluice-Lease-Epoch: <epoch> <partition> <group>","retryable":false}` || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("no field: %d %s %v", status, body, h)
	}
	if f.served.Load() != 0 || f.remaining() != left {
		t.Fatalf("refused, yet served %d, spent %v", f.served.Load(), left-f.remaining())
	}
	if status, _, _ := f.send("/api/x", "2 0 any-group"); status != 200 {
		t.Fatalf("with the field: %d", status)
	}
	if status, _, _ := f.send("/api/x", "1 0 any-group"); status != 409 {
		t.Fatalf("stale with the field: %d", status)
	}
	if !slices.Equal(f.refused, []string{"lease_epoch_required", "stale_lease_epoch"}) {
		t.Errorf("Refused heard %q", f.refused)
	}
}

// The negative control: without Fence the stale request of the timeline
// reaches the handler and spends.
func TestFenceOffLetsStaleThrough(t *testing.T) {
	t.Parallel()
	f := newFenced(t, httplimit.Fence{})
	for _, v := range []string{"9 3 g", "5 3 g", "not a fence"} {
		if status, body, _ := f.send("/api/x", v); status != 200 || body != "ok" {
			t.Fatalf("%q without fencing: %d %s", v, status, body)
		}
	}
	if f.served.Load() != 3 || f.remaining() != fenceLimit.Quota-3 {
		t.Fatalf("served %d, remaining %v; want 3 served and spent", f.served.Load(), f.remaining())
	}
}

// Many clients at once over real connections (run with -race): the
// holders of one partition send rising epochs, each answer is 200 or 409,
// what passed is exactly what reached the handler and spent, and at the
// end an epoch below the highest sent is refused.
func TestFenceConcurrent(t *testing.T) {
	t.Parallel()
	f := newFencedWith(t, lease.FenceOptions{}, false)
	const clients, each = 8, 12 // 96 requests: inside the limit of 100
	var ok, stale atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				epoch := 1 + i*clients + c // every epoch once, rising per client
				status, _, _ := f.send("/api/x", fmt.Sprintf("%d %d g", epoch, i%2))
				switch status {
				case 200:
					ok.Add(1)
				case 409:
					stale.Add(1)
				default:
					t.Errorf("epoch %d: status %d", epoch, status)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load()+stale.Load() != clients*each || f.served.Load() != ok.Load() || fenceLimit.Quota-f.remaining() != float64(ok.Load()) {
		t.Fatalf("%d passed, %d stale, %d served, %v spent", ok.Load(), stale.Load(), f.served.Load(), fenceLimit.Quota-f.remaining())
	}
	if st := f.fences.Stats(); st.Accepted != uint64(ok.Load()) || st.Stale != uint64(stale.Load()) {
		t.Fatalf("fences %+v, answers %d passed %d stale", st, ok.Load(), stale.Load())
	}
	// The highest epoch sent on partition 1 is 96 (i = 11, c = 7): anything
	// below it is refused.
	if status, _, _ := f.send("/api/x", "95 1 g"); status != 409 {
		t.Fatalf("epoch 95 after 96: %d, want 409", status)
	}
}

func TestFenceOptionsRefused(t *testing.T) {
	t.Parallel()
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	rules := []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: fenceLimit}}}}
	for _, fence := range []httplimit.Fence{
		{Required: true},
		{Refused: func(*http.Request, string) {}},
	} {
		if _, err := httplimit.New(httplimit.Options{Limiter: ms, Rules: rules, Fence: fence}); err == nil || !strings.Contains(err.Error(), "need Fence.Fences") {
			t.Errorf("%+v: %v, want a refusal", fence, err)
		}
	}
}
