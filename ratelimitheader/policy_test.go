package ratelimitheader_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/ratelimitheader"
)

func TestPolicyOf(t *testing.T) {
	for _, c := range []struct {
		limit sluice.Limit
		want  ratelimitheader.Policy
	}{
		{sluice.Limit{Name: "a", Quota: 100, Window: time.Minute}, ratelimitheader.Policy{Name: "a", Quota: 100, Window: time.Minute}},
		{sluice.Limit{Name: "b", Quota: 100, Window: 100 * time.Millisecond}, ratelimitheader.Policy{Name: "b", Quota: 1000, Window: time.Second}},
		{sluice.Limit{Name: "c", Quota: 10, Window: 1500 * time.Millisecond}, ratelimitheader.Policy{Name: "c", Quota: 13, Window: 2 * time.Second}},
		{sluice.Limit{Name: "d", Algorithm: sluice.Concurrency, Quota: 3, Window: 400 * time.Millisecond}, ratelimitheader.Policy{Name: "d", Quota: 3, Unit: "concurrent-requests"}},
	} {
		if got := ratelimitheader.PolicyOf(c.limit); got.Name != c.want.Name || got.Quota != c.want.Quota || got.Unit != c.want.Unit || got.Window != c.want.Window {
			t.Errorf("%v: %+v, want %+v", c.limit, got, c.want)
		}
	}
}
