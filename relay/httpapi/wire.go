package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
)

// taskIn is one task as a client writes it.
type taskIn struct {
	Method string `json:"method"`
	// URL or Path: a path on the target, or a URL on its origin.
	URL  string `json:"url"`
	Path string `json:"path"`
	// Headers: each a string or an array of strings.
	Headers map[string]json.RawMessage `json:"headers"`
	// Body is sent as UTF-8 text; BodyBase64 as the bytes it decodes to;
	// JSON as its own encoding, with Content-Type application/json unless
	// Headers set one. At most one of the three.
	Body       *string         `json:"body"`
	BodyBase64 *string         `json:"body_base64"`
	JSON       json.RawMessage `json:"json"`
	Key        string          `json:"key"`
	Cost       float64         `json:"cost"`
	Priority   int             `json:"priority"`
	// NotBefore is an RFC 3339 instant; Delay ("90s", "5m") is from now.
	NotBefore *time.Time `json:"not_before"`
	Delay     string     `json:"delay"`
	Deadline  *time.Time `json:"deadline"`
	// Timeout ("1h") is a deadline counted from now.
	Timeout     string `json:"timeout"`
	MaxAttempts int    `json:"max_attempts"`
}

// fieldError is a task that cannot be read, before the relay sees it.
type fieldError struct {
	field, reason string
}

func (e *fieldError) Error() string { return e.field + ": " + e.reason }

// request turns a task as written into the relay's Request.
func (in taskIn) request(now time.Time) (relay.Request, error) {
	r := relay.Request{Method: in.Method, Key: in.Key, Cost: in.Cost, Priority: in.Priority, MaxAttempts: in.MaxAttempts}
	switch {
	case in.URL != "" && in.Path != "":
		return r, &fieldError{"url", "give url or path, not both"}
	case in.URL != "":
		r.URL = in.URL
	default:
		r.URL = in.Path
	}
	if len(in.Headers) > 0 {
		r.Header = http.Header{}
		for name, raw := range in.Headers {
			var one string
			var many []string
			switch {
			case json.Unmarshal(raw, &one) == nil:
				r.Header.Add(name, one)
			case json.Unmarshal(raw, &many) == nil:
				for _, v := range many {
					r.Header.Add(name, v)
				}
			default:
				return r, &fieldError{"headers", fmt.Sprintf("%q: a string or an array of strings", name)}
			}
		}
	}
	bodies := 0
	if in.Body != nil {
		bodies++
		r.Body = []byte(*in.Body)
	}
	if in.BodyBase64 != nil {
		bodies++
		b, err := base64.StdEncoding.DecodeString(*in.BodyBase64)
		if err != nil {
			return r, &fieldError{"body_base64", "not standard base64: " + err.Error()}
		}
		r.Body = b
	}
	if len(in.JSON) > 0 && !bytes.Equal(in.JSON, []byte("null")) {
		bodies++
		r.Body = []byte(in.JSON)
		if r.Header == nil {
			r.Header = http.Header{}
		}
		if r.Header.Get("Content-Type") == "" {
			r.Header.Set("Content-Type", "application/json")
		}
	}
	if bodies > 1 {
		return r, &fieldError{"body", "give one of body, body_base64 and json"}
	}
	if in.NotBefore != nil {
		r.NotBefore = *in.NotBefore
	}
	if in.Delay != "" {
		if in.NotBefore != nil {
			return r, &fieldError{"delay", "give not_before or delay, not both"}
		}
		d, err := time.ParseDuration(in.Delay)
		if err != nil || d < 0 || d > 366*24*time.Hour {
			return r, &fieldError{"delay", fmt.Sprintf("%q: a duration from 0 to 8784h (\"90s\", \"5m\")", in.Delay)}
		}
		r.NotBefore = now.Add(d)
	}
	if in.Deadline != nil {
		r.Deadline = *in.Deadline
	}
	if in.Timeout != "" {
		if in.Deadline != nil {
			return r, &fieldError{"timeout", "give deadline or timeout, not both"}
		}
		d, err := time.ParseDuration(in.Timeout)
		if err != nil || d <= 0 || d > 366*24*time.Hour {
			return r, &fieldError{"timeout", fmt.Sprintf("%q: a duration from 1ns to 8784h (\"1h\")", in.Timeout)}
		}
		r.Deadline = now.Add(d)
	}
	return r, nil
}

// taskOut is a task as the API shows it.
type taskOut struct {
	ID          string     `json:"id"`
	Queue       string     `json:"queue"`
	State       string     `json:"state"`
	Key         string     `json:"key,omitempty"`
	Method      string     `json:"method,omitempty"`
	URL         string     `json:"url,omitempty"`
	Priority    int        `json:"priority"`
	Cost        float64    `json:"cost"`
	Attempts    int        `json:"attempts"`
	MaxAttempts int        `json:"max_attempts"`
	Enqueued    time.Time  `json:"enqueued"`
	ReadyAt     time.Time  `json:"ready_at,omitzero"`
	Deadline    time.Time  `json:"deadline,omitzero"`
	Finished    time.Time  `json:"finished,omitzero"`
	Outcome     string     `json:"outcome,omitempty"`
	Answer      *answerOut `json:"answer,omitempty"`
}

type answerOut struct {
	Status     int         `json:"status"`
	Header     http.Header `json:"header,omitempty"`
	Body       *string     `json:"body,omitempty"`
	BodyBase64 *string     `json:"body_base64,omitempty"`
	Truncated  bool        `json:"truncated,omitempty"`
}

func showTask(ti relay.TaskInfo) taskOut {
	out := taskOut{
		ID: ti.ID, Queue: ti.Queue, State: ti.State.String(), Key: ti.Key, Method: ti.Method, URL: ti.URL,
		Priority: ti.Priority, Cost: ti.Cost, Attempts: ti.Attempts, MaxAttempts: ti.MaxAttempts,
		Enqueued: ti.Enqueued, ReadyAt: ti.ReadyAt, Deadline: ti.Deadline, Finished: ti.Finished, Outcome: ti.Outcome,
	}
	if ti.State != queue.Leased && ti.State != queue.Queued && ti.State != queue.Scheduled {
		out.ReadyAt = time.Time{}
	}
	if a := ti.Answer; a != nil {
		ao := &answerOut{Status: a.Status, Header: a.Header, Truncated: a.Truncated}
		if utf8.Valid(a.Body) {
			s := string(a.Body)
			ao.Body = &s
		} else {
			s := base64.StdEncoding.EncodeToString(a.Body)
			ao.BodyBase64 = &s
		}
		out.Answer = ao
	}
	return out
}

// QueueView is a queue's figures as the API and the console show them.
type QueueView struct {
	Queue         string    `json:"queue"`
	Target        string    `json:"target"`
	Paused        bool      `json:"paused"`
	Depth         int64     `json:"depth"`
	Ready         int64     `json:"ready"`
	Scheduled     int64     `json:"scheduled"`
	InFlight      int64     `json:"in_flight"`
	Succeeded     int64     `json:"succeeded"`
	Dead          int64     `json:"dead"`
	Cancelled     int64     `json:"cancelled"`
	OldestAge     float64   `json:"oldest_age_seconds"`
	EffectiveRate float64   `json:"effective_rate"`
	Limit         *float64  `json:"limit"`
	LimitSource   string    `json:"limit_source"`
	Share         float64   `json:"share"`
	Delivered     uint64    `json:"delivered"`
	Throttled     uint64    `json:"throttled"`
	Failed        uint64    `json:"failed"`
	DeadLettered  uint64    `json:"dead_lettered"`
	MeanWait      float64   `json:"mean_wait_seconds"`
	ETA           *float64  `json:"eta_seconds"`
	Durability    string    `json:"durability"`
	At            time.Time `json:"at"`
	History       []Sample  `json:"history,omitempty"`
}

// Sample is one point of a queue's history, as the API writes it.
type Sample struct {
	At            time.Time `json:"at"`
	EffectiveRate float64   `json:"effective_rate"`
	Limit         *float64  `json:"limit"`
	Depth         int64     `json:"depth"`
}

func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

// ViewQueue is a queue's figures as the API writes them; the console uses
// it too, so both show the same numbers.
func ViewQueue(s relay.QueueStats, history bool) QueueView {
	out := QueueView{
		Queue: s.Queue, Target: s.Target, Paused: s.Paused, Depth: s.Depth, Ready: s.Ready, Scheduled: s.Scheduled,
		InFlight: s.InFlight, Succeeded: s.Succeeded, Dead: s.Dead, Cancelled: s.Cancelled,
		OldestAge: s.OldestAge.Seconds(), EffectiveRate: round(s.EffectiveRate), Limit: finite(round(s.Limit)),
		LimitSource: s.LimitSource, Share: round(s.Share), Delivered: s.Delivered, Throttled: s.Throttled,
		Failed: s.Failed, DeadLettered: s.DeadLettered, MeanWait: s.MeanWait.Seconds(),
		Durability: s.Durability, At: s.At,
	}
	if s.ETAKnown {
		eta := math.Round(s.ETA.Seconds()*10) / 10
		out.ETA = &eta
	}
	if history {
		for _, h := range s.History {
			out.History = append(out.History, Sample{At: h.At, EffectiveRate: round(h.EffectiveRate), Limit: finite(round(h.Limit)), Depth: h.Depth})
		}
	}
	return out
}

// round keeps three decimals: figures, not noise.
func round(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	return math.Round(v*1000) / 1000
}

// errorOut is every error's body.
type errorOut struct {
	Error string `json:"error"`
	// Line is the failing task's line (NDJSON) or position (JSON), from 1.
	Line  int    `json:"line,omitempty"`
	Field string `json:"field,omitempty"`
}

// Status maps the relay's errors to HTTP statuses: the one place that
// does, for the API and the console.
func Status(err error) int {
	switch {
	case errors.Is(err, relay.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, relay.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, relay.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, relay.ErrNoQueue), errors.Is(err, relay.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, relay.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, relay.ErrUnavailable), errors.Is(err, relay.ErrClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
