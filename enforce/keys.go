package enforce

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"net/netip"
	"net/textproto"
)

// Keys are built the same way by every transport, so that a limit shared
// by an HTTP and a gRPC server counts a client once: the kind first (so
// kinds never share a state), then the identity, bounded. These strings
// are stored keys: changing one restarts every client's state.
const (
	// GlobalKey is the one key of a limit on the whole service.
	GlobalKey = "global"
	// IPPrefix starts the key of a client's address or address prefix
	// (PutIPKey).
	IPPrefix = "ip:"
	// PrincipalPrefix starts the key of an authenticated identity
	// (BoundedKey(PrincipalPrefix, principal)).
	PrincipalPrefix = "p:"
	// MethodPrefix starts the key of a gRPC method's full name.
	MethodPrefix = "m:"
)

// HeaderPrefix starts the keys of the values of the HTTP header or gRPC
// metadata key name: "h:", name in canonical form
// (textproto.CanonicalMIMEHeaderKey: "X-Api-Key" for "x-api-key") and ":",
// so that an API key sent in a header and in metadata of the same name is
// one key.
func HeaderPrefix(name string) string {
	return "h:" + textproto.CanonicalMIMEHeaderKey(name) + ":"
}

// MaxRawKey bounds the part of a key taken from a request as it is: a
// longer header value, metadata value or principal is replaced by its
// SHA-256, so that a store's key stays bounded whatever a client sends.
const MaxRawKey = 256

// BoundedKey is prefix followed by v, or by "sha256:" and v's SHA-256 in
// hex when v is longer than MaxRawKey.
func BoundedKey(prefix, v string) string {
	if len(v) <= MaxRawKey {
		return prefix + v
	}
	sum := sha256.Sum256([]byte(v))
	return prefix + "sha256:" + hex.EncodeToString(sum[:])
}

// IPKeyLen is the length of an IP key.
const IPKeyLen = len(IPPrefix) + 16 + 1

// PutIPKey writes the key of a client prefix into b: "ip:", the prefix's
// 16 address bytes (an IPv4 address mapped) and its length in bits —
// binary, no text, one key for every address of the prefix.
func PutIPKey(b *[IPKeyLen]byte, p netip.Prefix) {
	copy(b[:], IPPrefix)
	a := p.Addr().As16()
	copy(b[3:], a[:])
	b[19] = byte(p.Bits())
}

// Pseudonym names a key for the heaviest-tenants view without revealing
// it: kind, ":" and 16 hex digits of the key's hash under seed (a
// per-process seed: the same key gives the same pseudonym in one process,
// and nothing outside it can be matched against).
func Pseudonym(seed maphash.Seed, kind, key string) string {
	const hexDigits = "0123456789abcdef"
	b := make([]byte, len(kind)+1+16)
	copy(b, kind)
	b[len(kind)] = ':'
	h := maphash.String(seed, key)
	for i := range 16 {
		b[len(kind)+1+i] = hexDigits[h>>(60-4*i)&0xf]
	}
	return string(b)
}
