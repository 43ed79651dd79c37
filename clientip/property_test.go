package clientip

import (
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// 1e6 random addresses of one /64, in every spelling a server may report
// (zones, IPv6 upper case, any port), are one key; with /128 they are not.
func TestOneKeyForOneIPv6Slash64(t *testing.T) {
	t.Parallel()
	const n = 1_000_000
	const want = "2001:db8:1:2::/64"
	base := netip.MustParseAddr("2001:db8:1:2::").As16()
	rng := rand.New(rand.NewPCG(1, 2))
	remote := func() string {
		a := base
		for i := 8; i < 16; i++ {
			a[i] = byte(rng.Uint32())
		}
		s := netip.AddrFrom16(a).String()
		switch rng.IntN(10) {
		case 0:
			s += "%eth" + strconv.Itoa(rng.IntN(4))
		case 1:
			s = strings.ToUpper(s)
		case 2:
			return s // no port
		}
		return "[" + s + "]:" + strconv.Itoa(rng.IntN(65536))
	}

	r := mustNew(t, Options{TrustedProxies: testTrusted})
	req := &http.Request{Header: http.Header{}}
	keys := map[string]int{}
	for range n {
		req.RemoteAddr = remote()
		key, err := r.Key(req)
		if err != nil {
			t.Fatalf("Key(%q): %v", req.RemoteAddr, err)
		}
		keys[key]++
	}
	if len(keys) != 1 || keys[want] != n {
		t.Fatalf("%d addresses of %s gave %d keys (%v), want 1", n, want, len(keys), firstKeys(keys))
	}

	// The control: kept whole, the same addresses are as many keys.
	r128 := mustNew(t, Options{IPv6Prefix: 128})
	clear(keys)
	for range 10_000 {
		req.RemoteAddr = remote()
		key, _ := r128.Key(req)
		keys[key]++
	}
	if len(keys) < 9_000 {
		t.Fatalf("control: 10000 random addresses at /128 gave only %d keys", len(keys))
	}
}

// spoofValue returns a random forwarding header value a client might send:
// lists of random addresses (some of trusted proxies, some with ports or
// zones), garbage, Forwarded syntax, and long chains past the bounds.
func spoofValue(rng *rand.Rand) string {
	addr := func() string {
		switch rng.IntN(6) {
		case 0:
			return netip.AddrFrom4([4]byte{10, byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}).String()
		case 1, 2:
			return netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}).String()
		case 3:
			var a [16]byte
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			return "[" + netip.AddrFrom16(a).String() + "]:" + strconv.Itoa(rng.IntN(65536))
		case 4:
			return netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), 0, 1}).String() + ":" + strconv.Itoa(rng.IntN(65536))
		}
		return []string{"unknown", "_hidden", "::ffff:" + netip.AddrFrom4([4]byte{byte(rng.Uint32()), 1, 2, 3}).String(), "fe80::1%eth0", ""}[rng.IntN(5)]
	}
	garbage := func() string {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	}
	var parts []string
	switch k := rng.IntN(100); {
	case k < 40:
		for range 1 + rng.IntN(5) {
			parts = append(parts, addr())
		}
	case k < 70:
		parts = append(parts, garbage())
	case k < 98:
		for range 1 + rng.IntN(4) {
			parts = append(parts, "for="+strconv.Quote(addr())+";proto=https")
		}
	default: // long: past MaxHops, and often past MaxHeaderBytes
		parts = append(parts, strings.Repeat(addr()+", ", 50+rng.IntN(1000))+addr())
	}
	return strings.Join(parts, ", ")
}

// 1e6 random forwarding headers from a peer that is not a trusted proxy are
// all the peer's key; a resolver trusting that peer gives many keys.
func TestSpoofedForwardedForFromUntrustedPeer(t *testing.T) {
	t.Parallel()
	const n = 1_000_000
	const peer = "198.51.100.23"
	rng := rand.New(rand.NewPCG(3, 4))
	r := mustNew(t, Options{TrustedProxies: testTrusted})
	req := &http.Request{Header: http.Header{}}
	fill := func() {
		req.RemoteAddr = peer + ":" + strconv.Itoa(1+rng.IntN(65535))
		lines := []string{spoofValue(rng)}
		if rng.IntN(4) == 0 {
			lines = append(lines, spoofValue(rng))
		}
		req.Header["X-Forwarded-For"] = lines
		req.Header["Forwarded"] = []string{spoofValue(rng)}
	}
	keys := map[string]int{}
	for range n {
		fill()
		key, err := r.Key(req)
		if err != nil {
			t.Fatalf("Key: %v", err)
		}
		keys[key]++
	}
	if len(keys) != 1 || keys[peer+"/32"] != n {
		t.Fatalf("%d spoofed headers from %s gave %d keys (%v), want only %s/32", n, peer, len(keys), firstKeys(keys), peer)
	}

	// The control: trusting the peer, the same headers choose many keys.
	for _, h := range []Header{ForwardedFor, Forwarded} {
		gullible := mustNew(t, Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(peer + "/32")}, Header: h})
		clear(keys)
		for range 10_000 {
			fill()
			key, _ := gullible.Key(req)
			keys[key]++
		}
		if len(keys) < 1_000 {
			t.Fatalf("control %v: a resolver trusting the peer gave only %d keys for 10000 spoofed headers", h, len(keys))
		}
	}
}

func firstKeys(keys map[string]int) []string {
	var out []string
	for k := range keys {
		if len(out) == 5 {
			break
		}
		out = append(out, k)
	}
	return out
}
