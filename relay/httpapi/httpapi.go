// Package httpapi is the relay's HTTP API: an adapter over a
// *relay.Relay that accepts tasks (one, a JSON array, or NDJSON), shows
// them and their queues, cancels, replays dead letters, pauses and resumes
// queues, and changes a target's limits. Every route needs the bearer
// token; errors are JSON {"error": …} with the status of the relay's error
// kind (400 invalid, 403 refused, 404 unknown, 409 conflict, 413 too
// large, 503 cannot keep work now). docs/relay.md is the manual.
package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/relay"
)

// Options configure the API.
type Options struct {
	// Token is the bearer token every request must carry (at least 16
	// characters). Required: without one every request is 403.
	Token string
	// MaxBatchBytes bounds one POST's body; default 32 MiB.
	MaxBatchBytes int64
	// MaxBatch bounds the tasks of one POST; default 10,000.
	MaxBatch int
	// Logger receives the API's rare events; default slog.Default().
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultMaxBatchBytes = 32 << 20
	DefaultMaxBatch      = 10000
)

type api struct {
	r   *relay.Relay
	o   Options
	log *slog.Logger
	// reading bounds the bytes of batches read and decoded at once
	// (MaxBatchBytes × readingBatches): decoding holds about four times a
	// body, and the connection cap alone would let a client with the
	// token hold gigabytes.
	reading *semaphore.Weighted
}

// readingBatches is how many batches of the largest size are decoded at
// once; smaller ones share the same bytes.
const readingBatches = 2

// New returns the API's handler over r, the routes under /v1/.
func New(r *relay.Relay, o Options) http.Handler {
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	a := &api{r: r, o: o, log: o.Logger, reading: semaphore.NewWeighted(readingBatches * o.MaxBatchBytes)}
	if a.log == nil {
		a.log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/queues/{queue}/tasks", a.enqueue)
	mux.HandleFunc("GET /v1/queues", a.queues)
	mux.HandleFunc("GET /v1/queues/{queue}", a.queue)
	mux.HandleFunc("POST /v1/queues/{queue}/pause", a.pause)
	mux.HandleFunc("POST /v1/queues/{queue}/resume", a.resume)
	mux.HandleFunc("GET /v1/queues/{queue}/dead", a.dead)
	mux.HandleFunc("POST /v1/queues/{queue}/dead/replay", a.replayAll)
	mux.HandleFunc("GET /v1/tasks/{id}", a.task)
	mux.HandleFunc("DELETE /v1/tasks/{id}", a.cancel)
	mux.HandleFunc("POST /v1/tasks/{id}/replay", a.replay)
	mux.HandleFunc("GET /v1/targets/{target}/limits", a.limits)
	mux.HandleFunc("PUT /v1/targets/{target}/limits", a.setLimits)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		writeError(w, http.StatusNotFound, errorOut{Error: "no such route: see docs/relay.md for the API"})
	})
	return admin.Handler(admin.Options{Token: o.Token, Enable: "start sluice relay with a token (--token-file or SLUICE_RELAY_TOKEN)"}, mux)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, e errorOut) {
	writeJSON(w, status, e)
}

// fail writes the error of the relay as the API says it.
func fail(w http.ResponseWriter, err error) {
	out := errorOut{Error: err.Error()}
	var re *relay.RequestError
	if errors.As(err, &re) {
		out = errorOut{Error: re.Reason, Line: re.Index + 1, Field: re.Field}
	}
	writeError(w, Status(err), out)
}

type acceptedOut struct {
	ID        string `json:"id"`
	Location  string `json:"location"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// enqueue accepts one task (a JSON object), a batch (a JSON array), or
// NDJSON (Content-Type application/x-ndjson or application/jsonl): all
// accepted, or none with the failing line named.
func (a *api) enqueue(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("queue")
	share := req.ContentLength
	if share < 0 || share > a.o.MaxBatchBytes {
		share = a.o.MaxBatchBytes
	}
	wait, cancel := context.WithTimeout(req.Context(), 5*time.Second)
	err := a.reading.Acquire(wait, max(share, 1))
	cancel()
	if err != nil {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusServiceUnavailable, errorOut{Error: "too many large batches are being read at once: send again in a moment"})
		return
	}
	defer a.reading.Release(max(share, 1))
	body := http.MaxBytesReader(w, req.Body, a.o.MaxBatchBytes)
	data, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, errorOut{Error: fmt.Sprintf("the body is over %d bytes: send smaller batches", a.o.MaxBatchBytes)})
			return
		}
		// The error names the sockets; the client knows its own.
		writeError(w, http.StatusBadRequest, errorOut{Error: "the body could not be read whole (it ended early, or took longer than the server's read timeout)"})
		return
	}
	ct := strings.ToLower(strings.TrimSpace(strings.Split(req.Header.Get("Content-Type"), ";")[0]))
	var tasks []taskIn
	var lines []int // the line of each task: its physical line in NDJSON, its position in an array
	single := false
	var perr *parseError
	switch ct {
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/json-lines":
		tasks, lines, perr = readNDJSON(data, a.o.MaxBatch)
	case "application/json", "":
		tasks, single, perr = readJSON(data, a.o.MaxBatch)
		for i := range tasks {
			lines = append(lines, i+1)
		}
	default:
		writeError(w, http.StatusUnsupportedMediaType, errorOut{Error: fmt.Sprintf("Content-Type %q: send application/json (one task or an array) or application/x-ndjson", ct)})
		return
	}
	if perr != nil {
		writeError(w, perr.status, errorOut{Error: perr.reason, Line: perr.line, Field: perr.field})
		return
	}
	now := time.Now()
	reqs := make([]relay.Request, len(tasks))
	for i, t := range tasks {
		r, err := t.request(now)
		if err != nil {
			fe := err.(*fieldError)
			writeError(w, http.StatusBadRequest, errorOut{Error: fe.reason, Line: lines[i], Field: fe.field})
			return
		}
		reqs[i] = r
	}
	got, err := a.r.Enqueue(req.Context(), name, reqs...)
	if err != nil {
		var re *relay.RequestError
		if errors.As(err, &re) && re.Index >= 0 && re.Index < len(lines) {
			writeError(w, Status(err), errorOut{Error: re.Reason, Line: lines[re.Index], Field: re.Field})
			return
		}
		if errors.Is(err, relay.ErrUnavailable) {
			a.log.Warn("relay api: work refused: the queue cannot keep it", "queue", name, "err", err)
			w.Header().Set("Retry-After", "5")
		}
		fail(w, err)
		return
	}
	out := make([]acceptedOut, len(got))
	for i, g := range got {
		out[i] = acceptedOut{ID: g.ID, Location: "/v1/tasks/" + g.ID, Duplicate: g.Duplicate}
	}
	if single {
		w.Header().Set("Location", out[0].Location)
		writeJSON(w, http.StatusAccepted, out[0])
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"tasks": out})
}

type parseError struct {
	status int
	line   int
	field  string
	reason string
}

// strictTask decodes one task, refusing unknown fields.
func strictTask(raw []byte) (taskIn, error) {
	var t taskIn
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return t, err
	}
	if dec.More() {
		return t, errors.New("more than one JSON value")
	}
	return t, nil
}

func readJSON(data []byte, maxBatch int) ([]taskIn, bool, *parseError) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, false, &parseError{status: 400, reason: "the body is empty: send a task, an array of tasks, or NDJSON"}
	}
	if trimmed[0] != '[' {
		t, err := strictTask(trimmed)
		if err != nil {
			return nil, false, notATask(1, err)
		}
		return []taskIn{t}, true, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(trimmed, &raws); err != nil {
		return nil, false, &parseError{status: 400, reason: "not a JSON array of tasks: " + err.Error()}
	}
	if len(raws) == 0 {
		return nil, false, &parseError{status: 400, reason: "an empty batch"}
	}
	if len(raws) > maxBatch {
		return nil, false, &parseError{status: 413, reason: fmt.Sprintf("%d tasks: at most %d per batch", len(raws), maxBatch)}
	}
	tasks := make([]taskIn, len(raws))
	for i, raw := range raws {
		t, err := strictTask(raw)
		if err != nil {
			return nil, false, notATask(i+1, err)
		}
		tasks[i] = t
	}
	return tasks, false, nil
}

func readNDJSON(data []byte, maxBatch int) ([]taskIn, []int, *parseError) {
	var tasks []taskIn
	var lines []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), len(data)+1)
	line := 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		if len(tasks) == maxBatch {
			return nil, nil, &parseError{status: 413, reason: fmt.Sprintf("more than %d tasks: at most %d per batch", maxBatch, maxBatch)}
		}
		t, err := strictTask(raw)
		if err != nil {
			return nil, nil, notATask(line, err)
		}
		tasks = append(tasks, t)
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, &parseError{status: 400, line: line + 1, reason: err.Error()}
	}
	if len(tasks) == 0 {
		return nil, nil, &parseError{status: 400, reason: "no task in the body"}
	}
	return tasks, lines, nil
}

// notATask is the refusal of a line that does not decode as a task,
// naming the field when the decoder does.
func notATask(line int, err error) *parseError {
	pe := &parseError{status: 400, line: line, reason: "not a task: " + strings.TrimPrefix(err.Error(), "json: ")}
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		pe.field = m[1]
		pe.reason = fmt.Sprintf("not a task: unknown field %q (docs/relay.md lists a task's fields)", m[1])
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		pe.field = te.Field
		pe.reason = fmt.Sprintf("not a task: %s must be %s, not a JSON %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	return pe
}

var unknownField = regexp.MustCompile(`unknown field "([^"]*)"`)

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "float64", "int", "int64":
		return "a number"
	case "map":
		return "an object"
	case "slice":
		return "an array"
	case "ptr", "struct":
		return "a string in RFC 3339 form"
	}
	return "of another kind"
}

func (a *api) queues(w http.ResponseWriter, req *http.Request) {
	out := []QueueView{}
	for _, name := range a.r.Queues() {
		s, err := a.r.Stats(req.Context(), name)
		if err != nil {
			fail(w, err)
			return
		}
		out = append(out, ViewQueue(s, false))
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

func (a *api) queue(w http.ResponseWriter, req *http.Request) {
	s, err := a.r.Stats(req.Context(), req.PathValue("queue"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ViewQueue(s, req.URL.Query().Get("history") == "1"))
}

func (a *api) pause(w http.ResponseWriter, req *http.Request)  { a.setPaused(w, req, true) }
func (a *api) resume(w http.ResponseWriter, req *http.Request) { a.setPaused(w, req, false) }

func (a *api) setPaused(w http.ResponseWriter, req *http.Request, paused bool) {
	name := req.PathValue("queue")
	var err error
	if paused {
		err = a.r.Pause(name)
	} else {
		err = a.r.Resume(name)
	}
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue": name, "paused": paused})
}

func (a *api) dead(w http.ResponseWriter, req *http.Request) {
	n := 100
	if v := req.URL.Query().Get("limit"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, errorOut{Error: fmt.Sprintf("limit %q: from 1 to 1000", v)})
			return
		}
	}
	infos, err := a.r.DeadLetters(req.Context(), req.PathValue("queue"), req.URL.Query().Get("after"), n)
	if err != nil {
		fail(w, err)
		return
	}
	out := map[string]any{"tasks": showTasks(infos)}
	if len(infos) == n {
		out["next"] = infos[len(infos)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

func showTasks(infos []relay.TaskInfo) []taskOut {
	out := make([]taskOut, len(infos))
	for i, ti := range infos {
		out[i] = showTask(ti)
	}
	return out
}

func (a *api) replayAll(w http.ResponseWriter, req *http.Request) {
	n, err := a.r.ReplayAll(req.Context(), req.PathValue("queue"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"replayed": n})
}

func (a *api) task(w http.ResponseWriter, req *http.Request) {
	ti, err := a.r.Task(req.Context(), req.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, showTask(ti))
}

func (a *api) cancel(w http.ResponseWriter, req *http.Request) {
	if err := a.r.Cancel(req.Context(), req.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": req.PathValue("id"), "state": "cancelled"})
}

func (a *api) replay(w http.ResponseWriter, req *http.Request) {
	if err := a.r.Replay(req.Context(), req.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": req.PathValue("id"), "state": "replayed"})
}

// limitIO is a limit as the API reads and writes it.
type limitIO struct {
	Name      string  `json:"name"`
	Algorithm string  `json:"algorithm,omitempty"`
	Quota     float64 `json:"quota"`
	Window    string  `json:"window"`
	Burst     float64 `json:"burst,omitempty"`
}

func (a *api) limits(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("target")
	limits, source, err := a.r.Limits(name)
	if err != nil {
		fail(w, err)
		return
	}
	out := make([]limitIO, len(limits))
	for i, l := range limits {
		out[i] = limitIO{Name: l.Name, Algorithm: l.Algorithm.String(), Quota: l.Quota, Window: l.Window.String(), Burst: l.Burst}
	}
	writeJSON(w, http.StatusOK, map[string]any{"target": name, "limits": out, "source": source})
}

func (a *api) setLimits(w http.ResponseWriter, req *http.Request) {
	var in struct {
		Limits []limitIO `json:"limits"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, errorOut{Error: `the body must be {"limits": [{"name": …, "quota": …, "window": "1s"}]}: ` + err.Error()})
		return
	}
	limits := make([]sluice.Limit, len(in.Limits))
	for i, l := range in.Limits {
		d, err := time.ParseDuration(l.Window)
		if err != nil {
			writeError(w, http.StatusBadRequest, errorOut{Error: fmt.Sprintf("limit %d: window %q is not a duration (\"1s\", \"24h\")", i+1, l.Window), Line: i + 1, Field: "window"})
			return
		}
		alg := sluice.TokenBucket
		if l.Algorithm != "" {
			if err := alg.UnmarshalText([]byte(l.Algorithm)); err != nil {
				writeError(w, http.StatusBadRequest, errorOut{Error: fmt.Sprintf("limit %d: %v", i+1, err), Line: i + 1, Field: "algorithm"})
				return
			}
		}
		limits[i] = sluice.Limit{Name: l.Name, Algorithm: alg, Quota: l.Quota, Window: d, Burst: l.Burst}
	}
	if err := a.r.SetLimits(req.PathValue("target"), limits); err != nil {
		fail(w, err)
		return
	}
	a.limits(w, req)
}
