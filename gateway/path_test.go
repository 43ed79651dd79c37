package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// muxUpstream is a real net/http ServeMux upstream with an /api/ handler
// and a / handler. It records, for every request that reaches it, the
// request-target it received and the handler that served it ("" when the
// mux answered itself: a redirect).
type muxUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	got  []served
	apis int // requests the /api/ handler served
}

type served struct{ target, handler string }

func newMuxUpstream(t *testing.T) *muxUpstream {
	u := &muxUpstream{}
	mux := http.NewServeMux()
	handle := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			u.mu.Lock()
			u.got[len(u.got)-1].handler = name
			if name == "/api/" {
				u.apis++
			}
			u.mu.Unlock()
			fmt.Fprintf(w, "%s served %s", name, r.RequestURI)
		}
	}
	mux.HandleFunc("/api/", handle("/api/"))
	mux.HandleFunc("/", handle("/"))
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.got = append(u.got, served{target: r.RequestURI})
		u.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// last returns what reached the upstream since n requests had, and how
// many requests have.
func (u *muxUpstream) since(n int) ([]served, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]served(nil), u.got[n:]...), len(u.got)
}

// rawRequest sends a request line written by hand (as curl --path-as-is
// does: nothing cleans or re-encodes the target) and returns the status
// and body of the answer.
func rawRequest(t *testing.T, addr, method, target string, header ...string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := method + " " + target + " HTTP/1.1\r\nHost: gateway.test\r\nConnection: close\r\n"
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// A rule on /api/ (3 per hour) and a catch-all with a large limit.
const apiRule = `
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
limits:
  - {name: api-hourly, quota: 3, window: 1h}
  - {name: plenty, quota: 100000, window: 1h}
rules:
  - name: api
    match: {path: /api/}
    quotas: [{limit: api-hourly, key: ip}]
  - name: rest
    quotas: [{limit: plenty, key: ip}]
`

// pathCorpus is request-targets, each with what the upstream must receive
// ("400": the gateway refuses it). Sent raw.
var pathCorpus = []struct{ target, want string }{
	{"/api/%2e%2e/x", "/x"},
	{"/api/.%2e/x", "/x"},
	{"/api/%2E%2E/x", "/x"},
	{"/api/%2e./x", "/x"},
	{"/api/%2e/x", "/api/x"},
	{"/api/x/..%2f..%2fadmin", "400"},
	{"/api/%2e%2e%2fx", "400"},
	{"/api%2fx", "400"},
	{"/api%2Fx", "400"},
	{"/%2fapi/x", "400"},
	{"/api/x%5c..%5cy", "400"},
	{`/x\..\api\y`, "400"},
	{"/api/%00", "400"},
	{"/api/x%0d%0aX-Injected:%20y", "400"},
	{"/api/%zz", "400"},
	{"*", "400"},
	{"//api/x", "/api/x"},
	{"///api//x//", "/api/x/"},
	{"/x/../api/y", "/api/y"},
	{"/x/%2e%2e/api/y", "/api/y"},
	{"/../api/x", "/api/x"},
	{"/.%2E/api/x", "/api/x"},
	{"/api/./x", "/api/x"},
	{"/api/x/..", "/api/"},
	{"/api/..", "/"},
	{"/api/x/.%2e/.%2e/%2e%2e/y", "/y"},
	{"/api/x/%2e%2e/%2e%2e/admin?q=%2e%2e/", "/admin?q=%2e%2e/"},
	{"/%61pi/x", "/api/x"},
	{"/%61%70%69/x", "/api/x"},
	{"/api/%7e%41", "/api/~A"},
	{"/api/caf%c3%a9", "/api/caf%C3%A9"},
	{"/api/x%3f..", "/api/x%3F.."},
	{"/api", "/api"},           // the mux redirects to /api/, which is counted when followed
	{"/API/x", "/API/x"},       // matching is case-sensitive, as net/http's
	{"/api;/x", "/api;/x"},     // path_parameters: keep, and net/http reads ";" as data
	{"/api%3b/x", "/api%3B/x"}, //
	{"/.well-known/x", "/.well-known/x"},
	{"/api/...", "/api/..."},
	{"http://evil.example/api/%2e%2e/x", "/x"},
	{"http://evil.example", "/"},
	{"/api/items", "/api/items"},
}

// No request reaches the upstream's /api/ handler outside the /api/ rule's
// count, whatever its path: the corpus, sent three times, raw, through a
// real gateway to a real ServeMux. Each entry is refused with 400 or
// forwarded as its normal form.
func TestPathCannotBypassRules(t *testing.T) {
	t.Parallel()
	up := newMuxUpstream(t)
	g, _ := start(t, apiRule, up.URL)
	n := 0
	refused := 0
	for round := range 3 {
		for _, c := range pathCorpus {
			code, body := rawRequest(t, g.Addr(), "GET", c.target)
			var got []served
			got, n = up.since(n)
			switch {
			case c.want == "400":
				if code != 400 || len(got) != 0 {
					t.Errorf("round %d, %s: %d %q, reached the upstream as %v; want 400", round, c.target, code, body, got)
				}
				if strings.HasPrefix(body, "{") {
					var e struct{ Error, Reason string }
					if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error != "bad_request" || e.Reason == "" {
						t.Errorf("%s: body %q: want {\"error\":\"bad_request\",\"reason\":…}", c.target, body)
					}
					refused++
				}
			case code == 429:
				if !strings.HasPrefix(c.want, "/api/") || len(got) != 0 {
					t.Errorf("round %d, %s: 429 (reached the upstream as %v), but %s is not under the /api/ rule", round, c.target, got, c.want)
				}
			case len(got) != 1 || got[0].target != c.want:
				t.Errorf("round %d, %s: %d %q, reached the upstream as %v; want %s", round, c.target, code, body, got, c.want)
			}
		}
	}
	up.mu.Lock()
	apis := up.apis
	up.mu.Unlock()
	_, m := get(t, "http://"+g.AdminAddr()+"/metrics")
	allowed := metricValue(t, m, `sluice_decisions_total{outcome="allowed",rule="api"}`)
	if apis > 3 || apis > allowed {
		t.Errorf("the upstream's /api/ handler served %d requests; the /api/ rule counted %d allowed, of 3 per hour", apis, allowed)
	}
	if apis != 3 {
		t.Errorf("the /api/ handler served %d requests, want 3 (the corpus has more than 3 under /api/)", apis)
	}
	total := 0
	for _, s := range regexp.MustCompile(`(?m)^sluice_requests_refused_total\{reason="[a-z_]+"\} (\d+)$`).FindAllStringSubmatch(m, -1) {
		v, _ := strconv.Atoi(s[1])
		total += v
	}
	if total != refused || refused == 0 {
		t.Errorf("sluice_requests_refused_total counts %d refusals, the gateway answered %d", total, refused)
	}
}

// CONNECT is refused: the gateway proxies paths.
func TestConnectIsRefused(t *testing.T) {
	t.Parallel()
	up := newMuxUpstream(t)
	g, _ := start(t, apiRule, up.URL)
	for _, target := range []string{up.Listener.Addr().String(), "/api/x"} {
		code, body := rawRequest(t, g.Addr(), "CONNECT", target)
		if got, _ := up.since(0); code != 400 || !strings.Contains(body, "CONNECT") || len(got) != 0 {
			t.Errorf("CONNECT %s: %d %q, upstream saw %v", target, code, body, got)
		}
	}
}

// metricValue is the value of the series (0 when absent).
func metricValue(t *testing.T, metrics, series string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`).FindStringSubmatch(metrics)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// OPTIONS * asks about the gateway, not a path the rules can match: it is
// refused with 400 and a JSON reason and counted, as any other target
// that is not a path (net/http's own answer, an empty 200, is off).
func TestOptionsAsteriskIsRefused(t *testing.T) {
	t.Parallel()
	up := newMuxUpstream(t)
	g, _ := start(t, apiRule, up.URL)
	code, body := rawRequest(t, g.Addr(), "OPTIONS", "*")
	var e struct{ Error, Reason string }
	if got, _ := up.since(0); code != 400 || json.Unmarshal([]byte(body), &e) != nil || e.Error != "bad_request" || !strings.Contains(e.Reason, "OPTIONS *") || len(got) != 0 {
		t.Errorf("OPTIONS *: %d %q, the upstream saw %v; want 400 {\"error\":\"bad_request\",\"reason\":…}", code, body, got)
	}
	_, m := get(t, "http://"+g.AdminAddr()+"/metrics")
	if n := metricValue(t, m, `sluice_requests_refused_total{reason="asterisk_form"}`); n != 1 {
		t.Errorf("OPTIONS * refusals counted %d, want 1", n)
	}
}
