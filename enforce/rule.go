package enforce

import (
	"fmt"
	"math"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// MaxRuleName bounds a rule's name (a metrics label).
const MaxRuleName = 64

// CheckRuleName refuses a rule name that is empty, longer than
// MaxRuleName or not printable ASCII.
func CheckRuleName(name string) error {
	ok := name != "" && len(name) <= MaxRuleName
	for i := 0; ok && i < len(name); i++ {
		ok = name[i] >= 0x20 && name[i] <= 0x7e
	}
	if !ok {
		return fmt.Errorf("rule %q: the name must be 1 to %d bytes of printable ASCII", name, MaxRuleName)
	}
	return nil
}

// CompileQuota compiles a quota's limit and checks its static cost (0:
// none, a request costs 1): a positive number the limit can take — within
// its resolution and its capacity (a cost above it would refuse every
// request).
func CompileQuota(l sluice.Limit, cost float64) (*algo.Params, error) {
	p, err := algo.Compile(l)
	if err != nil {
		return nil, err
	}
	if cost < 0 || math.IsNaN(cost) || math.IsInf(cost, 0) {
		return nil, fmt.Errorf("cost %v: must be positive (0 means 1)", cost)
	}
	if cost > 0 {
		if _, err := p.Cost(cost); err != nil {
			return nil, err
		}
		if capacity := l.Capacity(); cost > capacity {
			return nil, fmt.Errorf("cost %v exceeds the limit's capacity %v: every request would be refused", cost, capacity)
		}
	}
	return p, nil
}
