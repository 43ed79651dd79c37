package clientip

import (
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// checkPrefix fails unless p is what Client may return under opts: valid,
// masked, of the configured length for its family, never IPv4-mapped, no zone.
func checkPrefix(t *testing.T, p netip.Prefix, opts Options) {
	t.Helper()
	bits4, bits6 := cmpOr(opts.IPv4Prefix, 32), cmpOr(opts.IPv6Prefix, 64)
	switch {
	case !p.IsValid():
		t.Fatalf("invalid prefix %v", p)
	case p != p.Masked():
		t.Fatalf("prefix %s is not masked", p)
	case p.Addr().Is4In6():
		t.Fatalf("prefix %s is IPv4-mapped", p)
	case p.Addr().Zone() != "":
		t.Fatalf("prefix %s has a zone", p)
	case p.Addr().Is4() && p.Bits() != bits4, p.Addr().Is6() && p.Bits() != bits6:
		t.Fatalf("prefix %s: want /%d for IPv4, /%d for IPv6", p, bits4, bits6)
	}
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// The reference implementation: written differently from the package (whole
// lines split left to right, net/netip's own parsers), to compare against.

func refTrusted(a netip.Addr) bool {
	for _, p := range testTrusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refNode parses an address the way parseNode is documented to.
func refNode(s string, forwarded bool) (netip.Addr, bool) {
	if forwarded {
		if i := strings.LastIndex(s, ":_"); i >= 0 && (strings.HasSuffix(s[:i], "]") || !strings.Contains(s[:i], ":")) {
			obf := s[i+2:]
			if obf == "" || strings.Trim(obf, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
				return netip.Addr{}, false
			}
			s = s[:i]
		}
		if !strings.HasPrefix(s, "[") && strings.Count(s, ":") > 1 {
			return netip.Addr{}, false
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.WithZone("").Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return a.WithZone("").Unmap(), true
		}
	}
	return netip.Addr{}, false
}

type refHop struct {
	text string
	cut  bool // cut by the byte bound: the walk ends here
	bad  bool // not well-formed: the reference cannot tell
}

// refHops lists the elements of the header's lines, right to left, within
// MaxHeaderBytes. For Forwarded, a line that is cut or whose quotes are not
// well-formed (read left to right) is one bad hop.
func refHops(lines []string, forwarded bool) []refHop {
	var hops []refHop
	budget := MaxHeaderBytes
	for i := len(lines) - 1; i >= 0 && budget > 0; i-- {
		line := lines[i]
		cut := len(line) > budget
		if cut {
			line = line[len(line)-budget:]
		}
		budget -= len(line)
		var parts []string
		if !forwarded {
			parts = strings.Split(line, ",")
		} else if parts = splitQuoted(line, ','); parts == nil || cut {
			hops = append(hops, refHop{bad: true})
			continue
		}
		slices.Reverse(parts)
		for j, p := range parts {
			hops = append(hops, refHop{text: p, cut: cut && j == len(parts)-1})
		}
	}
	return hops
}

// splitQuoted splits s at sep outside quoted strings, read left to right; nil
// if the quotes do not close or a backslash is outside them.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	start, inQuote := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '\\':
			return nil
		case c == '"':
			inQuote = !inQuote
		case c == sep && !inQuote:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	if inQuote {
		return nil
	}
	return append(parts, s[start:])
}

// refForwardedFor returns the for= value of an element, as forwardedFor is
// documented to.
func refForwardedFor(elem string) (string, bool) {
	pairs := splitQuoted(elem, ';')
	if pairs == nil {
		return "", false
	}
	node, n := "", 0
	for _, p := range pairs {
		if p = strings.Trim(p, " \t"); p == "" {
			continue
		}
		name, value, _ := strings.Cut(p, "=")
		if name == "" || strings.IndexFunc(name, func(c rune) bool { return c > 127 || !isTchar(byte(c)) }) >= 0 || !strings.Contains(p, "=") {
			return "", false
		}
		if strings.HasPrefix(value, `"`) {
			if len(value) < 2 || !strings.HasSuffix(value, `"`) {
				return "", false
			}
			var b strings.Builder
			inner := value[1 : len(value)-1]
			for i := 0; i < len(inner); i++ {
				switch inner[i] {
				case '\\':
					if i++; i == len(inner) {
						return "", false
					}
				case '"':
					return "", false
				}
				b.WriteByte(inner[i])
			}
			value = b.String()
		} else if value == "" || strings.IndexFunc(value, func(c rune) bool { return c > 127 || !isTchar(byte(c)) && !strings.ContainsRune(":[]", c) }) >= 0 {
			return "", false
		}
		if strings.EqualFold(name, "for") {
			node, n = value, n+1
		}
	}
	return node, n == 1
}

// refClient is the client the reference finds; ok is false when it cannot
// tell (Forwarded that is cut or not well-formed where the walk reaches it).
func refClient(peer netip.Addr, lines []string, forwarded bool) (_ netip.Addr, ok bool) {
	last, n := peer, 0
	for _, h := range refHops(lines, forwarded) {
		if h.bad {
			return netip.Addr{}, false
		}
		if h.cut {
			return last, true
		}
		elem := strings.Trim(h.text, " \t")
		if elem == "" {
			continue
		}
		if n++; n > MaxHops {
			return last, true
		}
		node := elem
		if forwarded {
			var ok bool
			if node, ok = refForwardedFor(elem); !ok {
				return last, true
			}
		}
		a, ok := refNode(node, forwarded)
		if !ok {
			return last, true
		}
		if !refTrusted(a) {
			return a, true
		}
		last = a
	}
	return last, true
}

// addrFrom makes an address of b: 16 bytes or more IPv6, else IPv4.
func addrFrom(b []byte) (netip.Addr, bool) {
	switch {
	case len(b) >= 16:
		return netip.AddrFrom16([16]byte(b[:16])), true
	case len(b) >= 4:
		return netip.AddrFrom4([4]byte(b[:4])), true
	}
	return netip.Addr{}, false
}

var fuzzTrustedHops = []struct{ xff, fwd string }{
	{"10.0.0.2", "for=10.0.0.2"},
	{"[2001:db8:ffff::5]:443", `for="[2001:db8:ffff::5]:443";proto=https`},
	{"10.1.2.3:8080", `For="10.1.2.3:8080";by=_lb`},
	{"::ffff:10.9.9.9", `for="[::ffff:10.9.9.9]"`},
}

// fuzzSpoof checks that what a client writes on the left cannot change a
// client that trusted proxies appended on the right.
func fuzzSpoof(t *testing.T, r *Resolver, opts Options, attacker string, client []byte, hops uint8) {
	t.Helper()
	a, ok := addrFrom(client)
	if !ok || refTrusted(a.Unmap()) {
		return
	}
	var elem string
	forwarded := opts.Header == Forwarded
	switch {
	case a.Is4() && !forwarded:
		elem = a.String()
	case a.Is4():
		elem = "for=" + a.String()
	case !forwarded:
		elem = "[" + a.String() + "]:" + strconv.Itoa(int(hops))
	default:
		elem = `for="[` + a.String() + `]:` + strconv.Itoa(int(hops)) + `"`
	}
	suffix := []string{elem}
	for i := range int(hops % 5) {
		h := fuzzTrustedHops[(int(hops)+i)%len(fuzzTrustedHops)]
		suffix = append(suffix, map[bool]string{false: h.xff, true: h.fwd}[forwarded])
	}
	want := r.prefix(a.Unmap())
	for _, lines := range [][]string{
		{attacker + ", " + strings.Join(suffix, ", ")},
		{attacker, strings.Join(suffix, ", ")},
		append([]string{attacker}, suffix...),
	} {
		req := &http.Request{RemoteAddr: "10.0.0.1:1", Header: http.Header{opts.Header.String(): lines}}
		got, err := r.Client(req)
		if err != nil || got != want {
			t.Fatalf("client %s behind %d proxies, after %q: Client = %v, %v; want %s", a, len(suffix)-1, shorten(attacker), got, err, want)
		}
	}
}

func fuzzHeader(t *testing.T, h Header, header, attacker string, client []byte, hops uint8) {
	opts := Options{TrustedProxies: testTrusted, Header: h}
	r := mustNew(t, opts)
	lines := strings.Split(header, "\n")
	peer := netip.MustParseAddr("10.0.0.1")
	req := &http.Request{RemoteAddr: "10.0.0.1:1", Header: http.Header{h.String(): lines}}
	got, err := r.Client(req)
	if err != nil {
		t.Fatalf("Client: %v", err)
	}
	checkPrefix(t, got, opts)
	if ref, ok := refClient(peer, lines, h == Forwarded); ok && got != r.prefix(ref) {
		t.Fatalf("Client(%q) = %s, reference %s", shorten(header), got, r.prefix(ref))
	}
	fuzzSpoof(t, r, opts, attacker, client, hops)
}

func FuzzForwardedFor(f *testing.F) {
	for _, s := range []string{
		"", "203.0.113.7", "1.1.1.1, 203.0.113.7, 10.0.0.2", "203.0.113.7:5555, 10.0.0.2:80",
		"[2001:db8:1:2::9]:443", "2001:db8:1:2::9", "fe80::1%eth0", "[fe80::1%eth0]:80", "::ffff:203.0.113.7",
		"203.0.113.7, unknown, 10.0.0.2", "_hidden", "010.0.0.1", "[203.0.113.7]:80", "1.1.1.1\n203.0.113.7\n10.0.0.2",
		"203.0.113.7,,\t10.0.0.2\t, ,", "11.2.3.4" + strings.Repeat(",", MaxHeaderBytes-15) + "10.0.0.2",
		strings.Repeat("10.0.0.9, ", 70),
	} {
		f.Add(s, "1.1.1.1, garbage", []byte{203, 0, 113, 7}, uint8(3))
	}
	f.Add("10.0.0.2", "", []byte("\x20\x01\x0d\xb8\x00\x01\x00\x02\x00\x00\x00\x00\x00\x00\x00\x09"), uint8(1))
	f.Fuzz(func(t *testing.T, header, attacker string, client []byte, hops uint8) {
		fuzzHeader(t, ForwardedFor, header, attacker, client, hops)
	})
}

func FuzzForwarded(f *testing.F) {
	for _, s := range []string{
		"", "for=203.0.113.7", "For=203.0.113.7, FOR=10.0.0.2", `for="203.0.113.7:4711"`, `for="[2001:db8:cafe::17]:4711"`,
		`for=[2001:db8:cafe::17]`, `for="2001:db8:cafe::17"`, `for="[2001:db8:cafe::17]:_p-1.x"`, `for="[fe80::1%25eth0]:80"`,
		"for=192.0.2.43, for=198.51.100.17;by=10.0.0.1;proto=http;host=example.com", "for=unknown", "for=_hidden", `for="_gazonk"`,
		"proto=https", "for=1.1.1.1;for=203.0.113.7", ";;for=203.0.113.7; ;", `for=203.0.113.7;ext="a\", for=1.1.1.1", for=10.0.0.2`,
		`for="1.1.1.1, for=203.0.113.7`, `for="\", for=203.0.113.7`, `for="\[2001:db8::1\]"`, "for=1.1.1.1\nfor=203.0.113.7, for=10.0.0.2",
		`for="` + strings.Repeat("a", MaxHeaderBytes) + `", for=10.0.0.2`,
	} {
		f.Add(s, `for="1.1.1.1`, []byte{203, 0, 113, 7}, uint8(3))
	}
	f.Add("for=10.0.0.2", `\`, []byte("\x20\x01\x0d\xb8\x00\x01\x00\x02\x00\x00\x00\x00\x00\x00\x00\x09"), uint8(1))
	f.Fuzz(func(t *testing.T, header, attacker string, client []byte, hops uint8) {
		fuzzHeader(t, Forwarded, header, attacker, client, hops)
	})
}

func FuzzPrefix(f *testing.F) {
	f.Add([]byte{203, 0, 113, 7}, uint8(0), "", uint16(80), 0, 0)
	f.Add([]byte{203, 0, 113, 7}, uint8(1), "", uint16(80), 24, 0)
	f.Add([]byte("\xfe\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"), uint8(2), "eth0", uint16(0), 0, 48)
	f.Add([]byte("\x20\x01\x0d\xb8\x00\x01\x00\x02\x00\x00\x00\x00\x00\x00\x00\x09"), uint8(3), "", uint16(443), 33, 129)
	f.Add([]byte{255, 255, 255, 255}, uint8(4), "", uint16(65535), 1, 1)
	f.Fuzz(func(t *testing.T, b []byte, form uint8, zone string, port uint16, bits4, bits6 int) {
		a, ok := addrFrom(b)
		if !ok {
			return
		}
		opts := Options{IPv4Prefix: bits4, IPv6Prefix: bits6, TrustedProxies: testTrusted}
		r, err := New(opts)
		if wantErr := bits4 < 0 || bits4 > 32 || bits6 < 0 || bits6 > 128; (err != nil) != wantErr {
			t.Fatalf("New(IPv4Prefix %d, IPv6Prefix %d) error = %v, want error %v", bits4, bits6, err, wantErr)
		}
		if err != nil {
			return
		}
		// The spellings of a, all the same client.
		s, p := a.String(), strconv.Itoa(int(port))
		remote := s + ":" + p
		if a.Is4() {
			switch form % 3 {
			case 1:
				remote = "[::ffff:" + s + "]:" + p
			case 2:
				remote = s
			}
		} else {
			if zone = strings.Map(func(c rune) rune {
				if c < 128 && ('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
					return c
				}
				return -1
			}, zone); zone != "" && form%2 == 1 {
				s += "%" + zone
			}
			remote = "[" + s + "]:" + p
			if form%4 >= 2 {
				remote = s
			}
		}
		got, err := r.Client(&http.Request{RemoteAddr: remote})
		if err != nil {
			t.Fatalf("Client(%q): %v", remote, err)
		}
		checkPrefix(t, got, opts)
		if !got.Contains(a.Unmap()) || got.Addr().Is4() != a.Unmap().Is4() {
			t.Fatalf("Client(%q) = %s, which does not hold %s", remote, got, a)
		}
		key, err := r.Key(&http.Request{RemoteAddr: remote})
		if err != nil || key != got.String() {
			t.Fatalf("Key(%q) = %q, %v; want %q", remote, key, err, got)
		}
		if back, err := netip.ParsePrefix(key); err != nil || back != got {
			t.Fatalf("key %q does not parse back to %s: %v", key, got, err)
		}
		// Forwarded by a trusted proxy, it is the same client.
		for h, v := range map[Header]string{ForwardedFor: remote, Forwarded: "for=" + strconv.Quote(remote)} {
			r := mustNew(t, Options{IPv4Prefix: bits4, IPv6Prefix: bits6, TrustedProxies: testTrusted, Header: h})
			if refTrusted(a.Unmap()) || strings.Count(remote, ":") > 1 && remote[0] != '[' && h == Forwarded {
				continue
			}
			req := &http.Request{RemoteAddr: "10.0.0.1:1", Header: http.Header{h.String(): {"1.1.1.1, " + v}}}
			if got2, err := r.Client(req); err != nil || got2 != got {
				t.Fatalf("%v %q: Client = %v, %v; want %s", h, v, got2, err, got)
			}
		}
	})
}
