package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/relay/httpapi"
)

// deadShown is how many dead letters the page shows per queue; the
// others are a "more" link away, deadPage at a time.
const (
	deadShown = 20
	deadPage  = 100
)

// pageData is what the page and its live fragment show.
type pageData struct {
	Now      time.Time
	Every    int // the refresh interval, in milliseconds
	Notice   string
	Targets  []targetView
	Problems []string
}

// EverySeconds is the refresh interval in seconds, for people.
func (d pageData) EverySeconds() string { return num(float64(d.Every) / 1000) }

// targetView is one target and its queues.
type targetView struct {
	Name string
	// InUse and Source are the limit in use and where it comes from, as
	// its queues' views say it (limit, limit_source); InUseJSON is the
	// API's encoding of InUse.
	InUse, InUseJSON, Source string
	// Configured describes the configured or API-set limits;
	// ConfiguredSource is relay.Limits' source.
	Configured, ConfiguredSource string
	Queues                       []queueView
}

// queueView is one queue as the page shows it.
type queueView struct {
	httpapi.QueueView
	// Figures are the view's numbers, each with the API's JSON encoding.
	Figures []figure
	// PausedJSON is the API's encoding of Paused.
	PausedJSON string
	Chart      chart
	Dead       deadList
}

// figure is one number of a queue: its label, its API field and value
// as GET /v1/queues/{queue} encodes them, and its text on the page.
type figure struct {
	Label, Field, JSON, Text string
}

// deadList is a page of a queue's dead letters.
type deadList struct {
	Queue   string
	Count   int64
	Letters []deadView
	// More is the next page's URL, "" when there is none.
	More    string
	Problem string
}

// deadView is one dead letter.
type deadView struct {
	ID, Key, Method, URL  string
	Attempts, MaxAttempts int
	Died, DiedAt, Outcome string
	OutcomeShort          string
}

// page is GET /.
func (c *console) page(w http.ResponseWriter, req *http.Request) {
	d := c.build(req.Context())
	d.Notice = c.notice(req.Context(), req.URL.Query())
	c.render(w, http.StatusOK, "page", d)
}

// fragment is the page's live part, which the page's script swaps in.
func (c *console) fragment(w http.ResponseWriter, req *http.Request) {
	c.render(w, http.StatusOK, "live", c.build(req.Context()))
}

// build reads every target and queue.
func (c *console) build(ctx context.Context) pageData {
	now := c.now()
	d := pageData{Now: now, Every: int(refreshEvery / time.Millisecond)}
	byTarget := map[string][]queueView{}
	for _, name := range c.r.Queues() {
		s, err := c.r.Stats(ctx, name)
		if err != nil {
			d.Problems = append(d.Problems, fmt.Sprintf("queue %s: %v", name, err))
			continue
		}
		qv, err := c.queueView(ctx, httpapi.ViewQueue(s, true), now)
		if err != nil {
			d.Problems = append(d.Problems, fmt.Sprintf("queue %s: %v", name, err))
			continue
		}
		byTarget[s.Target] = append(byTarget[s.Target], qv)
	}
	for _, name := range c.r.Targets() {
		tv := targetView{Name: name, Queues: byTarget[name], InUse: "—", InUseJSON: "null", Source: "no queue"}
		if len(tv.Queues) > 0 {
			first := tv.Queues[0].QueueView
			tv.InUse, tv.InUseJSON, tv.Source = rateText(first.Limit), jsonText(first.Limit), first.LimitSource
		}
		limits, source, err := c.r.Limits(name)
		if err != nil {
			d.Problems = append(d.Problems, fmt.Sprintf("target %s: %v", name, err))
		}
		tv.Configured, tv.ConfiguredSource = describeLimits(limits), source
		d.Targets = append(d.Targets, tv)
	}
	return d
}

// queueView renders v, the API's view of one queue.
func (c *console) queueView(ctx context.Context, v httpapi.QueueView, now time.Time) (queueView, error) {
	raw, err := fields(v)
	if err != nil {
		return queueView{}, err
	}
	qv := queueView{QueueView: v, PausedJSON: string(raw["paused"]), Chart: newChart(v.History, now)}
	for _, f := range []struct{ label, field, text string }{
		{"depth", "depth", count(v.Depth)},
		{"ready", "ready", count(v.Ready)},
		{"scheduled", "scheduled", count(v.Scheduled)},
		{"in flight", "in_flight", count(v.InFlight)},
		{"dead", "dead", count(v.Dead)},
		{"effective rate", "effective_rate", rateText(&v.EffectiveRate)},
		{"limit", "limit", rateText(v.Limit)},
		{"limit from", "limit_source", v.LimitSource},
		{"share", "share", rateText(&v.Share)},
		{"429s", "throttled", strconv.FormatUint(v.Throttled, 10)},
		{"failed", "failed", strconv.FormatUint(v.Failed, 10)},
		{"delivered", "delivered", strconv.FormatUint(v.Delivered, 10)},
		{"succeeded", "succeeded", count(v.Succeeded)},
		{"mean wait", "mean_wait_seconds", seconds(v.MeanWait)},
		{"oldest ready", "oldest_age_seconds", seconds(v.OldestAge)},
		{"ETA", "eta_seconds", eta(v.ETA)},
	} {
		js, ok := raw[f.field]
		if !ok {
			return queueView{}, fmt.Errorf("relay console: the API's view has no field %q", f.field)
		}
		qv.Figures = append(qv.Figures, figure{Label: f.label, Field: f.field, JSON: string(js), Text: f.text})
	}
	qv.Dead = deadList{Queue: v.Queue, Count: v.Dead}
	if v.Dead > 0 {
		qv.Dead = c.deadLetters(ctx, v.Queue, "", deadShown, now)
		qv.Dead.Count = v.Dead
	}
	return qv, nil
}

// fields is the view as the API encodes it, field by field.
func fields(v httpapi.QueueView) (map[string]json.RawMessage, error) {
	v.History = nil
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("relay console: encode the view: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("relay console: encode the view: %w", err)
	}
	return raw, nil
}

// deadLetters reads up to n of a queue's dead letters after the task ID
// after, and the link to the next ones.
func (c *console) deadLetters(ctx context.Context, queueName, after string, n int, now time.Time) deadList {
	dl := deadList{Queue: queueName}
	infos, err := c.r.DeadLetters(ctx, queueName, after, n+1)
	if err != nil {
		dl.Problem = "The dead letters cannot be read: " + err.Error()
		return dl
	}
	if len(infos) > n {
		infos = infos[:n]
		dl.More = "/console/queues/" + url.PathEscape(queueName) + "/dead?after=" + url.QueryEscape(infos[n-1].ID)
	}
	for _, ti := range infos {
		dl.Letters = append(dl.Letters, deadView{
			ID: ti.ID, Key: ti.Key, Method: ti.Method, URL: ti.URL,
			Attempts: ti.Attempts, MaxAttempts: ti.MaxAttempts,
			Died: ago(now, ti.Finished), DiedAt: ti.Finished.UTC().Format(time.RFC3339), Outcome: ti.Outcome,
			OutcomeShort: shorten(ti.Outcome, 160),
		})
	}
	return dl
}

// deadPageData is the dead letters' own page.
type deadPageData struct {
	Queue string
	Dead  deadList
}

// deadPage is GET /console/queues/{queue}/dead?after=.
func (c *console) deadPage(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("queue")
	if !slices.Contains(c.r.Queues(), name) {
		c.problem(w, http.StatusNotFound, "No queue is named "+strconv.Quote(name)+".")
		return
	}
	dl := c.deadLetters(req.Context(), name, req.URL.Query().Get("after"), deadPage, c.now())
	if s, err := c.r.Stats(req.Context(), name); err == nil {
		dl.Count = s.Dead
	}
	status := http.StatusOK
	if dl.Problem != "" {
		status = http.StatusBadRequest
	}
	c.render(w, status, "deadpage", deadPageData{Queue: name, Dead: dl})
}

// The actions. Each answers 303 to the page, or the relay's error.

func (c *console) replay(w http.ResponseWriter, req *http.Request) {
	id, ok := c.formValue(w, req, "id")
	if !ok {
		return
	}
	if err := c.r.Replay(req.Context(), id); err != nil {
		c.fail(w, "replay "+id, err)
		return
	}
	c.log.Info("relay console: task replayed", "task", id, "remote", req.RemoteAddr)
	q, _, _ := strings.Cut(id, ".")
	c.done(w, req, url.Values{"did": {"replayed"}, "task": {id}}, q)
}

func (c *console) replayAll(w http.ResponseWriter, req *http.Request) {
	q, ok := c.formValue(w, req, "queue")
	if !ok {
		return
	}
	n, err := c.r.ReplayAll(req.Context(), q)
	if err != nil {
		c.fail(w, "replay the dead letters of "+q, err)
		return
	}
	c.log.Info("relay console: dead letters replayed", "queue", q, "replayed", n, "remote", req.RemoteAddr)
	c.done(w, req, url.Values{"did": {"replayed-all"}, "queue": {q}, "n": {strconv.Itoa(n)}}, q)
}

func (c *console) pause(w http.ResponseWriter, req *http.Request)  { c.setPaused(w, req, true) }
func (c *console) resume(w http.ResponseWriter, req *http.Request) { c.setPaused(w, req, false) }

func (c *console) setPaused(w http.ResponseWriter, req *http.Request, paused bool) {
	q, ok := c.formValue(w, req, "queue")
	if !ok {
		return
	}
	set, did := c.r.Resume, "resumed"
	if paused {
		set, did = c.r.Pause, "paused"
	}
	if err := set(q); err != nil {
		c.fail(w, strings.TrimSuffix(did, "d")+" "+q, err)
		return
	}
	c.log.Info("relay console: queue "+did, "queue", q, "remote", req.RemoteAddr)
	c.done(w, req, url.Values{"did": {did}, "queue": {q}}, q)
}

// formValue reads one field of a small form; a missing one is 400.
func (c *console) formValue(w http.ResponseWriter, req *http.Request, name string) (string, bool) {
	req.Body = http.MaxBytesReader(w, req.Body, 4<<10)
	if err := req.ParseForm(); err != nil {
		c.problem(w, http.StatusBadRequest, "The form could not be read.")
		return "", false
	}
	v := req.PostForm.Get(name)
	if v == "" {
		c.problem(w, http.StatusBadRequest, "The form has no "+name+".")
		return "", false
	}
	return v, true
}

// done sends the browser back to the page, at the queue acted on, with
// the notice of what was done.
func (c *console) done(w http.ResponseWriter, req *http.Request, did url.Values, queueName string) {
	to := "/?" + did.Encode()
	if slices.Contains(c.r.Queues(), queueName) {
		to += "#queue-" + queueName
	}
	http.Redirect(w, req, to, http.StatusSeeOther)
}

// fail answers an action the relay refused.
func (c *console) fail(w http.ResponseWriter, what string, err error) {
	status := httpapi.Status(err)
	if status >= 500 {
		c.log.Error("relay console: "+what, "err", err)
	}
	c.problem(w, status, "Could not "+what+": "+err.Error())
}

// notice is the words for what the last action did; only the console's
// own words, never a parameter's text, and only for what exists.
func (c *console) notice(ctx context.Context, q url.Values) string {
	queueName := q.Get("queue")
	known := slices.Contains(c.r.Queues(), queueName)
	switch q.Get("did") {
	case "replayed":
		if id := q.Get("task"); id != "" {
			if _, err := c.r.Task(ctx, id); err == nil {
				return "Task " + id + " replayed: it is delivered again."
			}
		}
	case "replayed-all":
		if n, err := strconv.Atoi(q.Get("n")); err == nil && n >= 0 && known {
			return fmt.Sprintf("%d dead letters of %s replayed.", n, queueName)
		}
	case "paused":
		if known {
			return "Queue " + queueName + " paused: nothing is delivered until it is resumed."
		}
	case "resumed":
		if known {
			return "Queue " + queueName + " resumed."
		}
	}
	return ""
}

// Formatting: the page's words for the API's numbers.

// count writes an integer as the API does.
func count(n int64) string { return strconv.FormatInt(n, 10) }

// num writes a float as the API's JSON does (no exponent for the
// rounded figures it holds).
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// rateText is a rate in cost per second; "—" when unknown.
func rateText(v *float64) string {
	if v == nil {
		return "—"
	}
	return num(*v) + "/s"
}

// jsonText is v as the API encodes it.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "null"
	}
	return string(b)
}

// eta is the ETA in words; "—" when unknown.
func eta(v *float64) string {
	if v == nil {
		return "—"
	}
	return seconds(*v)
}

// seconds writes a duration in seconds the way people read it: "850 ms",
// "12.5 s", "4m05s", "2h10m", "3d04h".
func seconds(s float64) string {
	return human(time.Duration(s * float64(time.Second)))
}

func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 s"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// ago is how long before now t was.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t).Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	}
	return human(d) + " ago"
}

// shorten keeps the first n runes of s.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for i := range s {
		if n == 0 {
			return s[:i] + "…"
		}
		n--
	}
	return s
}

// describeLimits writes a target's limits: "per-second 50 per 1s".
func describeLimits(limits []sluice.Limit) string {
	if len(limits) == 0 {
		return "none: learned from the target's answers"
	}
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = fmt.Sprintf("%s %s per %s", l.Name, num(l.Quota), l.Window)
	}
	return strings.Join(parts, ", ")
}
