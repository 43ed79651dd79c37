// Package clientip tells who the client of an HTTP request is, as a network
// prefix to rate limit by, without letting the client choose the answer.
//
// # Trust model
//
// The only address a server can be sure of is its connection's peer
// (http.Request.RemoteAddr): the TCP handshake proved it. Every forwarding
// header is text the peer sent, and any client can send any text. So a
// Resolver believes a forwarding header only when the peer is a proxy the
// operator listed in Options.TrustedProxies, and by default it lists none:
// the peer is the client and headers are ignored entirely.
//
// Proxies append: each one adds the address of its own peer at the right end
// of the header. Whatever a client wrote itself is therefore on the left,
// and the right end was written by proxies. The Resolver walks the list from
// the right (the nearest hop) to the left, skipping the addresses of trusted
// proxies; the first address that is not a trusted proxy is the client. It
// was written by a trusted proxy about the peer it saw, and everything to its
// left is whatever that client claimed, which is not read. If every address
// is a trusted proxy, the leftmost is the client.
//
// A hop that is not an IP address — malformed, "unknown", an obfuscated
// identifier such as "_hidden", a port that is not a number — ends the walk,
// and the client is the last address that could be trusted: the hop just to
// its right, that is, the trusted proxy that received the request from it.
// Guessing past a hop that cannot be read would let a client hide behind
// garbage; stopping groups such requests under their proxy, which fails
// closed (they share a limit) rather than open.
//
// # One header kind
//
// A Resolver reads exactly one header: X-Forwarded-For (the default) or
// Forwarded (RFC 7239), chosen by the operator to match what the trusted
// proxies write. It never reads both, and never falls back from one to the
// other: the proxies overwrite or append to the header they know, and the
// other one arrives exactly as the client sent it. Reading it would let any
// client choose its own address.
//
// # Bounds
//
// Only the rightmost MaxHeaderBytes bytes of the header's values (all its
// lines together) and the rightmost MaxHops addresses are read; the right end
// is what the trusted proxies wrote. When a bound is reached the walk stops as
// at an unreadable hop: the client is the leftmost address read, a trusted
// proxy. An address cut by the byte bound is not read. Headers are parsed
// from the right without splitting them, so a huge header costs no more than
// its bounded part. A client that is not a trusted proxy cannot make the walk
// reach the bounds: it stops at that client's address, which a trusted proxy
// wrote to the right of anything the client sent.
//
// # Keys
//
// The result is a masked netip.Prefix: IPv4 addresses whole (/32) and IPv6
// addresses by their /64, the block a single subscriber or host usually
// holds, so a client cannot dodge its limit by hopping through its own /64.
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) count as IPv4 and IPv6 zones
// are dropped. Resolver.Key returns the prefix's text, such as
// "203.0.113.7/32" or "2001:db8:1:2::/64", as a rate limiting key.
package clientip
