package grpclimit

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Method patterns: exact names, whole services, every method; a service's
// wildcard never reaches into another service or a longer name.
func TestMethodPatterns(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		patterns []string
		method   string
		want     bool
	}{
		{nil, "/a.B/C", true},
		{nil, "anything", true},
		{[]string{"/pkg.Svc/Get"}, "/pkg.Svc/Get", true},
		{[]string{"/pkg.Svc/Get"}, "/pkg.Svc/GetAll", false},
		{[]string{"/pkg.Svc/Get"}, "/pkg.Svc/get", false}, // case-sensitive
		{[]string{"/pkg.Svc/Get"}, "/pkg.Svc2/Get", false},
		{[]string{"/pkg.Svc/*"}, "/pkg.Svc/Get", true},
		{[]string{"/pkg.Svc/*"}, "/pkg.Svc/", false},
		{[]string{"/pkg.Svc/*"}, "/pkg.Svc/Get/x", false},
		{[]string{"/pkg.Svc/*"}, "/pkg.SvcX/Get", false},
		{[]string{"/pkg.Svc/*"}, "/other.pkg.Svc/Get", false},
		{[]string{"/pkg.Svc/*", "/x.Y/Z"}, "/x.Y/Z", true},
		{[]string{"/pkg.Svc/*", "/x.Y/Z"}, "/x.Y/W", false},
		{[]string{"/_a1.b_2.C3/m_4"}, "/_a1.b_2.C3/m_4", true},
	} {
		s, err := compileMethods(c.patterns)
		if err != nil {
			t.Fatalf("%q: %v", c.patterns, err)
		}
		if got := s.match(c.method); got != c.want {
			t.Errorf("%q matches %q: %v, want %v", c.patterns, c.method, got, c.want)
		}
	}
	for _, p := range []string{"", "/", "//", "/a", "/a/", "/a/b/c", "a/b", "/a.b/*x", "/a..b/c", "/a./c", "/1a/b", "/a/1b", "/a b/c", "/*/*", "/a/b*", "/a.*/b"} {
		if _, err := compileMethods([]string{p}); err == nil || !strings.Contains(err.Error(), `"/package.Service/Method" or "/package.Service/*"`) {
			t.Errorf("pattern %q: %v, want an error showing the two forms", p, err)
		}
	}
}

// addr is a net.Addr of another kind than TCP or UDP (say, a custom
// listener's), known only by its text.
type addr struct{ network, s string }

func (a addr) Network() string { return a.network }
func (a addr) String() string  { return a.s }

// Peer keys: IPv4 whole, IPv6 by /64, IPv4-mapped as IPv4, zones dropped;
// no key for a peer without an IP address.
func TestPeerKey(t *testing.T) {
	t.Parallel()
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	key := func(a net.Addr) string {
		k, ok := peerKey(a)
		if !ok {
			return "none"
		}
		return k
	}
	for _, c := range []struct {
		a, b net.Addr
		same bool
	}{
		{tcp("192.0.2.1:1"), tcp("192.0.2.1:2"), true}, // ports do not count
		{tcp("192.0.2.1:1"), tcp("192.0.2.2:1"), false},
		{tcp("192.0.2.1:1"), tcp("[::ffff:192.0.2.1]:1"), true}, // mapped
		{tcp("192.0.2.1:1"), &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 9}, true},
		{tcp("[2001:db8:1:2::1]:1"), tcp("[2001:db8:1:2:ffff::9]:1"), true}, // one /64
		{tcp("[2001:db8:1:2::1]:1"), tcp("[2001:db8:1:3::1]:1"), false},
		{tcp("[fe80::1%eth0]:1"), tcp("[fe80::2%eth1]:1"), true}, // zones dropped
		{tcp("[::]:1"), tcp("0.0.0.0:1"), false},                 // an IPv6 /64 is not an IPv4 /32
		{tcp("192.0.2.1:1"), addr{"custom", "192.0.2.1:443"}, true},
		{tcp("[2001:db8::1]:1"), addr{"custom", "[2001:db8::2]:443"}, true},
	} {
		if ka, kb := key(c.a), key(c.b); (ka == kb) != c.same || ka == "none" || !strings.HasPrefix(ka, "ip:") || len(ka) != 20 {
			t.Errorf("%v and %v: %q and %q, want same=%v", c.a, c.b, ka, kb, c.same)
		}
	}
	for _, a := range []net.Addr{nil, &net.UnixAddr{Name: "/tmp/s", Net: "unix"}, addr{"bufconn", "bufconn"}, &net.TCPAddr{}, addr{"custom", "example.com:80"}} {
		if k, ok := peerKey(a); ok {
			t.Errorf("%v: key %q, want none", a, k)
		}
	}
}

// A declared cost is one positive decimal number, digits with at most one
// inner '.'; whatever the input, parseCost never panics and returns only
// positive finite numbers.
func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"1", "2.5", "0", "0.0", "-1", "+1", "1e3", "NaN", "Inf", "0x10", ".5", "1.", "1..2", " 1", "007", "4500000000.000001", strings.Repeat("9", 32), strings.Repeat("9", 33)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parseCost([]string{s})
		if !ok {
			return
		}
		if !(v > 0) || v != v || len(s) > maxCostLen || strings.Trim(s, "0123456789.") != "" || strings.Count(s, ".") > 1 || s[0] == '.' || s[len(s)-1] == '.' {
			t.Fatalf("parseCost(%q) = %v, ok", s, v)
		}
	})
}

// Rounding of RetryInfo's delay: up to whole milliseconds, at least 1 ms,
// no overflow near the largest duration.
func TestRetryDelayRounding(t *testing.T) {
	t.Parallel()
	const ms = 1_000_000
	for _, c := range [][2]int64{{0, ms}, {1, ms}, {ms, ms}, {ms + 1, 2 * ms}, {20_000 * ms, 20_000 * ms}, {1<<63 - 2, (1<<63 - 2) / ms * ms}} {
		if got := retryDelay(time.Duration(c[0])); int64(got) != c[1] {
			t.Errorf("retryDelay(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

func TestKeyKindString(t *testing.T) {
	t.Parallel()
	for k, want := range map[KeyKind]string{Global: "global", Metadata: "metadata", Method: "method", Peer: "peer", Principal: "principal", 42: "key_kind(42)"} {
		if got := k.String(); got != want {
			t.Errorf("%d: %q, want %q", k, got, want)
		}
	}
}
