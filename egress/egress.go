// Package egress decides where sluice may send requests on a task's
// behalf: to its target's one origin, over addresses that are not the
// sending host's own network, with headers that cannot smuggle. It is the
// relay's "no open proxy" rule, apart from the relay so that every
// outbound path can share it.
//
// Three checks, each at the moment it can be made:
//
//   - ParseOrigin, when a target is configured: an origin is a scheme
//     (http or https), a host and a port, and nothing else.
//   - Origin.Resolve and CheckHeader, when a task is accepted: its path or
//     URL must stay on the origin, and its header names must not be ones
//     the transport owns (Host, hop-by-hop, framing).
//   - Policy.Dialer and Origin.CheckRedirect, when a request is sent: the
//     address actually connected to is checked after the name resolved
//     (so DNS cannot point a public name at an internal address between
//     the check and the connection), and a redirect off the origin is not
//     followed.
//
// Refused unless a Policy allows them by prefix: loopback, private
// (RFC 1918, unique local fc00::/7), link-local (169.254.0.0/16 with the
// cloud metadata address 169.254.169.254, fe80::/10), shared address
// space (100.64.0.0/10, where some clouds keep their metadata service),
// unspecified, multicast, broadcast, "this network" (0.0.0.0/8),
// benchmarking (198.18.0.0/15), reserved (240.0.0.0/4) and IETF protocol
// assignments (192.0.0.0/24), documentation ranges, Azure's WireServer
// (168.63.129.16). IPv4 mapped into IPv6 (::ffff:a.b.c.d) and the
// well-known NAT64 prefix 64:ff9b::/96 are judged as the IPv4 address
// they carry; the other IPv6 forms that carry or reach IPv4 or a local
// network (IPv4-compatible ::/96, SIIT, local-use NAT64 64:ff9b:1::/48,
// 6to4, Teredo, site-local fec0::/10, discard 100::/64) are refused. A
// network's own NAT64 prefix is not known here: a relay on such a
// network should not allow it.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrRefused is wrapped by every refusal of this package.
var ErrRefused = errors.New("egress: refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// Origin is where a target lives: scheme, host and port.
type Origin struct {
	Scheme string // "http" or "https"
	Host   string // lower case; an IPv6 address without brackets
	Port   int
}

func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

// ParseOrigin reads "scheme://host[:port]" (a trailing "/" is allowed).
// Anything else an URL may hold — user information, a path, a query, a
// fragment — is refused, as is a scheme other than http and https.
func ParseOrigin(s string) (Origin, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Origin{}, refused("origin %q: %v", s, err)
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return Origin{}, refused("origin %q: scheme must be http or https", s)
	case u.Opaque != "":
		return Origin{}, refused("origin %q: must be scheme://host[:port]", s)
	case u.User != nil:
		return Origin{}, refused("origin %q: user information is not allowed (credentials go in headers)", s)
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return Origin{}, refused("origin %q: an origin has no path, query or fragment", s)
	case u.Hostname() == "":
		return Origin{}, refused("origin %q: no host", s)
	case strings.Contains(u.Hostname(), "%"):
		return Origin{}, refused("origin %q: an IPv6 zone is not allowed in a host", s)
	case !isASCII(u.Hostname()):
		return Origin{}, refused("origin %q: write an international host name in its ASCII form (xn--…)", s)
	}
	o := Origin{Scheme: scheme, Host: strings.ToLower(u.Hostname()), Port: defaultPort(scheme)}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Origin{}, refused("origin %q: port %q must be from 1 to 65535", s, p)
		}
		o.Port = n
	} else if strings.HasSuffix(u.Host, ":") {
		return Origin{}, refused("origin %q: empty port", s)
	}
	return o, nil
}

// String is the origin's canonical form: the port is left out when it is
// the scheme's default.
func (o Origin) String() string {
	host := o.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if o.Port == defaultPort(o.Scheme) {
		return o.Scheme + "://" + host
	}
	return o.Scheme + "://" + host + ":" + strconv.Itoa(o.Port)
}

// same reports whether u (absolute) is on o. Hosts compare byte for
// byte after ASCII lower-casing: Unicode case folding would take "ſ" for
// "s" and "K" (Kelvin) for "k", and net/http sends such a name in the
// Host header in another form than the one it dials.
func (o Origin) same(u *url.URL) bool {
	port := defaultPort(strings.ToLower(u.Scheme))
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		port = n
	}
	host := u.Hostname()
	if !isASCII(host) {
		return false
	}
	return strings.ToLower(u.Scheme) == o.Scheme && strings.ToLower(host) == o.Host && port == o.Port
}

// MaxRef bounds a task's path or URL, in bytes.
const MaxRef = 8 << 10

// Resolve returns the URL a task's ref names on o: a path with an
// optional query ("/v1/items?page=2"), or an absolute URL on o itself.
// A URL on another origin (another scheme, host or port; "//host/..."),
// user information, control characters and a ref over MaxRef are
// refused. The fragment is dropped (it is never sent), and leading
// slashes are merged into one.
func (o Origin) Resolve(ref string) (*url.URL, error) {
	if len(ref) > MaxRef {
		return nil, refused("URL of %d bytes: at most %d", len(ref), MaxRef)
	}
	for i := 0; i < len(ref); i++ {
		if c := ref[i]; c < 0x20 || c == 0x7f {
			return nil, refused("URL holds the control character %#02x at byte %d", c, i)
		}
	}
	if ref == "" {
		return nil, refused("empty URL: give a path such as /v1/items")
	}
	u, err := url.Parse(ref)
	if err != nil {
		return nil, refused("URL: %v", err)
	}
	switch {
	case u.User != nil:
		return nil, refused("URL holds user information (credentials go in headers)")
	case u.Opaque != "":
		return nil, refused("URL %q is not a path or an http(s) URL", ref)
	case u.Scheme != "" || u.Host != "":
		if !o.same(u) {
			return nil, refused("URL is on another origin than the target's %s", o)
		}
	case !strings.HasPrefix(u.Path, "/"):
		return nil, refused("path %q must begin with /", u.Path)
	}
	// One leading slash: some servers read "//name/..." as a host.
	path, raw := "/"+strings.TrimLeft(u.Path, "/"), ""
	if u.RawPath != "" {
		raw = "/" + strings.TrimLeft(u.RawPath, "/")
	}
	return &url.URL{Scheme: o.Scheme, Host: o.hostPort(), Path: path, RawPath: raw, RawQuery: u.RawQuery}, nil
}

func (o Origin) hostPort() string {
	return strings.TrimPrefix(o.String(), o.Scheme+"://")
}

// CheckRedirect is an http.Client's CheckRedirect that follows a redirect
// only when it stays on o, without user information, at most 10 times.
// The request it lets go is addressed to o as o writes itself.
func (o Origin) CheckRedirect(req *http.Request, via []*http.Request) error {
	switch {
	case req.URL.User != nil:
		return refused("redirect with user information (it would be sent as credentials)")
	case !o.same(req.URL):
		return refused("redirect to another origin than the target's %s", o)
	case len(via) >= 10:
		return refused("more than 10 redirects")
	}
	req.URL.Scheme, req.URL.Host, req.Host = o.Scheme, o.hostPort(), ""
	return nil
}

// owned are the header names the transport sets itself: the host, the
// framing and the hop-by-hop headers (RFC 9110 7.6.1). A task that sets
// them could change where or how its request is read. forwarding are
// the ones a proxy in front of the target may trust to route the request
// or to name its client.
var (
	owned = map[string]bool{
		"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
		"Keep-Alive": true, "Te": true, "Trailer": true, "Upgrade": true,
		"Proxy-Connection": true, "Proxy-Authorization": true, "Proxy-Authenticate": true,
		"Http2-Settings": true, "Max-Forwards": true, "Early-Data": true,
	}
	forwarding = map[string]bool{
		"Forwarded": true, "Forwarded-For": true, "Via": true, "X-Forwarded": true,
		// A client's address, as CDNs and proxies name it.
		"X-Real-Ip": true, "X-Client-Ip": true, "True-Client-Ip": true, "Client-Ip": true,
		"Cf-Connecting-Ip": true, "Cf-Connecting-Ipv6": true, "Fastly-Client-Ip": true, "Akamai-Client-Ip": true,
		"X-Cluster-Client-Ip": true, "X-Original-Forwarded-For": true, "X-Originating-Ip": true,
		"X-Remote-Addr": true, "X-Remote-Ip": true, "X-Proxyuser-Ip": true, "X-Azure-Clientip": true,
		"X-Appengine-User-Ip": true,
		// Where the request was meant to go, as a proxy rewrites it.
		"X-Original-Url": true, "X-Rewrite-Url": true, "X-Original-Host": true, "X-Original-Uri": true,
		"X-Original-Method": true, "X-Host": true, "X-Forwarded-Host": true,
		"X-Http-Method-Override": true, "X-Http-Method": true, "X-Method-Override": true,
	}
	// forwardingPrefixes are families of fields a proxy sets and trusts:
	// Envoy's (x-envoy-internal, x-envoy-original-path …), Cloudflare's.
	forwardingPrefixes = []string{"X-Forwarded-", "X-Envoy-", "Cf-"}
)

// MaxHeaderName bounds a header name, in bytes.
const MaxHeaderName = 256

// CheckHeader refuses a header name a task may not set: not a token
// (RFC 9110 5.1), too long, one the transport owns (Host, framing,
// hop-by-hop), or one a proxy in front of the target may trust to route
// the request or name its client (Forwarded, X-Forwarded-*, X-Real-Ip,
// method overrides…). "_" counts as "-".
func CheckHeader(name string) error {
	if name == "" || len(name) > MaxHeaderName {
		return refused("header name of %d bytes: from 1 to %d", len(name), MaxHeaderName)
	}
	for i := 0; i < len(name); i++ {
		if !isToken(name[i]) {
			return refused("header name %q: byte %d is not allowed in a header name", name, i)
		}
	}
	// Servers behind CGI or FastCGI read "_" as "-".
	canon := http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-"))
	switch {
	case owned[canon]:
		return refused("header %s is set by the transport, not by a task", canon)
	case forwarding[canon] || hasForwardingPrefix(canon):
		return refused("header %s routes or names the client at a proxy in front of the target; a task may not set it", canon)
	}
	return nil
}

func hasForwardingPrefix(canon string) bool {
	for _, p := range forwardingPrefixes {
		if strings.HasPrefix(canon, p) {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func isToken(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Policy says which addresses a request may be sent to: every public
// address, and the prefixes of Allow among those refused by default (for
// a target on the same host or network, given in the configuration).
type Policy struct {
	Allow []netip.Prefix
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	banned = []struct {
		prefix netip.Prefix
		what   string
	}{
		{netip.MustParsePrefix("0.0.0.0/8"), "'this network'"},
		{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (a cloud's metadata service may live here)"},
		{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
		{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
		{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
		{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
		{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
		{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
		{netip.MustParsePrefix("168.63.129.16/32"), "Azure's host service (WireServer)"},
		// IPv6 forms that carry or reach an IPv4 address or a local
		// network, other than the two judged as their IPv4.
		{netip.MustParsePrefix("::/96"), "IPv4-compatible (deprecated)"},
		{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated (SIIT)"},
		{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
		{netip.MustParsePrefix("2002::/16"), "6to4"},
		{netip.MustParsePrefix("2001::/32"), "Teredo"},
		{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
		{netip.MustParsePrefix("fec0::/10"), "site-local (deprecated)"},
		{netip.MustParsePrefix("100::/64"), "discard-only"},
	}
)

// CheckAddr refuses an address of the sending host's own network, unless
// a prefix of p.Allow holds it.
func (p Policy) CheckAddr(a netip.Addr) error {
	a = a.Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:]))
	}
	for _, allowed := range p.Allow {
		if allowed.Contains(a) || a.Is4() && allowed.Contains(netip.AddrFrom16(a.As16())) {
			return nil
		}
	}
	what := ""
	switch {
	case !a.IsValid():
		what = "not an address"
	case a == netip.AddrFrom4([4]byte{169, 254, 169, 254}):
		what = "the cloud metadata address"
	case a.IsLoopback():
		what = "loopback"
	case a.IsPrivate():
		what = "private"
	case a.IsLinkLocalUnicast():
		what = "link-local"
	case a.IsUnspecified():
		what = "unspecified"
	case a.IsMulticast():
		what = "multicast"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		what = "broadcast"
	default:
		for _, b := range banned {
			if b.prefix.Contains(a) {
				what = b.what
				break
			}
		}
	}
	if what == "" {
		return nil
	}
	return refused("address %s is %s: allow it in the configuration to send there", a, what)
}

// Dialer returns d (a copy; a zero Dialer when nil) whose every
// connection is checked against p at the moment it is made, on the
// address the name resolved to. Use its DialContext as an
// http.Transport's, with no proxy.
func (p Policy) Dialer(d *net.Dialer) *net.Dialer {
	var out net.Dialer
	if d != nil {
		out = *d
	}
	next, nextCtx := out.Control, out.ControlContext
	out.Control = nil
	out.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return refused("dial %s %s: %v", network, address, err)
		}
		if err := p.CheckAddr(ap.Addr()); err != nil {
			return err
		}
		switch {
		case nextCtx != nil:
			return nextCtx(ctx, network, address, c)
		case next != nil:
			return next(network, address, c)
		}
		return nil
	}
	return &out
}

// Transport returns an http.Transport that dials through p.Dialer(d) and
// nothing else: no proxy (a proxy would connect on the task's behalf,
// past the check) and no other dial hook. Its timeouts are net/http's
// defaults; set the request's own through its context or the client.
func (p Policy) Transport(d *net.Dialer) *http.Transport {
	dial := p.Dialer(d)
	return &http.Transport{
		DialContext:           dial.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}
