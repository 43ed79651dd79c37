package main

import (
	"context"
	"fmt"
	"strconv"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// rlsKeys holds one prebuilt descriptor per key value, shared read-only by
// every worker, so the load tool spends its share of the cores on calls.
type rlsKeys struct {
	domain string
	descs  []*rlcommon.RateLimitDescriptor
}

func newRLSKeys(o options) *rlsKeys {
	k := &rlsKeys{domain: o.domain, descs: make([]*rlcommon.RateLimitDescriptor, o.keys)}
	for i := range k.descs {
		v := "v" + strconv.Itoa(i)
		d := &rlcommon.RateLimitDescriptor{}
		for _, name := range o.descriptor {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: name, Value: v})
		}
		k.descs[i] = d
	}
	return k
}

func (k *rlsKeys) caller(cc *grpc.ClientConn) caller {
	return &rlsCaller{keys: k, client: rls.NewRateLimitServiceClient(cc), req: &rls.RateLimitRequest{Domain: k.domain, HitsAddend: 1}}
}

// rlsCaller reuses one request: a unary call has marshalled it by the time
// it returns.
type rlsCaller struct {
	keys   *rlsKeys
	client rls.RateLimitServiceClient
	req    *rls.RateLimitRequest
}

func (c *rlsCaller) call(ctx context.Context, keys []int) (decisions, over int, err error) {
	c.req.Descriptors = c.req.Descriptors[:0]
	for _, i := range keys {
		c.req.Descriptors = append(c.req.Descriptors, c.keys.descs[i])
	}
	resp, err := c.client.ShouldRateLimit(ctx, c.req)
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Statuses) != len(keys) {
		return 0, 0, fmt.Errorf("%d statuses for %d descriptors (overall %v)", len(resp.Statuses), len(keys), resp.OverallCode)
	}
	for _, s := range resp.Statuses {
		if s.Code == rls.RateLimitResponse_OVER_LIMIT {
			over++
		}
	}
	return len(keys), over, nil
}
