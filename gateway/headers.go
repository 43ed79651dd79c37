package gateway

import (
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/config"
)

// headerPolicy is what the gateway does to a request's header before the
// rules and the upstream see it. A principal header is dropped from a
// request that does not come through a trusted proxy: only an
// authenticating proxy in front may say who a request is (a client that
// wrote the header itself would choose its own key, and the upstream would
// believe it).
type headerPolicy struct {
	ip *clientip.Resolver
	// keys are the canonical names of the key headers (principal and
	// header keys): any other spelling of one, with "_" for "-" (which CGI
	// and WSGI upstreams read as the same HTTP_X_USER), is dropped from
	// every request, since the rules read only the canonical one.
	keys []keyHeader
	// underscores: config.Allow, config.Drop or config.Reject.
	underscores string
}

type keyHeader struct {
	name      string // canonical
	principal bool   // set by an authenticating proxy: dropped unless the peer is trusted
}

var refuseUnderscore = &refusal{"header_underscore", "a request header's name holds an underscore, which some upstreams read as a dash (request.headers_with_underscores: reject)"}

func newHeaderPolicy(cfg *config.File, ip *clientip.Resolver) headerPolicy {
	h := headerPolicy{ip: ip, underscores: cfg.Request.HeadersWithUnderscores}
	principals := cfg.PrincipalHeaders()
	for _, r := range cfg.Rules {
		for _, q := range r.Quotas {
			if q.Header == "" {
				continue
			}
			k := keyHeader{name: http.CanonicalHeaderKey(q.Header), principal: slices.Contains(principals, q.Header)}
			if i := slices.IndexFunc(h.keys, func(o keyHeader) bool { return o.name == k.name }); i >= 0 {
				h.keys[i].principal = h.keys[i].principal || k.principal
				continue
			}
			h.keys = append(h.keys, k)
		}
	}
	return h
}

// apply drops what the policy drops from r's header, or says why r is
// refused.
func (h headerPolicy) apply(r *http.Request) *refusal {
	if len(h.keys) == 0 && h.underscores == config.Allow {
		return nil
	}
	trusted, asked := false, false
	for name := range r.Header {
		if h.underscores != config.Allow && strings.IndexByte(name, '_') >= 0 {
			if h.underscores == config.Reject {
				return refuseUnderscore
			}
			delete(r.Header, name)
			continue
		}
		for _, k := range h.keys {
			if !sameHeaderName(name, k.name) {
				continue
			}
			if name != k.name {
				delete(r.Header, name) // another spelling: never legitimate
				break
			}
			if k.principal {
				if !asked {
					trusted, asked = h.ip.Trusted(r), true
				}
				if !trusted {
					delete(r.Header, name)
				}
			}
			break
		}
	}
	return nil
}

// sameHeaderName reports whether an upstream could read a and b as the
// same header: equal but for ASCII case, with "_" and "-" the same.
func sameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if x != y {
			return false
		}
	}
	return true
}
