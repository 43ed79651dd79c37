package clientip

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// Trusted in the tests: 10.0.0.0/8 and 2001:db8:ffff::/48.
var testTrusted = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}

func newRequest(remote string, h Header, lines ...string) *http.Request {
	req := &http.Request{RemoteAddr: remote, Header: http.Header{}}
	for _, l := range lines {
		req.Header.Add(h.String(), l)
	}
	return req
}

func mustNew(t testing.TB, opts Options) *Resolver {
	t.Helper()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestClient(t *testing.T) {
	t.Parallel()
	xff := Options{TrustedProxies: testTrusted}
	fwd := Options{TrustedProxies: testTrusted, Header: Forwarded}
	long := func(n int, s string) string { return strings.Repeat(s, n) }
	chain := func(n int) string { // n trusted hops 10.0.0.1 … 10.0.0.n, left to right
		var b strings.Builder
		for i := 1; i <= n; i++ {
			if i > 1 {
				b.WriteString(", ")
			}
			b.WriteString(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String())
		}
		return b.String()
	}
	tests := []struct {
		name   string
		opts   Options
		remote string
		xff    []string // X-Forwarded-For lines
		fwd    []string // Forwarded lines
		want   string
	}{
		// The peer.
		{name: "peer ipv4", remote: "203.0.113.7:1234", want: "203.0.113.7/32"},
		{name: "peer ipv6", remote: "[2001:db8:1:2:3:4:5:6]:443", want: "2001:db8:1:2::/64"},
		{name: "peer ipv6 zone", remote: "[fe80::1%eth0]:80", want: "fe80::/64"},
		{name: "peer ipv4-mapped", remote: "[::ffff:203.0.113.7]:80", want: "203.0.113.7/32"},
		{name: "peer without port", remote: "203.0.113.7", want: "203.0.113.7/32"},
		{name: "peer ipv6 without port", remote: "2001:db8::1", want: "2001:db8::/64"},
		{name: "peer ipv6 brackets without port", remote: "[2001:db8::1]", want: "2001:db8::/64"},
		{name: "default trusts no proxy", remote: "10.0.0.1:1", xff: []string{"203.0.113.7"}, fwd: []string{"for=203.0.113.7"}, want: "10.0.0.1/32"},
		{name: "default trusts no proxy, forwarded", opts: Options{Header: Forwarded}, remote: "10.0.0.1:1", fwd: []string{"for=203.0.113.7"}, want: "10.0.0.1/32"},
		{name: "untrusted peer", opts: xff, remote: "198.51.100.1:1", xff: []string{"203.0.113.7"}, want: "198.51.100.1/32"},
		{name: "untrusted ipv6 peer", opts: xff, remote: "[2001:db8:fffe::1]:1", xff: []string{"203.0.113.7"}, want: "2001:db8:fffe::/64"},
		{name: "ipv6 trust does not cover ipv4", opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::/1")}}, remote: "10.0.0.1:1", xff: []string{"203.0.113.7"}, want: "10.0.0.1/32"},
		{name: "trusted mapped peer", opts: xff, remote: "[::ffff:10.0.0.1]:1", xff: []string{"203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "trusted zoned peer", opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("fe80::/64")}}, remote: "[fe80::1%eth0]:1", xff: []string{"203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "mapped trusted prefix", opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}}, remote: "10.0.0.1:1", xff: []string{"203.0.113.7"}, want: "203.0.113.7/32"},

		// X-Forwarded-For.
		{name: "xff trusted peer, no header", opts: xff, remote: "10.0.0.1:1", want: "10.0.0.1/32"},
		{name: "xff empty header", opts: xff, remote: "10.0.0.1:1", xff: []string{""}, want: "10.0.0.1/32"},
		{name: "xff one hop", opts: xff, remote: "10.0.0.1:1", xff: []string{"203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "xff spoofed leftmost", opts: xff, remote: "10.0.0.1:1", xff: []string{"1.1.1.1, 9.9.9.9, 203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "xff spoofed trusted leftmost", opts: xff, remote: "10.0.0.1:1", xff: []string{"10.9.9.9, 203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "xff three trusted hops", opts: xff, remote: "10.0.0.4:1", xff: []string{"1.1.1.1, 203.0.113.7, 10.0.0.2, 10.0.0.3"}, want: "203.0.113.7/32"},
		{name: "xff all trusted", opts: xff, remote: "10.0.0.4:1", xff: []string{"10.0.0.5, 10.0.0.2"}, want: "10.0.0.5/32"},
		{name: "xff ports", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7:5555, 10.0.0.2:80"}, want: "203.0.113.7/32"},
		{name: "xff port leading zeros", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7:00080"}, want: "203.0.113.7/32"},
		{name: "xff ipv6 brackets port", opts: xff, remote: "10.0.0.4:1", xff: []string{"[2001:db8:1:2::9]:443"}, want: "2001:db8:1:2::/64"},
		{name: "xff ipv6 brackets", opts: xff, remote: "10.0.0.4:1", xff: []string{"[2001:db8:1:2::9]"}, want: "2001:db8:1:2::/64"},
		{name: "xff ipv6 bare", opts: xff, remote: "10.0.0.4:1", xff: []string{"2001:db8:1:2::9, 2001:db8:ffff::1"}, want: "2001:db8:1:2::/64"},
		{name: "xff ipv6 zone", opts: xff, remote: "10.0.0.4:1", xff: []string{"fe80::1%eth0"}, want: "fe80::/64"},
		{name: "xff ipv6 zone port", opts: xff, remote: "10.0.0.4:1", xff: []string{"[fe80::1%eth0]:80"}, want: "fe80::/64"},
		{name: "xff mapped", opts: xff, remote: "10.0.0.4:1", xff: []string{"::ffff:203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "xff mapped trusted hop", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7, [::ffff:10.0.0.2]:1"}, want: "203.0.113.7/32"},
		{name: "xff unknown stops at the hop to its right", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7, unknown, 10.0.0.2"}, want: "10.0.0.2/32"},
		{name: "xff unknown rightmost", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7, unknown"}, want: "10.0.0.4/32"},
		{name: "xff obfuscated", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7, _hidden"}, want: "10.0.0.4/32"},
		{name: "xff garbage", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7, not-an-ip, 10.0.0.2"}, want: "10.0.0.2/32"},
		{name: "xff hostname", opts: xff, remote: "10.0.0.4:1", xff: []string{"example.com"}, want: "10.0.0.4/32"},
		{name: "xff bad port", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7:65536"}, want: "10.0.0.4/32"},
		{name: "xff empty port", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7:"}, want: "10.0.0.4/32"},
		{name: "xff obfuscated port", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7:_p"}, want: "10.0.0.4/32"},
		{name: "xff leading zeros", opts: xff, remote: "10.0.0.4:1", xff: []string{"010.0.0.1"}, want: "10.0.0.4/32"},
		{name: "xff ipv4 in brackets", opts: xff, remote: "10.0.0.4:1", xff: []string{"[203.0.113.7]:80"}, want: "10.0.0.4/32"},
		{name: "xff ipv4 zone", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7%eth0"}, want: "10.0.0.4/32"},
		{name: "xff empty zone", opts: xff, remote: "10.0.0.4:1", xff: []string{"fe80::1%"}, want: "10.0.0.4/32"},
		{name: "xff ipv6 port without brackets", opts: xff, remote: "10.0.0.4:1", xff: []string{"2001:db8::1:80"}, want: "2001:db8::/64"},
		{name: "xff space separated", opts: xff, remote: "10.0.0.4:1", xff: []string{"1.1.1.1 203.0.113.7"}, want: "10.0.0.4/32"},
		{name: "xff empty elements and tabs", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7,,\t10.0.0.2\t, ,"}, want: "203.0.113.7/32"},
		{name: "xff lines", opts: xff, remote: "10.0.0.4:1", xff: []string{"1.1.1.1", "203.0.113.7", "10.0.0.2"}, want: "203.0.113.7/32"},
		{name: "xff lines with lists", opts: xff, remote: "10.0.0.4:1", xff: []string{"1.1.1.1, 203.0.113.7", "10.0.0.2, 10.0.0.3"}, want: "203.0.113.7/32"},
		{name: "xff empty last line", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7", ""}, want: "203.0.113.7/32"},
		{name: "xff lines all trusted", opts: xff, remote: "10.0.0.4:1", xff: []string{"10.0.0.9", "10.0.0.2"}, want: "10.0.0.9/32"},
		{name: "xff ignores forwarded", opts: xff, remote: "10.0.0.4:1", fwd: []string{"for=203.0.113.7"}, want: "10.0.0.4/32"},
		{name: "xff read, forwarded not", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7"}, fwd: []string{"for=198.51.100.1"}, want: "203.0.113.7/32"},

		// Forwarded (RFC 7239).
		{name: "fwd one hop", opts: fwd, remote: "10.0.0.1:1", fwd: []string{"for=203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "fwd ignores xff", opts: fwd, remote: "10.0.0.1:1", xff: []string{"203.0.113.7"}, want: "10.0.0.1/32"},
		{name: "fwd read, xff not", opts: fwd, remote: "10.0.0.1:1", xff: []string{"198.51.100.1"}, fwd: []string{"for=203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "fwd case-insensitive name", opts: fwd, remote: "10.0.0.1:1", fwd: []string{"For=203.0.113.7, FOR=10.0.0.2"}, want: "203.0.113.7/32"},
		{name: "fwd quoted port", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for="203.0.113.7:4711"`}, want: "203.0.113.7/32"},
		{name: "fwd ipv6 quoted", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::/64"},
		{name: "fwd ipv6 no port", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for="[2001:db8:cafe::17]"`}, want: "2001:db8:cafe::/64"},
		{name: "fwd ipv6 unquoted brackets", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for=[2001:db8:cafe::17]`}, want: "2001:db8:cafe::/64"},
		{name: "fwd ipv6 without brackets", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for="2001:db8:cafe::17"`}, want: "10.0.0.1/32"},
		{name: "fwd obfuscated port", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for="[2001:db8:cafe::17]:_p-1.x"`}, want: "2001:db8:cafe::/64"},
		{name: "fwd bad obfuscated port", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for="203.0.113.7:_"`}, want: "10.0.0.1/32"},
		{name: "fwd zone", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for="[fe80::1%25eth0]:80"`}, want: "fe80::/64"},
		{name: "fwd mapped", opts: fwd, remote: "10.0.0.1:1", fwd: []string{`for="[::ffff:203.0.113.7]"`}, want: "203.0.113.7/32"},
		{name: "fwd rfc example", opts: fwd, remote: "10.0.0.1:1", fwd: []string{"for=192.0.2.43, for=198.51.100.17;by=10.0.0.1;proto=http;host=example.com"}, want: "198.51.100.17/32"},
		{name: "fwd chain", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for=1.1.1.1, for="203.0.113.7:1";proto=https, for=10.0.0.2, for="[2001:db8:ffff::3]"`}, want: "203.0.113.7/32"},
		{name: "fwd all trusted", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for=10.0.0.5, for=10.0.0.2`}, want: "10.0.0.5/32"},
		{name: "fwd unknown", opts: fwd, remote: "10.0.0.4:1", fwd: []string{"for=203.0.113.7, for=unknown, for=10.0.0.2"}, want: "10.0.0.2/32"},
		{name: "fwd obfuscated", opts: fwd, remote: "10.0.0.4:1", fwd: []string{"for=203.0.113.7, for=_hidden"}, want: "10.0.0.4/32"},
		{name: "fwd obfuscated quoted", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for=203.0.113.7, for="_gazonk"`}, want: "10.0.0.4/32"},
		{name: "fwd no for", opts: fwd, remote: "10.0.0.4:1", fwd: []string{"for=203.0.113.7, proto=https"}, want: "10.0.0.4/32"},
		{name: "fwd two fors", opts: fwd, remote: "10.0.0.4:1", fwd: []string{"for=1.1.1.1;for=203.0.113.7"}, want: "10.0.0.4/32"},
		{name: "fwd empty pairs", opts: fwd, remote: "10.0.0.4:1", fwd: []string{";;for=203.0.113.7; ;"}, want: "203.0.113.7/32"},
		{name: "fwd spaces around pairs", opts: fwd, remote: "10.0.0.4:1", fwd: []string{" proto=http ; for=203.0.113.7 "}, want: "203.0.113.7/32"},
		{name: "fwd space around =", opts: fwd, remote: "10.0.0.4:1", fwd: []string{"for = 203.0.113.7"}, want: "10.0.0.4/32"},
		{name: "fwd empty value", opts: fwd, remote: "10.0.0.4:1", fwd: []string{"for="}, want: "10.0.0.4/32"},
		{name: "fwd garbage", opts: fwd, remote: "10.0.0.4:1", fwd: []string{"203.0.113.7"}, want: "10.0.0.4/32"},
		{name: "fwd quoted comma elsewhere", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for=203.0.113.7;ext="a, for=1.1.1.1", for=10.0.0.2`}, want: "203.0.113.7/32"},
		{name: "fwd escaped quote", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for=203.0.113.7;ext="a\", for=1.1.1.1", for=10.0.0.2`}, want: "203.0.113.7/32"},
		{name: "fwd escaped backslash", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for=1.1.1.1;ext="a\\", for=203.0.113.7`}, want: "203.0.113.7/32"},
		{name: "fwd escaped value", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for="\[2001:db8::1\]"`}, want: "2001:db8::/64"},
		{name: "fwd client's open quote cannot swallow the proxy's element", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for="1.1.1.1, for=203.0.113.7`}, want: "203.0.113.7/32"},
		{name: "fwd client's escaped quote", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for="\", for=203.0.113.7`}, want: "203.0.113.7/32"},
		{name: "fwd unbalanced quote", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for=203.0.113.7, for="10.0.0.2`}, want: "10.0.0.4/32"},
		{name: "fwd escaped quote outside", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for=203.0.113.7, for=10.0.0.2\"`}, want: "10.0.0.4/32"},
		{name: "fwd lines", opts: fwd, remote: "10.0.0.4:1", fwd: []string{"for=1.1.1.1", "for=203.0.113.7, for=10.0.0.2", "for=10.0.0.3"}, want: "203.0.113.7/32"},
		{name: "fwd quote does not span lines", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for="1.1.1.1`, `for=203.0.113.7"`}, want: "10.0.0.4/32"},

		// Prefix lengths.
		{name: "ipv6 /48", opts: Options{IPv6Prefix: 48}, remote: "[2001:db8:1:2::1]:1", want: "2001:db8:1::/48"},
		{name: "ipv6 /128", opts: Options{IPv6Prefix: 128}, remote: "[2001:db8:1:2::1]:1", want: "2001:db8:1:2::1/128"},
		{name: "ipv6 /1", opts: Options{IPv6Prefix: 1}, remote: "[ffff::1]:1", want: "8000::/1"},
		{name: "ipv4 /24", opts: Options{IPv4Prefix: 24}, remote: "203.0.113.7:1", want: "203.0.113.0/24"},
		{name: "ipv4 /1", opts: Options{IPv4Prefix: 1}, remote: "203.0.113.7:1", want: "128.0.0.0/1"},
		{name: "mapped uses the ipv4 length", opts: Options{IPv4Prefix: 24, IPv6Prefix: 120}, remote: "[::ffff:203.0.113.7]:1", want: "203.0.113.0/24"},
		{name: "ipv4 length leaves ipv6 alone", opts: Options{IPv4Prefix: 24}, remote: "[2001:db8:1:2::1]:1", want: "2001:db8:1:2::/64"},
		{name: "forwarded client masked", opts: Options{TrustedProxies: testTrusted, IPv6Prefix: 56}, remote: "10.0.0.1:1", xff: []string{"2001:db8:1:2ff::1"}, want: "2001:db8:1:200::/56"},

		// Bounds.
		{name: "64 hops", opts: xff, remote: "10.0.0.254:1", xff: []string{"203.0.113.7, " + chain(63)}, want: "203.0.113.7/32"},
		{name: "65 hops", opts: xff, remote: "10.0.0.254:1", xff: []string{"203.0.113.7, " + chain(64)}, want: "10.0.0.1/32"},
		{name: "65 hops in lines", opts: fwd, remote: "10.0.0.254:1", fwd: append([]string{"for=203.0.113.7"}, strings.Split(strings.ReplaceAll("for="+chain(64), ", ", "\nfor="), "\n")...), want: "10.0.0.1/32"},
		{name: "empty elements are not hops", opts: xff, remote: "10.0.0.254:1", xff: []string{"203.0.113.7, " + long(100, ",") + chain(63)}, want: "203.0.113.7/32"},
		{name: "huge left part", opts: xff, remote: "10.0.0.4:1", xff: []string{long(100000, "1.1.1.1, ") + "203.0.113.7, 10.0.0.2"}, want: "203.0.113.7/32"},
		{name: "huge left lines", opts: xff, remote: "10.0.0.4:1", xff: []string{long(100000, "x"), long(100000, "1.1.1.1,"), "203.0.113.7"}, want: "203.0.113.7/32"},
		{name: "byte bound", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7", long(MaxHeaderBytes, ",") + "10.0.0.2"}, want: "10.0.0.2/32"},
		{name: "within the byte bound", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7", long(MaxHeaderBytes-len("203.0.113.710.0.0.2"), ",") + "10.0.0.2"}, want: "203.0.113.7/32"},
		{name: "byte bound at a line boundary", opts: xff, remote: "10.0.0.4:1", xff: []string{"203.0.113.7", long(MaxHeaderBytes-len("10.0.0.2"), ",") + "10.0.0.2"}, want: "10.0.0.2/32"},
		{name: "an address cut by the bound is not read", opts: xff, remote: "10.0.0.4:1", xff: []string{"11.2.3.4" + long(MaxHeaderBytes-len("1.2.3.410.0.0.2"), ",") + "10.0.0.2"}, want: "10.0.0.2/32"},
		{name: "forwarded cut inside quotes", opts: fwd, remote: "10.0.0.4:1", fwd: []string{`for="` + long(MaxHeaderBytes, "a") + `", for=10.0.0.2`}, want: "10.0.0.2/32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustNew(t, tt.opts)
			req := newRequest(tt.remote, ForwardedFor, tt.xff...)
			for _, l := range tt.fwd {
				req.Header.Add("Forwarded", l)
			}
			got, err := r.Client(req)
			if err != nil {
				t.Fatalf("Client: %v", err)
			}
			if got.String() != tt.want {
				t.Errorf("Client = %s, want %s", got, tt.want)
			}
			key, err := r.Key(req)
			if err != nil || key != tt.want {
				t.Errorf("Key = %q, %v; want %q", key, err, tt.want)
			}
		})
	}
}

func TestClientRemoteAddrErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10000)
	tests := []struct {
		name, remote, want string
	}{
		{"empty", "", "RemoteAddr is empty"},
		{"garbage", "garbage", `RemoteAddr "garbage" is not`},
		{"unix", "@", `RemoteAddr "@" is not`},
		{"hostname", "localhost:80", `"localhost:80"`},
		{"bad port", "192.0.2.1:http", `"192.0.2.1:http"`},
		{"unclosed bracket", "[::1:80", `"[::1:80"`},
		{"ipv6 port without brackets is an address", "::1:99999x", `"::1:99999x"`},
		{"long", long, `"` + long[:64] + `…"`},
	}
	r := mustNew(t, Options{TrustedProxies: testTrusted})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := newRequest(tt.remote, ForwardedFor, "203.0.113.7")
			_, err := r.Client(req)
			if !errors.Is(err, ErrInvalidRemoteAddr) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Client error = %v, want ErrInvalidRemoteAddr containing %q", err, tt.want)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error is %d bytes long, want it bounded", len(err.Error()))
			}
			if key, err := r.Key(req); key != "" || !errors.Is(err, ErrInvalidRemoteAddr) {
				t.Errorf("Key = %q, %v; want an ErrInvalidRemoteAddr", key, err)
			}
		})
	}
	if _, err := r.Client(nil); !errors.Is(err, ErrInvalidRemoteAddr) {
		t.Errorf("Client(nil) error = %v, want ErrInvalidRemoteAddr", err)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"ipv4 negative", Options{IPv4Prefix: -1}, "IPv4Prefix -1: want 1 to 32"},
		{"ipv4 too long", Options{IPv4Prefix: 33}, "IPv4Prefix 33: want 1 to 32"},
		{"ipv6 negative", Options{IPv6Prefix: -5}, "IPv6Prefix -5: want 1 to 128"},
		{"ipv6 too long", Options{IPv6Prefix: 129}, "IPv6Prefix 129: want 1 to 128"},
		{"header", Options{Header: 7}, "Header 7: want ForwardedFor (0) or Forwarded (1)"},
		{"zero prefix", Options{TrustedProxies: []netip.Prefix{testTrusted[0], {}}}, "TrustedProxies[1]: not a valid prefix"},
		{"trust all ipv4", Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}, "TrustedProxies[0] 0.0.0.0/0: trusts every peer"},
		{"trust all ipv6", Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::/0")}}, "TrustedProxies[0] ::/0: trusts every peer"},
		{"trust all mapped", Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:0.0.0.0/96")}}, "TrustedProxies[0] 0.0.0.0/0: trusts every peer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(tt.opts)
			if r != nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, %v; want ErrInvalidOptions containing %q", r, err, tt.want)
			}
		})
	}
}

func TestNewCopiesTrustedProxies(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	r := mustNew(t, Options{TrustedProxies: trusted})
	trusted[0] = netip.MustParsePrefix("192.0.2.0/24")
	req := newRequest("10.0.0.1:1", ForwardedFor, "203.0.113.7")
	if got, _ := r.Key(req); got != "203.0.113.7/32" {
		t.Errorf("after the caller's slice changed, Key = %q, want 203.0.113.7/32", got)
	}
}

func TestZeroResolver(t *testing.T) {
	t.Parallel()
	var r Resolver
	for remote, want := range map[string]string{"10.0.0.1:1": "10.0.0.1/32", "[2001:db8:1:2::1]:1": "2001:db8:1:2::/64"} {
		got, err := r.Key(newRequest(remote, ForwardedFor, "203.0.113.7"))
		if err != nil || got != want {
			t.Errorf("zero Resolver Key(%s) = %q, %v; want %q", remote, got, err, want)
		}
	}
}

func TestParseTrusted(t *testing.T) {
	t.Parallel()
	got, err := ParseTrusted([]string{"10.0.0.0/8", " 192.0.2.1 ", "2001:db8::/32", "2001:db8::1", "::ffff:10.0.0.0/104"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32", "2001:db8::1/128", "::ffff:10.0.0.0/104"}
	if len(got) != len(want) {
		t.Fatalf("ParseTrusted = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("ParseTrusted[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	if got, err := ParseTrusted(nil); err != nil || len(got) != 0 {
		t.Errorf("ParseTrusted(nil) = %v, %v; want none", got, err)
	}

	long := strings.Repeat("9", 1000)
	bad := []struct {
		name string
		in   []string
		want string
	}{
		{"empty", []string{"10.0.0.0/8", ""}, `trusted proxy 1 "": empty`},
		{"blank", []string{"  "}, `trusted proxy 0 "": empty`},
		{"garbage", []string{"proxy.internal"}, `trusted proxy 0 "proxy.internal": want an address`},
		{"length", []string{"10.0.0.0/33"}, `trusted proxy 0 "10.0.0.0/33": want an address`},
		{"host bits", []string{"10.1.2.3/8"}, `"10.1.2.3/8": bits set beyond the prefix length: did you mean 10.0.0.0/8 or 10.1.2.3/32?`},
		{"zone", []string{"fe80::1%eth0"}, `"fe80::1%eth0": zones are not allowed`},
		{"long", []string{long}, `"` + long[:64] + `…"`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTrusted(tt.in)
			if got != nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseTrusted = %v, %v; want ErrInvalidOptions containing %q", got, err, tt.want)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error is %d bytes long, want it bounded", len(err.Error()))
			}
		})
	}
}

func TestHeaderString(t *testing.T) {
	t.Parallel()
	for h, want := range map[Header]string{ForwardedFor: "X-Forwarded-For", Forwarded: "Forwarded", 9: "Header(9)"} {
		if got := h.String(); got != want {
			t.Errorf("Header(%d).String() = %q, want %q", int(h), got, want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	r := mustNew(t, Options{TrustedProxies: testTrusted})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				a := netip.AddrFrom4([4]byte{203, 0, byte(g), byte(i)})
				req := newRequest("10.0.0.1:1", ForwardedFor, "1.1.1.1, "+a.String()+", 10.0.0.2")
				if got, err := r.Key(req); err != nil || got != a.String()+"/32" {
					t.Errorf("Key = %q, %v; want %s/32", got, err, a)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestKeyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	tests := []struct {
		name string
		opts Options
		req  *http.Request
	}{
		{"peer", Options{}, newRequest("203.0.113.7:1234", ForwardedFor)},
		{"peer ipv6 zone", Options{}, newRequest("[fe80::1%eth0]:1234", ForwardedFor)},
		{"xff 3 hops", Options{TrustedProxies: testTrusted}, newRequest("10.0.0.3:1", ForwardedFor, "1.1.1.1, 203.0.113.7, 10.0.0.1, 10.0.0.2")},
		{"forwarded 3 hops", Options{TrustedProxies: testTrusted, Header: Forwarded}, newRequest("10.0.0.3:1", Forwarded, `for=1.1.1.1, for="[2001:db8::1]:80";proto=https, for=10.0.0.1, for=10.0.0.2`)},
	}
	for _, tt := range tests {
		r := mustNew(t, tt.opts)
		if n := testing.AllocsPerRun(100, func() { _, _ = r.Key(tt.req) }); n > 1 {
			t.Errorf("%s: Key allocates %v times, want at most 1", tt.name, n)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = r.Client(tt.req) }); n != 0 {
			t.Errorf("%s: Client allocates %v times, want 0", tt.name, n)
		}
	}
}
