package clientip

import (
	"net/netip"
	"strings"
)

// walk returns the client of a request whose peer is a trusted proxy, given
// the lines of the configured forwarding header: the first address from the
// right that is not a trusted proxy, or the last trusted address read when
// the header ends, a hop cannot be read or a bound is reached.
//
// Elements are found from the right of each line, within the rightmost
// MaxHeaderBytes of all lines, with no allocation.
func (r *Resolver) walk(peer netip.Addr, lines []string) netip.Addr {
	last := peer
	budget := MaxHeaderBytes
	hops := 0
	for i := len(lines) - 1; i >= 0 && budget > 0; i-- {
		line := lines[i]
		lo := 0 // the left end of what may be read of line
		if len(line) > budget {
			lo = len(line) - budget
		}
		budget -= len(line) - lo
		end := len(line)
		for {
			sep, ok := r.separator(line, lo, end)
			if !ok {
				return last // unbalanced quotes: the element cannot be read
			}
			if sep < lo && lo > 0 {
				return last // the element is cut by the byte bound
			}
			if elem := trimOWS(line[sep+1 : end]); elem != "" {
				hops++
				if hops > MaxHops {
					return last
				}
				a, ok := r.element(elem)
				if !ok {
					return last
				}
				if !r.trusted(a) {
					return a
				}
				last = a
			}
			if sep < lo {
				break
			}
			end = sep
		}
	}
	return last
}

// separator returns the index of the last element separator (a comma, outside
// quoted strings for Forwarded) in line[lo:end], or lo-1 if there is none. It
// reports false if the quotes of Forwarded do not balance.
func (r *Resolver) separator(line string, lo, end int) (int, bool) {
	if r.kind == ForwardedFor {
		return lo + strings.LastIndexByte(line[lo:end], ','), true
	}
	// Scanning right to left, a quote ends (opens) a quoted string unless it
	// is escaped, which it is when an odd number of backslashes precede it.
	// An escaped quote outside a quoted string is malformed. Each run of
	// backslashes is counted once, by the quote after it: linear.
	inQuote := false
	for i := end - 1; i >= lo; i-- {
		switch line[i] {
		case '"':
			n := 0
			for j := i - 1; j >= lo && line[j] == '\\'; j-- {
				n++
			}
			if n%2 == 1 {
				if !inQuote {
					return 0, false
				}
				continue
			}
			inQuote = !inQuote
		case ',':
			if !inQuote {
				return i, true
			}
		}
	}
	if inQuote {
		return 0, false
	}
	return lo - 1, true
}

// element returns the address of one non-empty list element of the
// configured header.
func (r *Resolver) element(elem string) (netip.Addr, bool) {
	if r.kind == ForwardedFor {
		return parseNode(elem, modeForwardedFor)
	}
	node, ok := forwardedFor(elem)
	if !ok {
		return netip.Addr{}, false
	}
	return parseNode(node, modeForwarded)
}

// forwardedFor returns the value of the "for" parameter of one RFC 7239
// forwarded-element, unquoted: pairs separated by ";" (empty pairs allowed),
// each a token, "=" and a token or quoted-string, with optional whitespace
// around pairs. A token value may also hold ":", "[" and "]", which some
// proxies leave unquoted. It reports false if the element is malformed, has
// no "for" or has two.
func forwardedFor(elem string) (string, bool) {
	var node string
	found := false
	i := 0
	for {
		for i < len(elem) && (elem[i] == ' ' || elem[i] == '\t') {
			i++
		}
		if i == len(elem) {
			break
		}
		if elem[i] == ';' {
			i++
			continue
		}
		j := i
		for j < len(elem) && isTchar(elem[j]) {
			j++
		}
		if j == i || j == len(elem) || elem[j] != '=' {
			return "", false
		}
		name := elem[i:j]
		j++
		var value string
		if j < len(elem) && elem[j] == '"' {
			k, escaped := j+1, false
			for k < len(elem) && elem[k] != '"' {
				if elem[k] == '\\' {
					escaped = true
					k++
				}
				k++
			}
			if k >= len(elem) {
				return "", false // unterminated
			}
			value = elem[j+1 : k]
			if escaped {
				value = unescape(value)
			}
			j = k + 1
		} else {
			k := j
			for k < len(elem) && tchars[elem[k]]&2 != 0 {
				k++
			}
			if k == j {
				return "", false
			}
			value = elem[j:k]
			j = k
		}
		for j < len(elem) && (elem[j] == ' ' || elem[j] == '\t') {
			j++
		}
		if j < len(elem) && elem[j] != ';' {
			return "", false
		}
		if len(name) == 3 && strings.EqualFold(name, "for") {
			if found {
				return "", false // a parameter must not occur twice in an element
			}
			node, found = value, true
		}
		i = j
	}
	return node, found
}

// unescape removes the backslashes of a quoted-string's quoted-pairs.
func unescape(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b = append(b, s[i])
	}
	return string(b)
}

// tchars marks the RFC 9110 token characters (bit 1) and the characters of
// a lenient token value: tchars, ":", "[" and "]" (bit 2).
var tchars = func() (t [256]uint8) {
	for c := range 256 {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0 {
			t[c] = 1 | 2
		}
	}
	t[':'], t['['], t[']'] = 2, 2, 2
	return t
}()

// isTchar reports whether c is an RFC 9110 token character.
func isTchar(c byte) bool { return tchars[c]&1 != 0 }

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// nodeMode is the syntax of an address in parseNode.
type nodeMode uint8

const (
	// modeRemote is http.Request.RemoteAddr: "ip:port", "[ipv6]:port",
	// or an IP without a port ("ipv4", "ipv6", "[ipv6]").
	modeRemote nodeMode = iota
	// modeForwardedFor is an X-Forwarded-For element: as modeRemote.
	modeForwardedFor
	// modeForwarded is an RFC 7239 node: as modeRemote, but IPv6 only in
	// brackets, and the port may be obfuscated ("_abc").
	modeForwarded
)

// parseNode parses an address with an optional port, as net/netip's
// ParseAddr and ParseAddrPort do (decimal port up to 65535; an IPv6 address
// with a port in brackets; IPv4 never in brackets), and also "[ipv6]" without
// a port. The zone of an IPv6 address is dropped without being parsed (so it
// costs no allocation) and an IPv4-mapped address is returned as IPv4.
func parseNode(s string, mode nodeMode) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	host, port, hasPort, brackets := s, "", false, false
	if s[0] == '[' {
		brackets = true
		if s[len(s)-1] == ']' {
			host = s[1 : len(s)-1]
		} else {
			i := strings.LastIndexByte(s, ':')
			if i < 2 || s[i-1] != ']' {
				return netip.Addr{}, false
			}
			host, port, hasPort = s[1:i-1], s[i+1:], true
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		host, port, hasPort = s[:i], s[i+1:], true // one colon: IPv4 with a port
	} else if i >= 0 && mode == modeForwarded {
		return netip.Addr{}, false // IPv6 must be in brackets
	}
	if hasPort && !validPort(port, mode) {
		return netip.Addr{}, false
	}
	zoned := false
	if i := strings.IndexByte(host, '%'); i >= 0 {
		if i == len(host)-1 {
			return netip.Addr{}, false // empty zone
		}
		host, zoned = host[:i], true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	if a.Is4() && (brackets || zoned) {
		return netip.Addr{}, false
	}
	if a.Is6() && hasPort && !brackets {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// validPort reports whether p is a decimal port up to 65535 (leading zeros
// allowed, as strconv.ParseUint does) or, for Forwarded, an obfuscated port:
// "_" and one or more letters, digits, ".", "_" or "-".
func validPort(p string, mode nodeMode) bool {
	if p == "" {
		return false
	}
	if p[0] == '_' && mode == modeForwarded {
		if len(p) == 1 {
			return false
		}
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
		if n > 65535 {
			return false
		}
	}
	return true
}
