package grpclimit

import (
	"context"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
)

// keyOf is the store key of rule's quota j for a call of method, and false
// when the call has none (the rule does not apply). Keys start with their
// kind, so that kinds never share a state; they are built as httplimit
// builds its keys (a peer as its IP key, a metadata value as its header
// key), so that a limit shared by an HTTP and a gRPC server counts a
// client once.
func (in *Interceptor) keyOf(ctx context.Context, method string, rule *compiledRule, j int) (string, bool) {
	prefix := rule.core.Quotas[j].KeyPrefix
	switch rule.Quotas[j].Key.Kind {
	case Global:
		return prefix, true
	case Metadata:
		v := metadata.ValueFromIncomingContext(ctx, rule.quotas[j].md)
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		return enforce.BoundedKey(prefix, v[0]), true
	case Method:
		return enforce.BoundedKey(prefix, method), true
	case Peer:
		p, ok := peer.FromContext(ctx)
		if !ok {
			return "", false
		}
		return peerKey(p.Addr)
	case Principal:
		p, ok := in.principal(ctx)
		if !ok || p == "" {
			return "", false
		}
		return enforce.BoundedKey(prefix, p), true
	}
	return "", false
}

// peerKey is the key of a peer's address: "ip:", the 16 bytes of its
// prefix (an IPv4 /32 mapped, an IPv6 /64) and the prefix's length in bits
// — httplimit's IP key. False when the address is not an IP address.
func peerKey(a net.Addr) (string, bool) {
	var ip netip.Addr
	switch a := a.(type) {
	case nil:
		return "", false
	case *net.TCPAddr:
		ip = a.AddrPort().Addr()
	case *net.UDPAddr:
		ip = a.AddrPort().Addr()
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return "", false
		}
		ip = ap.Addr()
	}
	if !ip.IsValid() {
		return "", false
	}
	ip = ip.Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return "", false
	}
	var b [enforce.IPKeyLen]byte
	enforce.PutIPKey(&b, p)
	return string(b[:]), true
}

// maxCostLen bounds a declared cost: "4500000000.000000" is 17 bytes.
const maxCostLen = 32

// declaredCost is the cost the client declared in the CostMetadata of
// quota i: false when it declared none, an INVALID_ARGUMENT status when the
// declaration is malformed or not a cost the quota's limit accepts.
func (r *compiledRule) declaredCost(ctx context.Context, i int) (float64, bool, error) {
	md := r.quotas[i].costMD
	vs := metadata.ValueFromIncomingContext(ctx, md)
	if len(vs) == 0 {
		return 0, false, nil
	}
	cost, ok := parseCost(vs)
	if !ok {
		return 0, false, status.Error(codes.InvalidArgument, "invalid cost: metadata "+strconv.Quote(md)+" must hold one positive decimal number, such as 1 or 2.5")
	}
	if err := r.core.CheckCost(i, cost); err != nil {
		// The error names the limit and the cost the client sent (a
		// bounded number), never a key.
		return 0, false, status.Error(codes.InvalidArgument, "invalid cost: metadata "+strconv.Quote(md)+": "+costReason(err))
	}
	return cost, true, nil
}

// parseCost parses the values of a cost declaration: exactly one, digits
// with at most one '.' between digits (no sign, no exponent, no spaces),
// positive, at most maxCostLen bytes.
func parseCost(vs []string) (float64, bool) {
	if len(vs) != 1 || len(vs[0]) == 0 || len(vs[0]) > maxCostLen {
		return 0, false
	}
	v := vs[0]
	dot := -1
	for i := 0; i < len(v); i++ {
		switch {
		case '0' <= v[i] && v[i] <= '9':
		case v[i] == '.' && dot < 0 && i > 0 && i < len(v)-1:
			dot = i
		default:
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// fields is the rate-limit header metadata of a response about ds, the
// decisions of the rule's quotas: ratelimit-policy and ratelimit, as
// httplimit writes RateLimit-Policy and RateLimit. On a rejection, a
// rejecting limit's t is when the call would fit (at least 1 s; absent
// when it never will: ratelimitheader.ResetOf).
func (r *compiledRule) fields(ds []sluice.Decision) metadata.MD {
	var buf [128]byte
	return metadata.MD{"ratelimit-policy": r.policyField[:1:1], "ratelimit": {string(r.core.AppendLimits(buf[:0], ds))}}
}

// setHeader sends md as response header metadata: on ss, or for a unary
// call (ss nil) with grpc.SetHeader.
func setHeader(ctx context.Context, ss grpc.ServerStream, md metadata.MD) {
	if ss != nil {
		_ = ss.SetHeader(md) // fails only once headers are sent, which they are not before the handler
		return
	}
	_ = grpc.SetHeader(ctx, md)
}

// The messages of the statuses a call can end with.
const (
	msgRejected    = "rate limited"
	msgNever       = "rate limited: the cost exceeds the limit's capacity"
	msgUnavailable = "rate limiter unavailable"
)

// rejection is the status of a rejected call that would fit after
// retryAfter: RESOURCE_EXHAUSTED with a RetryInfo of retryAfter in whole
// milliseconds, rounded up, at least 1 ms; without RetryInfo when the cost
// can never fit.
func rejection(retryAfter time.Duration, never bool) error {
	if never {
		return status.Error(codes.ResourceExhausted, msgNever)
	}
	return withRetry(codes.ResourceExhausted, msgRejected, retryDelay(retryAfter))
}

// retryDelay is a wait in whole milliseconds, rounded up, at least 1 ms.
func retryDelay(d time.Duration) time.Duration {
	if d > math.MaxInt64-time.Millisecond {
		return d / time.Millisecond * time.Millisecond // rounding up would overflow
	}
	return max(time.Millisecond, (d+time.Millisecond-1)/time.Millisecond*time.Millisecond)
}

// unavailable is the status of a call refused because the limiter failed
// (sluice.FailClosed).
func unavailable() error { return withRetry(codes.Unavailable, msgUnavailable, time.Second) }

func withRetry(code codes.Code, msg string, delay time.Duration) error {
	s := status.New(code, msg)
	if d, err := s.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		s = d
	}
	return s.Err()
}

// invalidCost is the status of a call whose cost the limiter refused
// (wrapping sluice.ErrInvalidCost): INVALID_ARGUMENT, "invalid cost: " and
// the reason, said once.
func invalidCost(err error) error {
	if why := costReason(err); why != "" {
		return status.Error(codes.InvalidArgument, "invalid cost: "+why)
	}
	return status.Error(codes.InvalidArgument, "invalid cost")
}

// costReason is the text of an error wrapping sluice.ErrInvalidCost
// without that sentinel's own words ("sluice: invalid cost: "), wherever
// the wrapping put them: "request 1: cost 1e-09 for limit …" from
// "request 1: sluice: invalid cost: cost 1e-09 for limit …".
func costReason(err error) string {
	msg := err.Error()
	if before, after, ok := strings.Cut(msg, sluice.ErrInvalidCost.Error()); ok {
		msg = before + strings.TrimPrefix(after, ": ")
	}
	return strings.TrimSuffix(strings.TrimPrefix(msg, "sluice: "), ": ")
}
