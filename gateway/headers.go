package gateway

import (
	"net/http"
	"slices"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/lease"
)

// headerPolicy is what the gateway does to a request's header before the
// rules and the upstream see it. A principal header is dropped from a
// request that does not come through a trusted proxy: only an
// authenticating proxy in front may say who a request is (a client that
// wrote the header itself would choose its own key, and the upstream would
// believe it).
//
// A protected name (a key header, or a forwarding header the gateway
// writes itself) reaches the upstream only in its canonical spelling: any
// other name that an upstream could read as the same one is dropped from
// every request, trusted peer or not. Upstreams do not agree on what is
// the same: lighttpd's CGI, FastCGI and SCGI map every byte of a name
// that is not an ASCII letter or digit to "_" (X.User, X~User, X_User and
// X-User are all HTTP_X_USER), WSGI and nginx's FastCGI map "-" to "_",
// and all of them ignore case. sameHeaderName is the widest of these.
type headerPolicy struct {
	ip *clientip.Resolver
	// protected are the canonical names the rules or the proxy read; any
	// other spelling of one is dropped.
	protected []protectedHeader
	// underscores: config.Allow, config.Drop or config.Reject, for any
	// name with a byte outside A-Za-z0-9- (see plainHeaderName).
	underscores string
}

type protectedHeader struct {
	name      string // canonical
	principal bool   // set by a proxy in front (authenticating, or saying who the client is): dropped unless the peer is trusted
}

// forwardingHeaders are the headers that say where a request came from,
// which the reverse proxy rewrites (its Rewrite removes them and
// SetXForwarded writes them again, with a trusted proxy's X-Forwarded-For
// kept) and clientip reads (x-forwarded-for or forwarded, from trusted
// peers): their canonical spelling is theirs to handle, any other is
// dropped here, since the proxy would forward it untouched and an upstream
// would merge it with the gateway's (HTTP_X_FORWARDED_FOR="127.0.0.1,
// 6.6.6.6" from X_Forwarded_For: 6.6.6.6).
var forwardingHeaders = []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded"}

// proxyHeaders are the other headers a proxy in front writes to say who
// the client is or what it asked for, which the gateway does not rewrite:
// only a trusted peer may send them, as a principal (an upstream that
// believes X-Original-URL routes by it, past the rules that matched the
// path; one that believes X-Real-IP logs and limits by it). Canonical
// spellings (http.CanonicalHeaderKey).
var proxyHeaders = []string{
	"X-Real-Ip", "X-Client-Ip", "True-Client-Ip",
	"X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Server", "X-Forwarded-Ssl",
	"X-Original-Url", "X-Rewrite-Url", "X-Original-Forwarded-For",
}

var refuseUnderscore = &refusal{"header_underscore", "a request header's name holds an underscore or another byte outside A-Za-z0-9-, which some upstreams read as a dash (request.headers_with_underscores: reject)"}

func newHeaderPolicy(cfg *config.File, ip *clientip.Resolver) headerPolicy {
	h := headerPolicy{ip: ip, underscores: cfg.Request.HeadersWithUnderscores}
	add := func(k protectedHeader) {
		if i := slices.IndexFunc(h.protected, func(o protectedHeader) bool { return o.name == k.name }); i >= 0 {
			h.protected[i].principal = h.protected[i].principal || k.principal
			return
		}
		h.protected = append(h.protected, k)
	}
	for _, name := range forwardingHeaders {
		add(protectedHeader{name: name})
	}
	for _, name := range proxyHeaders {
		add(protectedHeader{name: name, principal: true})
	}
	if cfg.Fence != nil {
		// The fence reads the canonical field and forwards it: another
		// spelling would reach the upstream unchecked.
		add(protectedHeader{name: http.CanonicalHeaderKey(lease.FenceHeader)})
	}
	principals := cfg.PrincipalHeaders()
	for _, r := range cfg.Rules {
		for _, q := range r.Quotas {
			if q.Header != "" {
				add(protectedHeader{name: http.CanonicalHeaderKey(q.Header), principal: slices.Contains(principals, q.Header)})
			}
		}
	}
	return h
}

// apply drops what the policy drops from r's header, or says why r is
// refused. It allocates nothing.
func (h headerPolicy) apply(r *http.Request) *refusal {
	trusted, asked := false, false
	for name := range r.Header {
		if h.underscores != config.Allow && !plainHeaderName(name) {
			if h.underscores == config.Reject {
				return refuseUnderscore
			}
			delete(r.Header, name)
			continue
		}
		p, canonical := h.match(name)
		switch {
		case p == nil:
		case !canonical:
			delete(r.Header, name) // another spelling: never legitimate
		case p.principal:
			if !asked {
				trusted, asked = h.ip.Trusted(r), true
			}
			if !trusted {
				delete(r.Header, name)
			}
		}
	}
	return nil
}

// match returns the protected header that an upstream could read name as
// (nil if none), and whether name is its canonical spelling, which wins
// over another protected name it merely resembles.
func (h headerPolicy) match(name string) (p *protectedHeader, canonical bool) {
	for i := range h.protected {
		k := &h.protected[i]
		if name == k.name {
			return k, true
		}
		if p == nil && sameHeaderName(name, k.name) {
			p = k
		}
	}
	return p, false
}

// sameHeaderName reports whether an upstream could read a and b as the
// same header: equal once ASCII letters are upper-cased and every byte
// that is not an ASCII letter or digit is "_" (lighttpd's CGI mapping,
// which covers WSGI's and nginx's "-" for "_").
func sameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if cgiByte(a[i]) != cgiByte(b[i]) {
			return false
		}
	}
	return true
}

// cgiByte is c as a CGI environment's name holds it.
func cgiByte(c byte) byte {
	switch {
	case 'a' <= c && c <= 'z':
		return c - ('a' - 'A')
	case 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return c
	}
	return '_'
}

// plainHeaderName reports whether name has only ASCII letters, digits and
// "-": the names every upstream reads the same way. Any other byte is one
// an upstream may read as a dash (lighttpd makes it "_", as it does "-"),
// drop or keep (nginx's ignore_invalid_headers).
func plainHeaderName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c != '-' && cgiByte(c) == '_' {
			return false
		}
	}
	return true
}
