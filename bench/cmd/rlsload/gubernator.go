package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Gubernator's V1 service is spoken here with its two messages encoded by
// hand with protowire: importing github.com/gubernator-io/gubernator/v2 for
// its generated client would bring its flat root package's Kubernetes, etcd,
// memberlist and OpenTelemetry dependencies (about 90 modules) into the bench
// module. The bytes on the wire are the same, over the same gRPC transport as
// the RLS calls. Field numbers from gubernator.proto (package pb.gubernator):
//
//	GetRateLimitsReq  { repeated RateLimitReq requests = 1; }
//	RateLimitReq      { string name = 1; string unique_key = 2; int64 hits = 3;
//	                    int64 limit = 4; int64 duration = 5; Algorithm algorithm = 6; ... }
//	GetRateLimitsResp { repeated RateLimitResp responses = 1; }
//	RateLimitResp     { Status status = 1; int64 limit = 2; int64 remaining = 3;
//	                    int64 reset_time = 4; string error = 5; ... }
//	Status            { UNDER_LIMIT = 0; OVER_LIMIT = 1; }
const guberGetRateLimits = "/pb.gubernator.V1/GetRateLimits"

// guberDuration is the limit's window in milliseconds (a minute).
const guberDuration = 60_000

// guberKeys holds one encoded RateLimitReq (with its field-1 tag and length,
// ready to append to a GetRateLimitsReq) per key value.
type guberKeys struct {
	reqs [][]byte
}

func newGuberKeys(o options) *guberKeys {
	g := &guberKeys{reqs: make([][]byte, o.keys)}
	for i := range g.reqs {
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendString(m, o.domain)
		m = protowire.AppendTag(m, 2, protowire.BytesType)
		m = protowire.AppendString(m, "v"+strconv.Itoa(i))
		m = protowire.AppendTag(m, 3, protowire.VarintType)
		m = protowire.AppendVarint(m, 1) // hits
		m = protowire.AppendTag(m, 4, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(o.limit))
		m = protowire.AppendTag(m, 5, protowire.VarintType)
		m = protowire.AppendVarint(m, guberDuration)
		// algorithm 6 = TOKEN_BUCKET (0), the default: not encoded.
		var f []byte
		f = protowire.AppendTag(f, 1, protowire.BytesType)
		f = protowire.AppendBytes(f, m)
		g.reqs[i] = f
	}
	return g
}

func (g *guberKeys) caller(cc *grpc.ClientConn) caller {
	return &guberCaller{keys: g, cc: cc}
}

// guberCaller encodes a new request per call: gRPC's transport may still hold
// the bytes of a call that failed early.
type guberCaller struct {
	keys *guberKeys
	cc   *grpc.ClientConn
}

func (c *guberCaller) call(ctx context.Context, keys []int) (decisions, over int, err error) {
	req := make(rawMessage, 0, len(keys)*len(c.keys.reqs[keys[0]]))
	for _, i := range keys {
		req = append(req, c.keys.reqs[i]...)
	}
	var resp guberResponse
	if err := c.cc.Invoke(ctx, guberGetRateLimits, &req, &resp, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return 0, 0, err
	}
	if resp.err != nil {
		return 0, 0, resp.err
	}
	if resp.n != len(keys) {
		return 0, 0, fmt.Errorf("%d responses for %d requests", resp.n, len(keys))
	}
	return resp.n, resp.over, nil
}

// rawMessage is an already-encoded protobuf message.
type rawMessage []byte

// guberResponse is a decoded GetRateLimitsResp: how many RateLimitResp it
// held, how many were OVER_LIMIT, and the first per-limit error, if any.
type guberResponse struct {
	n, over int
	err     error
}

var errMalformed = errors.New("gubernator: malformed GetRateLimitsResp")

func (r *guberResponse) decode(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errMalformed
			}
			b = b[n:]
			continue
		}
		one, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		r.n++
		for len(one) > 0 {
			fnum, ftyp, n := protowire.ConsumeTag(one)
			if n < 0 {
				return errMalformed
			}
			one = one[n:]
			switch {
			case fnum == 1 && ftyp == protowire.VarintType:
				v, n := protowire.ConsumeVarint(one)
				if n < 0 {
					return errMalformed
				}
				if v == 1 {
					r.over++
				}
				one = one[n:]
			case fnum == 5 && ftyp == protowire.BytesType:
				s, n := protowire.ConsumeString(one)
				if n < 0 {
					return errMalformed
				}
				if s != "" && r.err == nil {
					r.err = fmt.Errorf("gubernator: %s", s)
				}
				one = one[n:]
			default:
				n = protowire.ConsumeFieldValue(fnum, ftyp, one)
				if n < 0 {
					return errMalformed
				}
				one = one[n:]
			}
		}
	}
	return nil
}

// rawCodec sends a *rawMessage as is and decodes into a *guberResponse. It
// calls itself "proto", so the content type is application/grpc+proto as
// gubernator's server expects.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*guberResponse)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	if len(data) == 1 {
		return r.decode(data[0].ReadOnlyData())
	}
	return r.decode(data.Materialize())
}

func (rawCodec) Name() string { return "proto" }
