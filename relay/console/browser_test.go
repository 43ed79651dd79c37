package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/relay/console"
)

// chromium is Debian's Chromium, which the browser test drives.
const chromium = "/usr/bin/chromium"

// screenshotEnv names the file the browser test writes the page's
// screenshot to (PNG); unset, it writes none. With it the test also
// feeds a second queue for a minute, so that the charts have a history:
//
//	SLUICE_CONSOLE_SCREENSHOT=$PWD/docs/relay-console.png go test -run Chromium ./relay/console
const screenshotEnv = "SLUICE_CONSOLE_SCREENSHOT"

// needChromium skips the test, loudly, when Chromium is not installed,
// and fails it in CI (env CI set), where it must be.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and %s is missing (%v): the console's browser test must run in CI", chromium, err)
		}
		t.Skipf("SKIPPED, NOT PASSED: no Chromium at %s (%v): the console was not tested in a browser; apt-get install chromium", chromium, err)
	}
}

// startChromium starts a headless Chromium with a fresh profile (a
// temporary --user-data-dir, which chromedp makes and removes) and
// returns a context whose actions drive its one tab; the browser is
// stopped and waited for when the test ends.
func startChromium(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 900),
	)
	browser, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser to exit
	})
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	return browser
}

// TestInChromium drives the console in a real headless Chromium: the
// login, the figures against the API's, a dead letter's replay button,
// and the page refreshing itself.
func TestInChromium(t *testing.T) {
	needChromium(t)
	t.Parallel()
	shot := os.Getenv(screenshotEnv)

	// The target "api" answers 200 on /ok and 404 elsewhere (the task
	// dies at once) until it is made well; /broken is 404 always.
	var gone goneUntil
	api := newTarget(t, func(w http.ResponseWriter, req *http.Request) {
		switch {
		case strings.HasPrefix(req.URL.Path, "/ok"):
			_, _ = io.WriteString(w, "ok")
		case strings.HasPrefix(req.URL.Path, "/broken"):
			w.WriteHeader(http.StatusNotFound)
		default:
			gone.ServeHTTP(w, req)
		}
	})
	// The target "mailer" throttles one request in ten.
	var mails atomic.Int64
	mailer := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		if mails.Add(1)%10 == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "sent")
	})
	o := options(api.URL)
	o.Targets = append(o.Targets, relay.Target{
		Name: "mailer", Origin: mailer.URL, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Limits: []sluice.Limit{{Name: "per-second", Quota: 20, Window: time.Second}},
	})
	o.Queues = append(o.Queues, relay.Queue{Name: "mail", Target: "mailer"})
	r := newRelay(t, o, true)

	patience := 2 * time.Minute
	if shot != "" {
		patience = 4 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	began := time.Now()
	if shot != "" {
		feed(t, ctx, r)
	}

	ok := enqueue(t, r, relay.Request{URL: "/ok/1"}, relay.Request{URL: "/ok/2"}, relay.Request{URL: "/ok/3"}, relay.Request{URL: "/ok/4"})
	dying := enqueue(t, r, relay.Request{Method: "PUT", URL: "/orders/17", Key: "order-17"}, relay.Request{URL: "/orders/18"}, relay.Request{URL: "/orders/19"})
	later := time.Now().Add(time.Hour)
	enqueue(t, r, relay.Request{URL: "/ok/later/1", NotBefore: later}, relay.Request{URL: "/ok/later/2", NotBefore: later})
	for _, id := range ok {
		waitState(t, r, id, queue.Succeeded, 20*time.Second)
	}
	for _, id := range dying {
		waitState(t, r, id, queue.Dead, 20*time.Second)
	}
	quiet(t, r, "jobs")

	srv := serve(t, r, console.Options{Token: token})
	b := startChromium(t, ctx)

	// The login: ?token= sets the cookie and leaves the address bar.
	if err := chromedp.Do(b, chromedp.Navigate(srv.URL+"/?token="+token), chromedp.WaitVisible(chromedp.CSS("#queue-jobs"))); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	if loc, err := chromedp.Run(b, chromedp.Location()); err != nil || loc != srv.URL+"/" {
		t.Fatalf("after the login the address is %q (%v), want %s/", loc, err, srv.URL)
	}
	if cookies, err := chromedp.Run(b, chromedp.Evaluate[string]("document.cookie")); err != nil || cookies != "" {
		t.Errorf("the page's script sees cookies %q (%v): the session must be HttpOnly", cookies, err)
	}

	// The style sheet and the script are allowed by the page's policy
	// ('self' only): the bar is laid out, the refresh runs.
	if flex, err := chromedp.Run(b, chromedp.Evaluate[string]("getComputedStyle(document.querySelector('header.bar')).display")); err != nil || flex != "flex" {
		t.Errorf("the style sheet is not applied: display %q (%v)", flex, err)
	}

	// The figures are the API's, every one.
	got := figuresIn(t, b, "jobs")
	want := apiView(t, r, "jobs")
	for _, field := range []string{"depth", "ready", "scheduled", "in_flight", "dead", "effective_rate", "limit", "limit_source", "share", "throttled", "failed", "eta_seconds", "paused"} {
		if _, ok := got[field]; !ok {
			t.Errorf("the page does not show %s", field)
		}
	}
	for field, value := range got {
		if string(want[field]) != value {
			t.Errorf("%s: the page shows %s, the API %s", field, value, want[field])
		}
	}
	if got["dead"] != "3" || got["depth"] != "2" || got["scheduled"] != "2" {
		t.Fatalf("figures %v: not 3 dead and 2 scheduled", got)
	}

	// Replay a dead letter with its button, the target well again.
	gone.set()
	replayed := dying[0]
	resp, err := chromedp.RunResponse(b, chromedp.Click(chromedp.CSS(fmt.Sprintf("button[data-replay=%q]", replayed))))
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("click replay: %v %+v", err, resp)
	}
	if notice, err := chromedp.Run(b, chromedp.Text(chromedp.CSS("#notice"))); err != nil || !strings.Contains(notice, replayed+" replayed") {
		t.Errorf("after the replay the notice is %q (%v)", notice, err)
	}
	// The script takes the notice's query out of the address.
	if _, err := chromedp.Run(b, chromedp.Poll[bool](fmt.Sprintf("location.href === %q", srv.URL+"/#queue-jobs"), chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		loc, _ := chromedp.Run(b, chromedp.Location())
		t.Errorf("after the replay the address is %q (%v)", loc, err)
	}
	if info := waitState(t, r, replayed, queue.Succeeded, 20*time.Second); info.Attempts != 1 {
		t.Errorf("the replayed task: %+v, want succeeded at its first attempt of its new life", info)
	}

	// The page refreshes itself: without a reload (the mark stays) its
	// dead count drops to 2, then rises to 3 when a new task dies.
	if _, err := chromedp.Run(b, chromedp.Evaluate[bool]("(window.sluiceMark = true)")); err != nil {
		t.Fatal(err)
	}
	waitFigure(t, b, "jobs", "dead", "2")
	broken := enqueue(t, r, relay.Request{URL: "/broken/1"})
	waitState(t, r, broken[0], queue.Dead, 20*time.Second)
	waitFigure(t, b, "jobs", "dead", "3")
	if mark, err := chromedp.Run(b, chromedp.Evaluate[bool]("window.sluiceMark === true")); err != nil || !mark {
		t.Errorf("the page was reloaded (%v): the refresh must swap the fragment in", err)
	}
	if n, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll('#dead-jobs button[data-replay]').length`)); err != nil || n != 3 {
		t.Errorf("%d replay buttons (%v), want 3", n, err)
	}

	if shot != "" {
		// A minute of the mail queue's traffic gives its chart a history.
		if wait := time.Minute - time.Since(began); wait > 0 {
			t.Logf("waiting %v for the charts", wait.Round(time.Second))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", shot, len(png))
	}

	// Log out: the button's POST passes the origin check, and the browser
	// lands on the login form, which a reload does not leave.
	resp, err = chromedp.RunResponse(b, chromedp.Click(chromedp.CSS(`form[action="/console/logout"] button`)))
	if err != nil || resp.Status != http.StatusUnauthorized {
		t.Fatalf("click log out: %v %+v, want the login page (401)", err, resp)
	}
	if err := chromedp.Do(b, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#login"))); err != nil {
		t.Errorf("after the logout a reload shows no login form: %v", err)
	}
}

// figuresIn reads a queue's figures in the page: field → data-value.
func figuresIn(t *testing.T, b context.Context, queueName string) map[string]string {
	t.Helper()
	js := fmt.Sprintf(`Object.fromEntries(Array.from(document.querySelectorAll('#queue-%s [data-field]'), e => [e.dataset.field, e.dataset.value]))`, queueName)
	got, err := chromedp.Run(b, chromedp.Evaluate[map[string]string](js))
	if err != nil {
		t.Fatalf("read the figures: %v", err)
	}
	return got
}

// waitFigure waits until the page shows want for a queue's field.
func waitFigure(t *testing.T, b context.Context, queueName, field, want string) {
	t.Helper()
	js := fmt.Sprintf(`(document.querySelector('#queue-%s [data-field=%s]') || {dataset: {}}).dataset.value === %q`, queueName, field, want)
	if _, err := chromedp.Run(b, chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the page's %s of %s never became %s (%v); it shows %v", field, queueName, want, err, figuresIn(t, b, queueName))
	}
}

// quiet waits until a queue's figures stop moving: nothing delivered in
// the last five seconds (the span of the effective rate).
func quiet(t *testing.T, r *relay.Relay, queueName string) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for {
		var v struct {
			Rate     float64 `json:"effective_rate"`
			InFlight int64   `json:"in_flight"`
		}
		if err := json.Unmarshal(mustJSON(t, apiView(t, r, queueName)), &v); err != nil {
			t.Fatal(err)
		}
		if v.Rate == 0 && v.InFlight == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("queue %s still moving: %+v", queueName, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// feed enqueues about 25 tasks a second into the queue mail, whose
// target allows 20, until the test ends.
func feed(t *testing.T, ctx context.Context, r *relay.Relay) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	wg.Go(func() {
		tick := time.NewTicker(400 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			reqs := make([]relay.Request, 10)
			for i := range reqs {
				n++
				reqs[i] = relay.Request{URL: fmt.Sprintf("/send/%d", n)}
			}
			if _, err := r.Enqueue(ctx, "mail", reqs...); err != nil && ctx.Err() == nil {
				t.Errorf("feed: %v", err)
				return
			}
		}
	})
}
