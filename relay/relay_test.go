package relay_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(rssChildEnv); dir != "" {
		os.Exit(drainForRSS(dir))
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

func TestDeliversWithIdempotencyKeyAndKeepsTheAnswer(t *testing.T) {
	tg := newTarget(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/items/7")
		w.Header().Set("X-Secret", "not kept")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":7}`))
	})
	r := start(t, oneTarget(tg.URL, nil))
	ctx := context.Background()
	got, err := r.Enqueue(ctx, "jobs",
		relay.Request{URL: "/v1/items", Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"a":1}`)},
		relay.Request{Method: "PUT", URL: tg.URL + "/v1/items/2?x=1", Key: "order-2"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0].ID, "jobs.") || got[0].Duplicate {
		t.Fatalf("accepted %+v", got)
	}
	for _, a := range got {
		info := waitFinished(t, r.Relay, a.ID, 10*time.Second)
		if info.State != queue.Succeeded || info.Answer == nil || info.Answer.Status != 201 || string(info.Answer.Body) != `{"id":7}` {
			t.Fatalf("task %s: %+v answer %+v", a.ID, info, info.Answer)
		}
		if info.Answer.Header.Get("Location") != "/v1/items/7" || info.Answer.Header.Get("X-Secret") != "" {
			t.Fatalf("kept header %v", info.Answer.Header)
		}
	}
	arr := tg.got()
	if len(arr) != 2 {
		t.Fatalf("%d arrivals, want 2", len(arr))
	}
	byPath := map[string]arrival{}
	for _, a := range arr {
		byPath[a.Path] = a
	}
	post, put := byPath["/v1/items"], byPath["/v1/items/2?x=1"]
	if post.Method != "POST" || post.Body != `{"a":1}` || post.Header.Get("Idempotency-Key") != got[0].ID {
		t.Fatalf("first arrival %+v", post)
	}
	if put.Method != "PUT" || put.Header.Get("Idempotency-Key") != "order-2" {
		t.Fatalf("second arrival %+v", put)
	}
	// The same key again is the same task.
	again, err := r.Enqueue(ctx, "jobs", relay.Request{Method: "PUT", URL: tg.URL + "/v1/items/2?x=1", Key: "order-2"})
	if err != nil || !again[0].Duplicate || again[0].ID != got[1].ID {
		t.Fatalf("again: %+v, %v", again, err)
	}
}

// TestOutcomes is the delivery state machine, answer by answer.
func TestOutcomes(t *testing.T) {
	cases := []struct {
		name     string
		answers  []int // status of each arrival in turn; the last repeats
		header   http.Header
		attempts int
		state    queue.State
		sends    int
		outcome  string
	}{
		{name: "2xx succeeds", answers: []int{200}, attempts: 3, state: queue.Succeeded, sends: 1},
		{name: "404 dies at once", answers: []int{404}, attempts: 3, state: queue.Dead, sends: 1, outcome: "404 Not Found"},
		{name: "400 dies at once", answers: []int{400}, attempts: 3, state: queue.Dead, sends: 1, outcome: "400 Bad Request"},
		{name: "408 is retried", answers: []int{408, 200}, attempts: 3, state: queue.Succeeded, sends: 2},
		{name: "500 retried then dead", answers: []int{500}, attempts: 3, state: queue.Dead, sends: 3, outcome: "500 Internal Server Error"},
		{name: "503 without Retry-After is a failure", answers: []int{503, 503, 200}, attempts: 3, state: queue.Succeeded, sends: 3},
		{name: "429 spends no attempt", answers: []int{429, 429, 429, 200}, header: http.Header{"Retry-After": {"0"}}, attempts: 1, state: queue.Succeeded, sends: 4},
		{name: "503 with Retry-After spends no attempt", answers: []int{503, 503, 200}, header: http.Header{"Retry-After": {"1"}}, attempts: 1, state: queue.Succeeded, sends: 3},
		{name: "302 off the origin is not followed", answers: []int{302}, header: http.Header{"Location": {"http://169.254.169.254/latest/meta-data"}}, attempts: 3, state: queue.Dead, sends: 1, outcome: "302 Found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t, func(n int, w http.ResponseWriter, r *http.Request) {
				status := c.answers[min(n, len(c.answers))-1]
				if status != 200 {
					for k, v := range c.header {
						w.Header()[k] = v
					}
				}
				w.WriteHeader(status)
			})
			r := start(t, oneTarget(tg.URL, nil))
			got, err := r.Enqueue(context.Background(), "jobs", relay.Request{URL: "/x", MaxAttempts: c.attempts})
			if err != nil {
				t.Fatal(err)
			}
			info := waitFinished(t, r.Relay, got[0].ID, 20*time.Second)
			if info.State != c.state || !strings.HasPrefix(info.Outcome, c.outcome) {
				t.Fatalf("state %s outcome %q, want %s %q", info.State, info.Outcome, c.state, c.outcome)
			}
			if n := len(tg.got()); n != c.sends {
				t.Fatalf("%d sends, want %d", n, c.sends)
			}
		})
	}
}

func TestDeadlineHonoured(t *testing.T) {
	tg := newTarget(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	r := start(t, oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Retry.BaseDelay, tc.Retry.MaxDelay = 400*time.Millisecond, 400*time.Millisecond
	}))
	got, err := r.Enqueue(context.Background(), "jobs", relay.Request{URL: "/x", Deadline: time.Now().Add(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	info := waitFinished(t, r.Relay, got[0].ID, 10*time.Second)
	if info.State != queue.Dead || !strings.Contains(info.Outcome, queue.ReasonDeadline) {
		t.Fatalf("state %s outcome %q", info.State, info.Outcome)
	}
	if n := len(tg.got()); n > 2 {
		t.Fatalf("%d sends past a deadline", n)
	}
}

// TestRefused is the table of bad requests: each refused whole, with its
// field and kind, and nothing sent or kept.
func TestRefused(t *testing.T) {
	tg := newTarget(t, nil)
	r := start(t, oneTarget(tg.URL, nil))
	ok := relay.Request{URL: "/fine"}
	cases := []struct {
		name  string
		req   relay.Request
		kind  error
		field string
	}{
		{"another origin", relay.Request{URL: "http://example.com/x"}, relay.ErrForbidden, "url"},
		{"metadata address", relay.Request{URL: "http://169.254.169.254/latest/meta-data"}, relay.ErrForbidden, "url"},
		{"scheme-relative", relay.Request{URL: "//evil.example/x"}, relay.ErrForbidden, "url"},
		{"user information", relay.Request{URL: strings.Replace(tg.URL, "http://", "http://u:p@", 1) + "/x"}, relay.ErrForbidden, "url"},
		{"Host header", relay.Request{URL: "/x", Header: http.Header{"Host": {"evil"}}}, relay.ErrForbidden, "header"},
		{"X-Forwarded-For", relay.Request{URL: "/x", Header: http.Header{"X-Forwarded-For": {"1.2.3.4"}}}, relay.ErrForbidden, "header"},
		{"Transfer-Encoding", relay.Request{URL: "/x", Header: http.Header{"Transfer_Encoding": {"chunked"}}}, relay.ErrForbidden, "header"},
		{"Idempotency-Key", relay.Request{URL: "/x", Header: http.Header{"Idempotency-Key": {"k"}}}, relay.ErrInvalid, "header"},
		{"header CRLF", relay.Request{URL: "/x", Header: http.Header{"X-A": {"a\r\nHost: evil"}}}, relay.ErrInvalid, "header"},
		{"no url", relay.Request{}, relay.ErrInvalid, "url"},
		{"bad method", relay.Request{URL: "/x", Method: "get /"}, relay.ErrInvalid, "method"},
		{"CONNECT", relay.Request{URL: "/x", Method: "CONNECT"}, relay.ErrForbidden, "method"},
		{"body too large", relay.Request{URL: "/x", Body: make([]byte, 2<<20)}, relay.ErrTooLarge, "body"},
		{"deadline past", relay.Request{URL: "/x", Deadline: time.Now().Add(-time.Second)}, relay.ErrInvalid, "deadline"},
		{"cost NaN", relay.Request{URL: "/x", Cost: math.NaN()}, relay.ErrInvalid, "cost"},
		{"priority", relay.Request{URL: "/x", Priority: 10}, relay.ErrInvalid, "priority"},
		{"key with space", relay.Request{URL: "/x", Key: "a b"}, relay.ErrInvalid, "key"},
		// What an attacker probe got through before they were refused.
		{"idempotency_key", relay.Request{URL: "/x", Header: http.Header{"idempotency_key": {"mine"}}}, relay.ErrInvalid, "header"},
		{"not before past 2262", relay.Request{URL: "/x", NotBefore: time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC)}, relay.ErrInvalid, "not_before"},
		{"deadline in 9999", relay.Request{URL: "/x", Deadline: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}, relay.ErrInvalid, "deadline"},
		{"HEAD with a body", relay.Request{URL: "/x", Method: "HEAD", Body: []byte("x")}, relay.ErrInvalid, "body"},
		{"Envoy's internal mark", relay.Request{URL: "/x", Header: http.Header{"X-Envoy-Internal": {"true"}}}, relay.ErrForbidden, "header"},
		// A lease fence comes only from the lease the relay spends.
		{"fence header", relay.Request{URL: "/x", Header: http.Header{"Sluice-Lease-Epoch": {"18446744073709551615 0 g"}}}, relay.ErrForbidden, "header"},
		{"fence header, underscores", relay.Request{URL: "/x", Header: http.Header{"sluice_lease_epoch": {"9 0 g"}}}, relay.ErrForbidden, "header"},
	}
	for _, c := range cases {
		_, err := r.Enqueue(context.Background(), "jobs", ok, c.req)
		var re *relay.RequestError
		if !errors.As(err, &re) || !errors.Is(err, c.kind) || re.Field != c.field || re.Index != 1 {
			t.Errorf("%s: %v (want %v on field %s of request 1)", c.name, err, c.kind, c.field)
		}
	}
	if _, err := r.Enqueue(context.Background(), "nope", ok); !errors.Is(err, relay.ErrNoQueue) {
		t.Errorf("unknown queue: %v", err)
	}
	s, err := r.Stats(context.Background(), "jobs")
	if err != nil || s.Depth != 0 || s.Succeeded != 0 {
		t.Fatalf("after refusals: %+v %v", s, err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(tg.got()); n != 0 {
		t.Fatalf("%d requests reached the target", n)
	}
}

func TestTargetOnARefusedAddressIsRefusedAtNew(t *testing.T) {
	for _, origin := range []string{"http://169.254.169.254", "http://127.0.0.1:9", "http://10.0.0.1", "http://[::1]:80"} {
		o := oneTarget(origin, func(tc *relay.Target) { tc.Allow = nil })
		o.Open = boltOpener(t.TempDir())
		_, err := relay.New(context.Background(), o)
		if !errors.Is(err, relay.ErrOptions) || !strings.Contains(err.Error(), "allow") {
			t.Errorf("%s: %v", origin, err)
		}
	}
}

func TestPauseCancelAndStats(t *testing.T) {
	tg := newTarget(t, nil)
	r := start(t, oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "per_second", Quota: 50, Window: time.Second}}
	}))
	ctx := context.Background()
	if err := r.Pause("jobs"); err != nil {
		t.Fatal(err)
	}
	got, err := r.Enqueue(ctx, "jobs", relay.Request{URL: "/a"}, relay.Request{URL: "/b"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(tg.got()); n != 0 {
		t.Fatalf("paused queue delivered %d", n)
	}
	if err := r.Cancel(ctx, got[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Cancel(ctx, got[1].ID); !errors.Is(err, relay.ErrConflict) {
		t.Fatalf("second cancel: %v", err)
	}
	if err := r.Cancel(ctx, "jobs.ffffffffffffffff"); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	if _, err := r.Task(ctx, "nodot"); !errors.Is(err, relay.ErrInvalid) {
		t.Fatalf("bad ID: %v", err)
	}
	time.Sleep(time.Second) // stats are read at most once a second
	s, err := r.Stats(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Paused || s.Depth != 1 || s.Cancelled != 1 || s.Limit != 50 || s.LimitSource != "configuration" || s.ETAKnown {
		t.Fatalf("stats %+v", s)
	}
	if err := r.Resume("jobs"); err != nil {
		t.Fatal(err)
	}
	if info := waitFinished(t, r.Relay, got[0].ID, 5*time.Second); info.State != queue.Succeeded {
		t.Fatalf("after resume: %+v", info)
	}
	if arr := tg.got(); len(arr) != 1 || arr[0].Path != "/a" {
		t.Fatalf("arrivals %+v", arr)
	}
}

// TestFailuresSummarised: 30 failed deliveries make at most one log line
// per LogEvery, never one each, and the lines count them all.
func TestFailuresSummarised(t *testing.T) {
	tg := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	var logs logtest.Buffer
	o := oneTarget(tg.URL, func(tc *relay.Target) {
		tc.Retry.BaseDelay, tc.Retry.MaxDelay = time.Millisecond, time.Millisecond
		tc.Breaker.Failures = 1000
	})
	o.Logger = logs.Logger()
	o.LogEvery = 300 * time.Millisecond
	r := start(t, o)
	var reqs []relay.Request
	for i := range 10 {
		reqs = append(reqs, relay.Request{URL: fmt.Sprintf("/%d", i), MaxAttempts: 3})
	}
	got, err := r.Enqueue(context.Background(), "jobs", reqs...)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for _, a := range got {
		if info := waitFinished(t, r.Relay, a.ID, 10*time.Second); info.State != queue.Dead {
			t.Fatalf("%s: %s", a.ID, info.State)
		}
	}
	r.stop() // flushes the last summary
	elapsed := time.Since(began)
	lines := logs.Count(t, "relay: deliveries refused or failed")
	failed := strings.Count(logs.String(), `"last_failure":"502 Bad Gateway"`)
	t.Logf("30 failed deliveries in %v: %d summary lines", elapsed.Round(time.Millisecond), lines)
	if lines == 0 || lines > int(elapsed/o.LogEvery)+2 || failed != lines {
		t.Fatalf("%d summary lines in %v (every %v), %d naming the failure:\n%s", lines, elapsed, o.LogEvery, failed, logs.String())
	}
	if n := len(tg.got()); n != 30 {
		t.Fatalf("%d sends, want 30", n)
	}
}

// TestRedirectOffOriginSendsNothing: a target that redirects to another
// server (on loopback, allowed, but another origin): that server receives
// nothing, the task dies with the redirect's status.
func TestRedirectOffOriginSendsNothing(t *testing.T) {
	other := newTarget(t, nil)
	tg := newTarget(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/stolen", http.StatusTemporaryRedirect)
	})
	r := start(t, oneTarget(tg.URL, nil))
	got, err := r.Enqueue(context.Background(), "jobs", relay.Request{URL: "/x", Body: []byte("secret")})
	if err != nil {
		t.Fatal(err)
	}
	info := waitFinished(t, r.Relay, got[0].ID, 5*time.Second)
	if info.State != queue.Dead || !strings.HasPrefix(info.Outcome, "307") {
		t.Fatalf("%s %q", info.State, info.Outcome)
	}
	if n := len(other.got()); n != 0 {
		t.Fatalf("the other origin received %d requests", n)
	}
}

// TestHostileAnswerStillRecorded: a target answering 200 with a huge
// Location and a long body: the kept answer is cut to its bounds and the
// task succeeds once (an answer too large to keep would fail the Ack and
// bring the task back again and again).
func TestHostileAnswerStillRecorded(t *testing.T) {
	tg := newTarget(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", strings.Repeat("L", 200<<10))
		for range 2 {
			w.Header().Add("Content-Type", strings.Repeat("c", 900))
		}
		_, _ = w.Write(make([]byte, 1<<20))
	})
	r := start(t, oneTarget(tg.URL, nil))
	got, err := r.Enqueue(context.Background(), "jobs", relay.Request{URL: "/x"})
	if err != nil {
		t.Fatal(err)
	}
	info := waitFinished(t, r.Relay, got[0].ID, 5*time.Second)
	if info.State != queue.Succeeded || info.Answer == nil || !info.Answer.Truncated || len(info.Answer.Header.Get("Location")) != 1<<10 || len(info.Answer.Body) != relay.DefaultKeepBody {
		t.Fatalf("%s %q answer %+v", info.State, info.Outcome, info.Answer != nil)
	}
	if n := len(tg.got()); n != 1 {
		t.Fatalf("%d sends, want 1", n)
	}
}

// TestLargestBodyFits: the largest body a queue accepts is stored and
// delivered whole (the stored request is base64, a third larger).
func TestLargestBodyFits(t *testing.T) {
	tg := newTarget(t, nil)
	r := start(t, oneTarget(tg.URL, nil))
	var largest int
	for n := 700 << 10; ; n += 4 << 10 {
		_, err := r.Enqueue(context.Background(), "jobs", relay.Request{URL: "/probe", Body: make([]byte, n), Key: fmt.Sprint("k", n)})
		if err != nil {
			var re *relay.RequestError
			if !errors.As(err, &re) || re.Field != "body" || !errors.Is(err, relay.ErrTooLarge) {
				t.Fatalf("a body of %d bytes: %v (want the body refused as too large, not the stored payload)", n, err)
			}
			break
		}
		largest = n
	}
	if largest < 700<<10 {
		t.Fatalf("largest body %d", largest)
	}
}
