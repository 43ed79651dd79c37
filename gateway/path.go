package gateway

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/gateway/config"
)

// A request's path is normalised once, before the rules see it, and the
// upstream receives the normalised form: the path the rules matched is, by
// construction, the path the upstream routes (the rules match the decoded
// path, and an upstream that forwards the raw one would let
// "/api/%2e%2e/x", which the rules read as "/x", reach the upstream's
// /api/ handler uncounted). What cannot be normalised unambiguously is
// refused.

// pathPolicy is the request section's path options.
type pathPolicy struct {
	unescapeSlashes bool   // escaped_slashes: unescape (else reject)
	parameters      string // path_parameters: keep, strip or reject
}

func newPathPolicy(r config.Request) pathPolicy {
	return pathPolicy{unescapeSlashes: r.EscapedSlashes == config.Unescape, parameters: r.PathParameters}
}

// refusal is why a request is refused with 400: code is the metrics'
// reason label (a fixed set), reason the sentence the client reads.
type refusal struct {
	code, reason string
}

// The refusals of a path.
var (
	refuseForm         = &refusal{"path_form", "the request-target must be a path starting with / (origin-form) or an absolute URL: the rules match paths"}
	refuseAsterisk     = &refusal{"asterisk_form", "the request-target * (OPTIONS *) asks about the gateway, not a path the rules can match"}
	refuseConnect      = &refusal{"connect", "CONNECT is not proxied: the gateway is a reverse proxy for paths"}
	refuseEscape       = &refusal{"bad_escape", "the path has a % not followed by two hexadecimal digits"}
	refuseControl      = &refusal{"control_byte", "the path holds a control byte (such as NUL or %00): no upstream reads it the same way"}
	refuseSlash        = &refusal{"escaped_slash", "the path holds an encoded slash or backslash (%2F, %5C) or a backslash: upstreams read it as a separator or as data, so it cannot be normalised unambiguously (request.escaped_slashes: reject)"}
	refuseParameter    = &refusal{"path_parameter", "the path has a ; parameter in a segment, which some upstreams strip before routing (request.path_parameters: reject)"}
	refuseDotParameter = &refusal{"dot_parameter", "a dot segment carries a ; parameter (\"..;\"): a servlet container reads it as a dot segment, other upstreams as a name, so it cannot be normalised unambiguously"}
)

// normalizeRequest normalises r's path in place (URL.Path and
// URL.RawPath, which the proxy forwards), or says why it cannot.
func (p pathPolicy) normalizeRequest(r *http.Request) *refusal {
	if r.Method == http.MethodConnect {
		return refuseConnect
	}
	if r.URL.Path == "*" && r.URL.RawPath == "" {
		return refuseAsterisk
	}
	if r.URL.Opaque != "" {
		return refuseForm
	}
	raw := r.URL.RawPath // the request-target's path as sent, when it differs from Path's default encoding
	if raw == "" {
		raw = r.URL.EscapedPath() // which then is the path as sent
	}
	if p.isNormal(raw) {
		return nil // the common case: nothing to change, nothing allocated
	}
	if raw == "" && r.URL.Host != "" {
		raw = "/" // an absolute URL without a path: "http://host" is "http://host/"
	}
	escaped, bad := p.normalize(raw)
	if bad != nil {
		return bad
	}
	decoded, err := url.PathUnescape(escaped)
	if err != nil { // normalize writes valid escapes only
		return refuseEscape
	}
	r.URL.Path, r.URL.RawPath = decoded, escaped
	return nil
}

// normalize returns the normal form of an escaped path: percent-encoded
// unreserved characters decoded and the other escapes in upper case (RFC
// 3986 §6.2.2), bytes that must not appear raw in a path escaped, ";"
// parameters handled as the policy says, dot segments removed (§5.2.4,
// after decoding, so "%2e%2E" is ".."), repeated slashes merged, a
// trailing slash kept. Its decoded form has a "/" only between segments.
func (p pathPolicy) normalize(raw string) (string, *refusal) {
	if raw == "" || raw[0] != '/' {
		return "", refuseForm
	}
	var (
		segs     []string // the output's segments, escaped
		seg      strings.Builder
		trailing bool // the path ends with a separator, or with a dot segment
		inParam  bool // in a ";..." being stripped
	)
	end := func() *refusal {
		s := seg.String()
		seg.Reset()
		inParam = false
		if before, _, params := strings.Cut(s, ";"); params && (before == "." || before == "..") {
			// "..;x" is ".." to a servlet container and a name to
			// everyone else: no one normal form.
			return refuseDotParameter
		}
		switch s {
		case "", ".":
			trailing = true
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			trailing = true
		default:
			segs = append(segs, s)
			trailing = false
		}
		return nil
	}
	for i := 1; i < len(raw); i++ {
		c, escapedByte := raw[i], false
		if c == '%' {
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return "", refuseEscape
			}
			c, escapedByte = unhex(raw[i+1])<<4|unhex(raw[i+2]), true
			i += 2
		}
		switch {
		case c < 0x20 || c == 0x7f:
			return "", refuseControl
		case c == '/' && !escapedByte:
			if bad := end(); bad != nil {
				return "", bad
			}
			continue
		case c == '/' || c == '\\':
			if !p.unescapeSlashes {
				return "", refuseSlash
			}
			if bad := end(); bad != nil {
				return "", bad
			}
			continue
		case inParam:
			continue
		case c == ';' && !escapedByte:
			switch p.parameters {
			case config.Reject:
				return "", refuseParameter
			case config.Strip:
				inParam = true
				continue
			}
		}
		switch {
		case isUnreserved(c) || !escapedByte && isSubDelimOrColonAt(c):
			seg.WriteByte(c)
		default:
			const hexDigits = "0123456789ABCDEF"
			seg.WriteByte('%')
			seg.WriteByte(hexDigits[c>>4])
			seg.WriteByte(hexDigits[c&15])
		}
	}
	if bad := end(); bad != nil {
		return "", bad
	}
	if len(segs) == 0 {
		return "/", nil
	}
	n := len(segs)
	if trailing {
		n++
	}
	for _, s := range segs {
		n += len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(s)
	}
	if trailing {
		b.WriteByte('/')
	}
	return b.String(), nil
}

// isNormal reports whether raw is its own normal form for sure: it starts
// with "/", has no escape, no backslash, no "//", no "/." (where a dot segment
// would be), no ";" unless parameters are kept, and only bytes a path
// segment may hold raw.
func (p pathPolicy) isNormal(raw string) bool {
	if raw == "" || raw[0] != '/' {
		return false
	}
	for i := 1; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '/':
			if raw[i-1] == '/' || i+1 < len(raw) && raw[i+1] == '.' {
				return false
			}
		case c == ';':
			if p.parameters != config.Keep {
				return false
			}
		case isUnreserved(c) || isSubDelimOrColonAt(c):
		default:
			return false // '%', '\\', a control byte, a byte to escape
		}
	}
	return len(raw) < 2 || raw[1] != '.'
}

// isUnreserved reports an RFC 3986 unreserved character: one whose
// encoding means the same as itself.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// isSubDelimOrColonAt reports the other characters a path segment may hold
// raw (RFC 3986 pchar). Encoded, they stay encoded: decoding a reserved
// character can change what the path means.
func isSubDelimOrColonAt(c byte) bool {
	return strings.IndexByte("!$&'()*+,;=:@", c) >= 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
