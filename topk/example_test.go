package topk_test

import (
	"fmt"

	"github.com/sluicehq/sluice/topk"
)

// Which tenants made most of the rejections this period, with 3 counters.
func Example() {
	sk, err := topk.New(3)
	if err != nil {
		panic(err)
	}
	rejections := []struct {
		tenant string
		cost   float64
	}{
		{"acme", 5}, {"globex", 1}, {"acme", 3}, {"initech", 2},
		{"umbrella", 1}, {"acme", 4}, {"hooli", 1}, {"globex", 6},
	}
	for _, r := range rejections {
		sk.Add(r.tenant, r.cost)
	}
	fmt.Println("total", sk.Total())
	for _, e := range sk.Top(2) {
		fmt.Printf("%-8s count %-4v error %-4v share ≥ %.0f%%\n",
			e.Key, e.Count, e.Error, 100*(e.Count-e.Error)/sk.Total())
	}
	sk.Reset() // the next period starts afresh
	fmt.Println("after reset", sk.Total(), sk.Top(2))
	// Output:
	// total 23
	// acme     count 12   error 0    share ≥ 52%
	// globex   count 8    error 2    share ≥ 26%
	// after reset 0 []
}
