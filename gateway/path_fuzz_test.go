package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
)

// ruleSeen records the rule of the last decision.
type ruleSeen struct{ rule string }

func (o *ruleSeen) Observe(e enforce.Event) { o.rule = e.Rule }

// muxTransport is an upstream in process: it writes the proxied request
// as it would go on the wire, reads it back as a net/http server does, and
// serves it with a ServeMux whose handlers name themselves.
type muxTransport struct{ mux *http.ServeMux }

func (t muxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var wire bytes.Buffer
	if err := req.Write(&wire); err != nil {
		return nil, err
	}
	in, err := http.ReadRequest(bufio.NewReader(&wire))
	if err != nil {
		return nil, fmt.Errorf("the upstream cannot parse %q: %w", wire.String(), err)
	}
	rec := httptest.NewRecorder()
	t.mux.ServeHTTP(rec, in)
	return rec.Result(), nil
}

// pathChain is the gateway's request path for a configuration, in
// process: guard, the httplimit middleware, a reverse proxy that rewrites
// as the gateway's does, to a ServeMux upstream with /api/ and /.
func pathChain(t testing.TB, request string) (http.Handler, *ruleSeen) {
	cfg, err := config.Parse("fuzz.yaml", []byte(`
request: `+request+`
limits: [{name: plenty, quota: 1000000, window: 1s}]
rules:
  - {name: api, match: {path: /api/}, quotas: [{limit: plenty, key: ip}]}
  - {name: rest, quotas: [{limit: plenty, key: ip}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	seen := &ruleSeen{}
	mw, ip, err := middleware(cfg, store, seen, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, p := range []string{"/api/", "/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Handler", p) })
	}
	target, _ := url.Parse("http://upstream.test")
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport: muxTransport{mux},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t.Errorf("proxying %q: %v", r.URL, err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	refused, err := m.RegisterRefused()
	if err != nil {
		t.Fatal(err)
	}
	return guard(cfg, ip, refused, mw.Handler(proxy)), seen
}

// FuzzPathRouting: for any request-target the gateway's server accepts,
// either the gateway refuses it with 400, or the upstream ServeMux routes
// the forwarded path as the rules routed the path they matched — a request
// reaches the upstream's /api/ handler if and only if the /api/ rule
// counted it. For each escaped_slashes and path_parameters option.
func FuzzPathRouting(f *testing.F) {
	for _, c := range pathCases {
		f.Add(c.raw, uint8(0))
	}
	for _, s := range []string{"/api;x/y", "/x/..;/api/y", "/api%2fx", "/x%5c..%5capi/y", "http://h/api/%2e%2e", "/a/b/../../../api/", "/api/%c3%28"} {
		f.Add(s, uint8(3))
	}
	chains := map[uint8]http.Handler{}
	seens := map[uint8]*ruleSeen{}
	for mode := range uint8(6) {
		slashes := []string{"reject", "unescape"}[mode%2]
		params := []string{"keep", "strip", "reject"}[mode/2]
		chains[mode], seens[mode] = pathChain(f, "{escaped_slashes: "+slashes+", path_parameters: "+params+"}")
	}
	f.Fuzz(func(t *testing.T, target string, mode uint8) {
		mode %= 6
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: gateway.test\r\n\r\n")))
		if err != nil || req.RequestURI != target {
			return // the server refuses it (or it is not one request-target)
		}
		req.RemoteAddr = "192.0.2.1:1234"
		seen := seens[mode]
		seen.rule = ""
		rec := httptest.NewRecorder()
		chains[mode].ServeHTTP(rec, req)
		if rec.Code == http.StatusBadRequest {
			if seen.rule != "" {
				t.Fatalf("%q: refused after the rule %q counted it", target, seen.rule)
			}
			return
		}
		handler := rec.Header().Get("X-Handler")
		if (handler == "/api/") != (seen.rule == "api") {
			t.Fatalf("%q (mode %d): the rule %q counted it, the upstream's handler %q served it (forwarded as %q)",
				target, mode, seen.rule, handler, req.URL.EscapedPath())
		}
	})
}
