package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestEachRequestTakesItsEngine: a request without a body that may be
// sent again takes the fast engine (package upstream), which passes the
// client's Accept-Encoding as it is; one with a body takes
// httputil.ReverseProxy, whose http.Transport asks the upstream for gzip
// itself. The field the upstream sees tells which carried the request;
// both reach it with the path, the forwarding fields and the limit's
// answer fields alike.
func TestEachRequestTakesItsEngine(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Method] = fmt.Sprintf("%s %s ae=%q xff=%q body=%q", r.Method, r.URL.RequestURI(), r.Header.Get("Accept-Encoding"), r.Header.Get("X-Forwarded-For"), body)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	})
	g, _ := start(t, `
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
limits: [{name: per-ip, quota: 100, window: 1m}]
rules: [{name: all, quotas: [{limit: per-ip, key: ip}]}]
`, up.URL)
	tr := &http.Transport{DisableCompression: true} // the client asks for no encoding
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, method := range []string{"GET", "HEAD", "OPTIONS", "POST", "PUT"} {
		var body io.Reader
		if method == "POST" || method == "PUT" {
			body = strings.NewReader("payload")
		}
		req, _ := http.NewRequest(method, "http://"+g.Addr()+"/a/./b?x=1", body)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("RateLimit") == "" {
			t.Errorf("%s: %d, RateLimit %q", method, res.StatusCode, res.Header.Get("RateLimit"))
		}
	}
	want := map[string]string{
		"GET":     `GET /a/b?x=1 ae="" xff="127.0.0.1" body=""`,
		"HEAD":    `HEAD /a/b?x=1 ae="" xff="127.0.0.1" body=""`,
		"OPTIONS": `OPTIONS /a/b?x=1 ae="" xff="127.0.0.1" body=""`,
		"POST":    `POST /a/b?x=1 ae="gzip" xff="127.0.0.1" body="payload"`,
		"PUT":     `PUT /a/b?x=1 ae="gzip" xff="127.0.0.1" body="payload"`,
	}
	mu.Lock()
	defer mu.Unlock()
	for m, w := range want {
		if seen[m] != w {
			t.Errorf("the upstream saw %s, want %s", seen[m], w)
		}
	}
}
