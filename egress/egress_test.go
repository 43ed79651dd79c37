package egress_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/egress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseOrigin(t *testing.T) {
	for _, c := range []struct {
		in, want, refusal string
	}{
		{in: "http://api.example.com", want: "http://api.example.com"},
		{in: "HTTPS://API.Example.COM:443/", want: "https://api.example.com"},
		{in: "http://api.example.com:8080", want: "http://api.example.com:8080"},
		{in: "http://[::1]:9000", want: "http://[::1]:9000"},
		{in: "https://10.0.0.7", want: "https://10.0.0.7"},
		{in: "ftp://files.example.com", refusal: "scheme must be http or https"},
		{in: "api.example.com", refusal: "scheme must be http or https"},
		{in: "http:api.example.com", refusal: "must be scheme://host[:port]"},
		{in: "https://user:pw@api.example.com", refusal: "user information"},
		{in: "https://api.example.com/v1", refusal: "no path, query or fragment"},
		{in: "https://api.example.com?x=1", refusal: "no path, query or fragment"},
		{in: "https://api.example.com#top", refusal: "no path, query or fragment"},
		{in: "https://", refusal: "no host"},
		{in: "https://api.example.com:0", refusal: "from 1 to 65535"},
		{in: "https://api.example.com:65536", refusal: "from 1 to 65535"},
		{in: "https://api.example.com:", refusal: "empty port"},
		{in: "https://api.example.com:http", refusal: "origin"},
		{in: "http://[fe80::1%25en0]:80", refusal: "zone"},
		{in: "https://bücher.example", refusal: "ASCII form"},
	} {
		o, err := egress.ParseOrigin(c.in)
		switch {
		case c.refusal != "":
			if !errors.Is(err, egress.ErrRefused) || !strings.Contains(err.Error(), c.refusal) {
				t.Errorf("ParseOrigin(%q) = %v, %v; want a refusal saying %q", c.in, o, err, c.refusal)
			}
		case err != nil || o.String() != c.want:
			t.Errorf("ParseOrigin(%q) = %v, %v; want %s", c.in, o, err, c.want)
		}
	}
}

func TestResolve(t *testing.T) {
	o, err := egress.ParseOrigin("https://api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ref, want, refusal string
	}{
		{ref: "/v1/items?page=2", want: "https://api.example.com/v1/items?page=2"},
		{ref: "/v1/a%2Fb", want: "https://api.example.com/v1/a%2Fb"},
		{ref: "/v1/items#frag", want: "https://api.example.com/v1/items"},
		{ref: "https://api.example.com/x", want: "https://api.example.com/x"},
		{ref: "https://API.example.com:443/x", want: "https://api.example.com/x"},
		{ref: "https://api.example.com", want: "https://api.example.com/"},
		{ref: "///evil.example.com/x", want: "https://api.example.com/evil.example.com/x"},
		{ref: "/v1//items", want: "https://api.example.com/v1//items"},
		{ref: "https://api.example.com//evil.example.com/", want: "https://api.example.com/evil.example.com/"},
		{ref: "http://api.example.com/x", refusal: "another origin"},
		{ref: "https://api.example.com:8443/x", refusal: "another origin"},
		{ref: "https://evil.example.com/x", refusal: "another origin"},
		{ref: "//evil.example.com/x", refusal: "another origin"},
		{ref: "https://api.example.com@evil.example.com/", refusal: "user information"},
		{ref: "https://u:p@api.example.com/", refusal: "user information"},
		{ref: "v1/items", refusal: "must begin with /"},
		{ref: "\\\\evil.example.com\\x", refusal: "must begin with /"},
		{ref: "mailto:someone@example.com", refusal: "not a path"},
		{ref: "/a\r\nHost: evil", refusal: "control character"},
		{ref: "", refusal: "empty URL"},
		{ref: "/" + strings.Repeat("a", egress.MaxRef), refusal: "at most"},
	} {
		u, err := o.Resolve(c.ref)
		switch {
		case c.refusal != "":
			if !errors.Is(err, egress.ErrRefused) || !strings.Contains(err.Error(), c.refusal) {
				t.Errorf("Resolve(%q) = %v, %v; want a refusal saying %q", c.ref, u, err, c.refusal)
			}
		case err != nil || u.String() != c.want:
			t.Errorf("Resolve(%q) = %v, %v; want %s", c.ref, u, err, c.want)
		}
	}
}

// Whatever a task gives, a URL that Resolve accepts is on the origin.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"/v1/x?y=1", "https://api.example.com:443/x", "//evil/x", "http://api.example.com/", "/%2e%2e/", "https://api.example.com@evil/"} {
		f.Add(s)
	}
	o, err := egress.ParseOrigin("https://api.example.com")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		u, err := o.Resolve(ref)
		if err != nil {
			if !errors.Is(err, egress.ErrRefused) {
				t.Fatalf("Resolve(%q): an error that is not a refusal: %v", ref, err)
			}
			return
		}
		if u.Scheme != "https" || u.Host != "api.example.com" || u.User != nil {
			t.Fatalf("Resolve(%q) = %s: off the origin", ref, u)
		}
		// What goes on the wire names the same host.
		req, err := http.NewRequest("GET", u.String(), nil)
		if err != nil {
			t.Fatalf("Resolve(%q) = %s, which http cannot send: %v", ref, u, err)
		}
		if req.URL.Hostname() != "api.example.com" || req.URL.Port() != "" {
			t.Fatalf("Resolve(%q) = %s, sent to %s", ref, u, req.URL.Host)
		}
	})
}

func FuzzParseOrigin(f *testing.F) {
	for _, s := range []string{"http://a.example", "https://[::1]:1", "https://a:b@c", "http://x:99999", "http://[fe80::1%25en0]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := egress.ParseOrigin(s)
		if err != nil {
			return
		}
		// The canonical form reads back as the same origin.
		again, err := egress.ParseOrigin(o.String())
		if err != nil || again != o {
			t.Fatalf("ParseOrigin(%q) = %+v, whose String %q reads back as %+v, %v", s, o, o.String(), again, err)
		}
	})
}

func TestCheckHeader(t *testing.T) {
	for _, ok := range []string{"X-Api-Key", "authorization", "Content-Type", "Idempotency-Key", "x_custom.1~", "Traceparent", "X-Amzn-Trace-Id", "X-B3-Traceid"} {
		if err := egress.CheckHeader(ok); err != nil {
			t.Errorf("CheckHeader(%q) = %v, want nil", ok, err)
		}
	}
	for name, refusal := range map[string]string{
		"Host": "set by the transport", "host": "set by the transport", "Content-Length": "set by the transport",
		"transfer-encoding": "set by the transport", "Connection": "set by the transport", "Keep-Alive": "set by the transport",
		"TE": "set by the transport", "Trailer": "set by the transport", "Upgrade": "set by the transport",
		"Proxy-Authorization": "set by the transport", "Proxy-Connection": "set by the transport",
		"Content_Length": "set by the transport", "transfer_encoding": "set by the transport",
		"X-Forwarded-Host": "proxy", "x-forwarded-for": "proxy", "X_Forwarded_Proto": "proxy", "Forwarded": "proxy",
		"X-Real-IP": "proxy", "X-HTTP-Method-Override": "proxy", "X-Original-URL": "proxy",
		// What an attacker probe sent through before they were refused.
		"Fastly-Client-Ip": "proxy", "Client-Ip": "proxy", "X-Cluster-Client-Ip": "proxy", "X-Original-Forwarded-For": "proxy",
		"X-Originating-Ip": "proxy", "X-Remote-Addr": "proxy", "X-Remote-Ip": "proxy", "X-ProxyUser-Ip": "proxy",
		"Forwarded-For": "proxy", "X-Forwarded": "proxy", "X-Envoy-Internal": "proxy", "x_envoy_original_path": "proxy",
		"X-Envoy-External-Address": "proxy", "X-Original-Uri": "proxy", "X-Original-Method": "proxy", "X-Host": "proxy",
		"CF-Connecting-IP": "proxy", "Max-Forwards": "set by the transport", "Early-Data": "set by the transport",
		"X Api": "not allowed", "X-Api:": "not allowed", "X-\r\nHost": "not allowed", "Ünïcode": "not allowed",
		"": "from 1 to", strings.Repeat("a", egress.MaxHeaderName+1): "from 1 to",
	} {
		if err := egress.CheckHeader(name); !errors.Is(err, egress.ErrRefused) || !strings.Contains(err.Error(), refusal) {
			t.Errorf("CheckHeader(%q) = %v, want a refusal saying %q", name, err, refusal)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	var p egress.Policy
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", "93.184.215.14", "::ffff:8.8.8.8", "64:ff9b::808:808"} {
		if err := p.CheckAddr(netip.MustParseAddr(a)); err != nil {
			t.Errorf("CheckAddr(%s) = %v, want nil", a, err)
		}
	}
	for a, what := range map[string]string{
		"127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private", "fd00:ec2::254": "private",
		"169.254.169.254": "cloud metadata", "169.254.1.1": "link-local", "fe80::1": "link-local",
		"100.100.100.200": "shared address space", "0.0.0.0": "unspecified", "::": "unspecified",
		"0.1.2.3": "this network", "224.0.0.1": "multicast", "ff02::1": "multicast",
		"255.255.255.255": "broadcast", "240.1.2.3": "reserved", "198.18.0.5": "benchmarking",
		"192.0.0.170": "IETF", "64:ff9b::a9fe:a9fe": "cloud metadata", "64:ff9b::7f00:1": "loopback",
		"::127.0.0.1": "IPv4-compatible", "::169.254.169.254": "IPv4-compatible", "::ffff:0:7f00:1": "SIIT",
		"2002:7f00:1::1": "6to4", "2002:a9fe:a9fe::1": "6to4", "2001:0:4136:e378::1": "Teredo",
		"fec0::1": "site-local", "100::1": "discard", "64:ff9b:1::a9fe:a9fe": "local-use NAT64",
		"2001:db8::1": "documentation", "192.0.2.1": "documentation", "203.0.113.9": "documentation",
		"168.63.129.16": "WireServer",
	} {
		if err := p.CheckAddr(netip.MustParseAddr(a)); !errors.Is(err, egress.ErrRefused) || !strings.Contains(err.Error(), what) {
			t.Errorf("CheckAddr(%s) = %v, want a refusal saying %q", a, err, what)
		}
	}
	allow := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	if err := allow.CheckAddr(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("allowed loopback: %v", err)
	}
	if err := allow.CheckAddr(netip.MustParseAddr("10.0.0.1")); err == nil {
		t.Error("allowing loopback allowed a private address")
	}
	// A prefix written in IPv6's mapped form allows the IPv4 it maps.
	mapped := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("::ffff:127.0.0.0/104")}}
	if err := mapped.CheckAddr(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("loopback allowed in its mapped form: %v", err)
	}
}

// A redirect's host is compared in ASCII: Unicode case folding takes "ſ"
// for "s" and "K" (Kelvin) for "k", and net/http would dial one name and
// send another in Host. A redirect with user information is refused; one
// that is followed is addressed to the origin as the origin writes it.
func TestCheckRedirectHosts(t *testing.T) {
	o, err := egress.ParseOrigin("https://localhost:8443")
	if err != nil {
		t.Fatal(err)
	}
	for _, loc := range []string{"https://localhoſt:8443/x", "https://locaLhost:8443/x", "https://u:p@localhost:8443/x", "https://localhost:443/x", "http://localhost:8443/x"} {
		req, err := http.NewRequest("GET", loc, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = o.CheckRedirect(req, nil)
		if strings.Contains(loc, "locaLhost") {
			// ASCII upper case is the same host.
			if err != nil || req.URL.Host != "localhost:8443" || req.Host != "" {
				t.Errorf("CheckRedirect(%s) = %v, URL host %q, Host %q; want it followed to localhost:8443", loc, err, req.URL.Host, req.Host)
			}
			continue
		}
		if !errors.Is(err, egress.ErrRefused) {
			t.Errorf("CheckRedirect(%s) = %v, want a refusal", loc, err)
		}
	}
	kelvin, _ := egress.ParseOrigin("https://kiosk.example")
	req, _ := http.NewRequest("GET", "https://Kiosk.example/x", nil)
	if err := kelvin.CheckRedirect(req, nil); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("redirect to the Kelvin-sign look-alike = %v, want a refusal", err)
	}
	padded, _ := http.NewRequest("GET", "https://localhost:08443/x", nil)
	if err := o.CheckRedirect(padded, nil); err != nil || padded.URL.Host != "localhost:8443" {
		t.Errorf("redirect to a zero-padded port = %v, host %q; want it followed to localhost:8443", err, padded.URL.Host)
	}
}

// The check is made on the address connected to, after the name
// resolved: "localhost" is refused at the dial, nothing is sent; allowed
// by prefix, the same request goes through.
func TestDialerChecksTheAddressConnected(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)

	refuse := &http.Client{Transport: egress.Policy{}.Transport(nil)}
	defer refuse.CloseIdleConnections()
	resp, err := refuse.Get(url)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("GET %s through the default policy succeeded", url)
	}
	if !errors.Is(err, egress.ErrRefused) || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("GET %s = %v, want a refusal naming loopback", url, err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the server saw %d requests: something was sent", hits.Load())
	}

	allow := &http.Client{Transport: egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}.Transport(nil)}
	defer allow.CloseIdleConnections()
	resp, err = allow.Get(url)
	if err != nil {
		t.Fatalf("GET %s with loopback allowed: %v", url, err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Errorf("the server saw %d requests, want 1", hits.Load())
	}
}

// A redirect is followed on the origin and refused off it: the other
// server never sees a request.
func TestCheckRedirect(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/x", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/final", http.StatusFound)
		default:
			_, _ = io.WriteString(w, "final")
		}
	}))
	defer target.Close()
	o, err := egress.ParseOrigin(target.URL)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{
		Transport:     egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}.Transport(nil),
		CheckRedirect: o.CheckRedirect,
	}
	defer client.CloseIdleConnections()
	resp, err := client.Get(target.URL + "/here")
	if err != nil {
		t.Fatalf("redirect on the origin: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "final" {
		t.Errorf("redirect on the origin ended at %q", body)
	}
	resp, err = client.Get(target.URL + "/away")
	if err == nil {
		resp.Body.Close()
		t.Fatal("redirect to another origin was followed")
	}
	if !errors.Is(err, egress.ErrRefused) || !strings.Contains(err.Error(), "another origin") {
		t.Errorf("redirect off the origin = %v, want a refusal", err)
	}
	if elsewhere.Load() != 0 {
		t.Errorf("the other origin saw %d requests", elsewhere.Load())
	}
}
