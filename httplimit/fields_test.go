package httplimit

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// The RateLimit field formatted on the fast path is byte for byte what
// ratelimitheader.FormatLimits writes, for any names and decisions.
func TestFastFieldsMatchFormatLimits(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, enforce.MaxQuotas).Draw(t, "n")
		var quotas []Quota
		var ds []sluice.Decision
		var ls []ratelimitheader.Limit
		for i := range n {
			name := fmt.Sprintf("%s-%d", rapid.StringMatching(`[A-Za-z0-9_.:/-]{1,12}`).Draw(t, "name"), i)
			quotas = append(quotas, Quota{Limit: sluice.Limit{Name: name, Quota: 5, Window: time.Second}})
			d := sluice.Decision{
				Allowed:    rapid.Bool().Draw(t, "allowed"),
				Remaining:  float64(rapid.Int64Range(0, 1e12).Draw(t, "remaining")) / 1e3,
				ResetAfter: time.Duration(rapid.Int64Range(0, 1e15).Draw(t, "reset")),
				RetryAfter: time.Duration(rapid.Int64Range(1, 1e15).Draw(t, "retry")),
			}
			if !d.Allowed && rapid.IntRange(0, 4).Draw(t, "never") == 0 {
				d.RetryAfter = sluice.Never
			}
			ds = append(ds, d)
			ls = append(ls, ratelimitheader.LimitOf(name, d))
		}
		c, err := compileRule(Rule{Name: "r", Quotas: quotas}, false, false)
		if err != nil {
			t.Fatal(err)
		}
		m := &Middleware{}
		h := http.Header{}
		var a *arena // with and without one: the field is the same
		if rapid.Bool().Draw(t, "arena") {
			a = new(arena)
		}
		combined := sluice.Combine(ds)
		m.setFields(h, &c, ds, &combined, a)
		want, err := ratelimitheader.FormatLimits(ls)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Get("RateLimit"); got != want {
			t.Fatalf("fast path %q, FormatLimits %q", got, want)
		}
	})
}
