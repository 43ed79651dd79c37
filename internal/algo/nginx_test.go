package algo

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
)

// nginxNode is the per-key arithmetic of nginx's ngx_http_limit_req_module
// (ngx_http_limit_req_lookup and ngx_http_limit_req_account), transcribed
// as the oracle of the leaky bucket. nginx counts in thousandths of a
// request and milliseconds: rate, burst and delay are the configured values
// × 1000.
type nginxNode struct {
	exists bool
	excess int64
	last   int64 // ms
}

func (n *nginxNode) request(now, rate, burst, delay int64) (ok bool, delayMs int64) {
	if !n.exists { // a new node: excess 0, passes undelayed
		*n = nginxNode{exists: true, last: now}
		return true, 0
	}
	ms := max(now-n.last, 0)
	excess := max(n.excess-rate*ms/1000+1000, 0)
	if excess > burst {
		return false, 0 // NGX_BUSY: the node is not updated
	}
	n.excess = excess
	if ms != 0 {
		n.last = now
	}
	if excess <= delay {
		return true, 0
	}
	return true, (excess - delay) * 1000 / rate
}

// On unit-cost traces the leaky bucket decides as nginx does, and delays
// by nginx's delay to within nginx's millisecond truncation.
func TestPropLeakyBucketMatchesNginx(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		r := rapid.Int64Range(1, 20).Draw(rt, "rate")
		b := rapid.Int64Range(0, 10).Draw(rt, "burst")
		dl := rapid.Int64Range(0, b).Draw(rt, "delay")
		l := sluice.Limit{Name: "nginx", Algorithm: sluice.LeakyBucket, Quota: float64(r), Window: time.Second,
			Burst: float64(b + 1), DelayThreshold: float64(dl)}
		p, err := Compile(l)
		if err != nil {
			rt.Fatal(err)
		}
		var ours LeakyBucket
		var theirs nginxNode
		ours.Init(p, epoch)
		nowMs := int64(0)
		for i := range rapid.IntRange(1, 200).Draw(rt, "n") {
			if rapid.Bool().Draw(rt, "same") {
				nowMs += rapid.Int64Range(0, 2000/r).Draw(rt, "dt")
			}
			d, _ := ours.Step(p, Call{Now: epoch + nowMs*1000, Cost: 1e6}, true)
			ok, delayMs := theirs.request(nowMs, r*1000, b*1000, dl*1000)
			if d.Allowed() != ok {
				rt.Fatalf("request %d at %d ms: allowed %v, nginx %v", i, nowMs, d.Allowed(), ok)
			}
			if lo, hi := time.Duration(delayMs)*time.Millisecond, time.Duration(delayMs+1)*time.Millisecond; d.Delay() < lo || d.Delay() >= hi {
				rt.Fatalf("request %d at %d ms: delay %v, nginx %d ms", i, nowMs, d.Delay(), delayMs)
			}
		}
	})
}
