package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Header is the kind of forwarding header a Resolver reads from a trusted
// proxy. The zero value is ForwardedFor.
type Header int

const (
	// ForwardedFor is X-Forwarded-For: a comma-separated list of addresses
	// ("203.0.113.7", "203.0.113.7:5501", "2001:db8::1", "[2001:db8::1]:443"),
	// each proxy appending the address of its peer. The default.
	ForwardedFor Header = iota
	// Forwarded is RFC 7239's Forwarded header: comma-separated elements of
	// ";"-separated parameters, of which "for" (case-insensitive) is read,
	// such as for=192.0.2.60 or for="[2001:db8:cafe::17]:4711". As the RFC
	// requires, an IPv6 address must be in brackets; a port or brackets left
	// unquoted (for=192.0.2.60:80) are tolerated. An element with no "for",
	// or with two, is a hop that cannot be read.
	Forwarded
)

// String returns the header's name.
func (h Header) String() string {
	switch h {
	case ForwardedFor:
		return "X-Forwarded-For"
	case Forwarded:
		return "Forwarded"
	}
	return fmt.Sprintf("Header(%d)", int(h))
}

// Bounds on the work done for one request. See the package documentation.
const (
	// MaxHeaderBytes is how many bytes of a forwarding header's values, all
	// its lines together, are read, counted from the right end.
	MaxHeaderBytes = 8 << 10
	// MaxHops is how many addresses of a forwarding header are read,
	// counted from the right end. Empty list elements do not count.
	MaxHops = 64
)

// Default prefix lengths, in bits.
const (
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)

// Errors, wrapped with details.
var (
	// ErrInvalidOptions: Options fail validation in New, or an entry of
	// ParseTrusted is not an address or prefix.
	ErrInvalidOptions = errors.New("clientip: invalid options")
	// ErrInvalidRemoteAddr: a request's RemoteAddr is not an IP address
	// (with or without a port), so not even the peer is known.
	ErrInvalidRemoteAddr = errors.New("clientip: invalid remote address")
)

// Options configure a Resolver. The zero value trusts no proxy: the client is
// always the connection's peer.
type Options struct {
	// TrustedProxies are the networks of the proxies whose forwarding header
	// is believed. Default: none, and headers are ignored entirely. List only
	// proxies that overwrite or append to the header (see the package
	// documentation). IPv4-mapped IPv6 prefixes of 96 bits or more
	// (::ffff:10.0.0.0/104) are taken as the IPv4 prefix they map
	// (10.0.0.0/8); an IPv6 prefix does not match IPv4 peers. A prefix of
	// length 0, which would trust every peer and so let any client choose
	// its address, is refused. ParseTrusted reads them from text.
	TrustedProxies []netip.Prefix
	// Header is the header trusted proxies write: ForwardedFor (the default)
	// or Forwarded. Only this one is read.
	Header Header
	// IPv4Prefix is how many leading bits of an IPv4 client are kept, 1 to
	// 32. Default (0): 32, each address on its own.
	IPv4Prefix int
	// IPv6Prefix is how many leading bits of an IPv6 client are kept, 1 to
	// 128. Default (0): 64, one key per /64.
	IPv6Prefix int
}

// Resolver finds the client of a request. It is immutable after New and safe
// for concurrent use. The zero Resolver is ready to use and behaves as
// New(Options{}): it trusts no proxy.
type Resolver struct {
	trusted4 []netip.Prefix // IPv4 prefixes, masked
	trusted6 []netip.Prefix // IPv6 prefixes, masked, none IPv4-mapped
	header   string         // canonical header name; "" when no proxy is trusted
	kind     Header
	bits4    int // 0 means DefaultIPv4Prefix
	bits6    int // 0 means DefaultIPv6Prefix
}

// New validates opts and returns a Resolver. Its errors wrap
// ErrInvalidOptions and name the field and the rule it breaks.
func New(opts Options) (*Resolver, error) {
	if opts.IPv4Prefix < 0 || opts.IPv4Prefix > 32 {
		return nil, fmt.Errorf("%w: IPv4Prefix %d: want 1 to 32 bits (0 for the default, %d)", ErrInvalidOptions, opts.IPv4Prefix, DefaultIPv4Prefix)
	}
	if opts.IPv6Prefix < 0 || opts.IPv6Prefix > 128 {
		return nil, fmt.Errorf("%w: IPv6Prefix %d: want 1 to 128 bits (0 for the default, %d)", ErrInvalidOptions, opts.IPv6Prefix, DefaultIPv6Prefix)
	}
	if opts.Header != ForwardedFor && opts.Header != Forwarded {
		return nil, fmt.Errorf("%w: Header %d: want ForwardedFor (0) or Forwarded (1)", ErrInvalidOptions, int(opts.Header))
	}
	r := &Resolver{kind: opts.Header, bits4: opts.IPv4Prefix, bits6: opts.IPv6Prefix}
	for i, p := range opts.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("%w: TrustedProxies[%d]: not a valid prefix (zero value, or length out of range)", ErrInvalidOptions, i)
		}
		p = p.Masked()
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("%w: TrustedProxies[%d] %s: trusts every peer, so any client could choose its own address; list the proxies' networks", ErrInvalidOptions, i, p)
		}
		if p.Addr().Is4() {
			r.trusted4 = append(r.trusted4, p)
		} else {
			r.trusted6 = append(r.trusted6, p)
		}
	}
	if len(r.trusted4)+len(r.trusted6) > 0 {
		r.header = opts.Header.String() // both names are canonical MIME header keys
	}
	return r, nil
}

// ParseTrusted parses proxy networks for Options.TrustedProxies: prefixes
// ("10.0.0.0/8", "2001:db8::/32") or single addresses ("192.0.2.1" is
// 192.0.2.1/32, "2001:db8::1" is 2001:db8::1/128). Spaces around an entry
// are ignored. A prefix with bits set beyond its length ("10.1.2.3/8") is
// refused as a likely typo, and so are zones. Errors wrap ErrInvalidOptions
// and name the entry by index and (shortened) text.
func ParseTrusted(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for i, s := range cidrs {
		s = strings.TrimSpace(s)
		bad := func(why string) error {
			return fmt.Errorf("%w: trusted proxy %d %q: %s", ErrInvalidOptions, i, shorten(s), why)
		}
		if s == "" {
			return nil, bad("empty")
		}
		if strings.IndexByte(s, '%') >= 0 {
			return nil, bad("zones are not allowed")
		}
		if strings.IndexByte(s, '/') >= 0 {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, bad(`want an address ("192.0.2.1") or a prefix ("10.0.0.0/8")`)
			}
			if m := p.Masked(); m != p {
				return nil, bad(fmt.Sprintf("bits set beyond the prefix length: did you mean %s or %s?", m, netip.PrefixFrom(p.Addr(), p.Addr().BitLen())))
			}
			out = append(out, p)
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, bad(`want an address ("192.0.2.1") or a prefix ("10.0.0.0/8")`)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Client returns the client of req, as a masked prefix: see the package
// documentation for how it is found. It reads req.RemoteAddr and, when the
// peer is a trusted proxy, req.Header under its canonical name (as net/http
// servers store it). The error, wrapping ErrInvalidRemoteAddr, is returned
// only when req is nil or req.RemoteAddr is not "ip:port", "[ipv6]:port" or
// an IP; a forwarding header never causes an error.
func (r *Resolver) Client(req *http.Request) (netip.Prefix, error) {
	if req == nil {
		return netip.Prefix{}, fmt.Errorf("%w: nil request", ErrInvalidRemoteAddr)
	}
	peer, ok := parseNode(req.RemoteAddr, modeRemote)
	if !ok {
		if req.RemoteAddr == "" {
			return netip.Prefix{}, fmt.Errorf("%w: RemoteAddr is empty (a Unix socket, or a request not received by a server?)", ErrInvalidRemoteAddr)
		}
		return netip.Prefix{}, fmt.Errorf(`%w: RemoteAddr %q is not "ip:port", "[ipv6]:port" or an IP`, ErrInvalidRemoteAddr, shorten(req.RemoteAddr))
	}
	client := peer
	if r.header != "" && r.trusted(peer) {
		client = r.walk(peer, req.Header[r.header])
	}
	return r.prefix(client), nil
}

// Trusted reports whether req came from a trusted proxy: its peer
// (RemoteAddr) is in Options.TrustedProxies. What such a peer says about
// the request — a forwarding header, an identity an authenticating proxy
// set — can be believed; what any other peer says cannot.
func (r *Resolver) Trusted(req *http.Request) bool {
	if req == nil {
		return false
	}
	peer, ok := parseNode(req.RemoteAddr, modeRemote)
	return ok && r.trusted(peer)
}

// Key returns Client(req) as text, such as "203.0.113.7/32" or
// "2001:db8:1:2::/64", for use as a rate limiting key: the text is the
// same for every address of the prefix. It allocates only the string.
func (r *Resolver) Key(req *http.Request) (string, error) {
	p, err := r.Client(req)
	if err != nil {
		return "", err
	}
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	return string(p.AppendTo(buf[:0])), nil
}

// prefix masks a, which is unmapped and has no zone, to the configured length.
func (r *Resolver) prefix(a netip.Addr) netip.Prefix {
	bits := r.bits6
	if a.Is4() {
		bits = r.bits4
		if bits == 0 {
			bits = DefaultIPv4Prefix
		}
	} else if bits == 0 {
		bits = DefaultIPv6Prefix
	}
	p, _ := a.Prefix(bits) // bits is in range for a's family: New checked it
	return p
}

// trusted reports whether a, unmapped and without a zone, is a trusted proxy.
// It is linear in the number of trusted prefixes of a's family.
func (r *Resolver) trusted(a netip.Addr) bool {
	list := r.trusted6
	if a.Is4() {
		list = r.trusted4
	}
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// shorten bounds the input quoted in an error message.
func shorten(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
