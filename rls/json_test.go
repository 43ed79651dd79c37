package rls_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/rls"
)

// jsonService is a Service of the rules table on limiter (the memory
// store on a fake clock when nil); loaded false: no configuration yet.
func jsonService(t *testing.T, limiter sluice.Limiter, loaded bool) *rls.Service {
	t.Helper()
	if limiter == nil {
		ms, err := memstore.New(memstore.Options{Now: limittest.NewClock(limittest.Epoch).Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ms.Close() })
		limiter = ms
	}
	var m atomic.Pointer[rls.Matcher]
	if loaded {
		var matcher rls.Matcher = rules
		m.Store(&matcher)
	}
	svc, err := rls.New(rls.Options{Limiter: limiter, Config: &m})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// post sends a request to h and returns its recorded answer.
func post(h http.Handler, method, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, "/json", strings.NewReader(body)))
	return w
}

const oneKey = `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`

// A decision is the RateLimitResponse with the proto's field names, on one
// line: 200, then 429 once over the limit (3 a minute).
func TestJSONHandlerDecides(t *testing.T) {
	t.Parallel()
	h := rls.JSONHandler(jsonService(t, nil, true))
	for i, want := range []int{200, 200, 200, 429} {
		w := post(h, http.MethodPost, oneKey)
		if w.Code != want {
			t.Fatalf("call %d: %d %s, want %d", i, w.Code, w.Body, want)
		}
		if ct, cc := w.Header().Get("Content-Type"), w.Header().Get("Cache-Control"); ct != "application/json" || cc != "no-store" {
			t.Errorf("call %d: Content-Type %q, Cache-Control %q", i, ct, cc)
		}
	}
	w := post(h, http.MethodPost, `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"other"}]}]}`)
	want := `{"overall_code":"OK","statuses":[{"code":"OK","current_limit":{"name":"per_key","requests_per_unit":3,"unit":"MINUTE"},"limit_remaining":2,"duration_until_reset":"60s"}]}` + "\n"
	if w.Code != 200 || w.Body.String() != want {
		t.Errorf("a fresh key: %d %q, want 200 %q", w.Code, w.Body, want)
	}
}

// Every refusal is JSON {"error": reason}, with its status: the wrong
// method, an empty, malformed, unknown-field, too large or invalid
// request, no configuration, a failing limiter.
func TestJSONHandlerErrors(t *testing.T) {
	t.Parallel()
	h := rls.JSONHandler(jsonService(t, nil, true))
	for _, c := range []struct {
		name, method, body string
		handler            http.Handler
		code               int
		says               string
	}{
		{"GET", http.MethodGet, "", h, 405, "method GET: POST an RLS request"},
		{"PUT", http.MethodPut, oneKey, h, 405, "method PUT: POST an RLS request"},
		{"empty body", http.MethodPost, "", h, 400, "an empty request"},
		{"blank body", http.MethodPost, " \n\t", h, 400, "an empty request"},
		{"malformed", http.MethodPost, `{"domain":"edge"`, h, 400, "not an RLS request in JSON"},
		{"a value of the wrong type", http.MethodPost, `{"domain":"edge","hits_addend":-1}`, h, 400, "not an RLS request in JSON: hits_addend is a whole number from 0 to 4294967295, not -1 (line 1, column 32)"},
		{"not JSON", http.MethodPost, `{"descriptors":"x"}`, h, 400, `not an RLS request in JSON: syntax error: unexpected token "x" (line 1, column 16)`},
		{"not JSON", http.MethodPost, `domain=edge`, h, 400, "not an RLS request in JSON"},
		{"unknown field", http.MethodPost, `{"domain":"edge","nope":1}`, h, 400, "not an RLS request in JSON"},
		{"too large", http.MethodPost, strings.Repeat(" ", rls.MaxJSONBody+1), h, 413, "a request is at most 65536 bytes"},
		{"invalid", http.MethodPost, `{"domain":"edge","descriptors":[]}`, h, 400, "rls: the descriptor list must not be empty"},
		{"bad override", http.MethodPost, `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k"}],"limit":{"requests_per_unit":1}}]}`, h, 400, "a limit override needs a unit of time"},
		{"no configuration", http.MethodPost, oneKey, rls.JSONHandler(jsonService(t, nil, false)), 503, "rls: no configuration loaded"},
		{"limiter fails", http.MethodPost, oneKey, rls.JSONHandler(jsonService(t, failing{}, true)), 503, "garbage reply"},
	} {
		w := post(c.handler, c.method, c.body)
		var body map[string]string
		err := json.Unmarshal(w.Body.Bytes(), &body)
		switch {
		case w.Code != c.code:
			t.Errorf("%s: %d %s, want %d", c.name, w.Code, w.Body, c.code)
		case err != nil || len(body) != 1 || !strings.Contains(body["error"], c.says):
			t.Errorf("%s: body %q (%v), want JSON {\"error\": ...} saying %q", c.name, w.Body, err, c.says)
		case w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Cache-Control") != "no-store":
			t.Errorf("%s: Content-Type %q, Cache-Control %q", c.name, w.Header().Get("Content-Type"), w.Header().Get("Cache-Control"))
		}
		if c.code == 405 && w.Header().Get("Allow") != http.MethodPost {
			t.Errorf("%s: Allow %q, want POST", c.name, w.Header().Get("Allow"))
		}
	}
}
