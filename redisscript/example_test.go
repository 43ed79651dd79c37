package redisscript_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore/goredis"
)

// The store on a go-redis client: the program compiles go-redis, not
// rueidis. Compiled, not run: it needs a Redis (the tests of
// redisstore/goredis run the same store).
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisscript.New(redisscript.Options{
		Client:  goredis.New(client),
		KeyHMAC: []byte("a secret of the fleet"), // no raw identity in Redis
		Policy:  sluice.FailOpen,                 // Redis down: allow
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	d, err := store.Allow(context.Background(), "user-42", sluice.Limit{Name: "api", Quota: 100, Window: time.Minute}, 1)
	fmt.Println(d.Allowed, err)
}

// unreachable is a Client — the three methods a driver implements — for a
// Redis that cannot be reached: every call fails as a refused connection
// does.
type unreachable struct{ calls int }

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (u *unreachable) EvalSHA(context.Context, string, []string, []string) ([]int64, error) {
	u.calls++
	return nil, errRefused
}

func (u *unreachable) Eval(context.Context, string, []string, []string) ([]int64, error) {
	u.calls++
	return nil, errRefused
}

func (u *unreachable) Cluster() bool { return false }

// When Redis cannot answer, each limit's policy decides and no error
// reaches the caller; after BreakerFailures failed calls the breaker opens
// and decisions stop calling Redis (until a probe, BreakerCooldown later).
func Example_failurePolicies() {
	client := &unreachable{}
	store, err := redisscript.New(redisscript.Options{
		Client:          client,
		Policy:          sluice.FailClosed,
		Policies:        map[string]sluice.FailurePolicy{"search": sluice.FailOpen},
		BreakerCooldown: time.Hour,
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ctx := context.Background()
	api := sluice.Limit{Name: "api", Quota: 100, Window: time.Minute}
	search := sluice.Limit{Name: "search", Quota: 10, Window: time.Minute}
	for range 3 {
		d, err := store.Allow(ctx, "user-42", api, 1)
		fmt.Println("api:", d.Allowed, d.RetryAfter, err)
	}
	d, err := store.Allow(ctx, "user-42", search, 1)
	fmt.Println("search:", d.Allowed, err)
	st := store.Stats()
	fmt.Println("calls:", client.calls, "breaker open:", st.BreakerOpen, "fail_closed:", st.FailClosed, "fail_open:", st.FailOpen)
	// Output:
	// api: false 1s <nil>
	// api: false 1s <nil>
	// api: false 1s <nil>
	// search: true <nil>
	// calls: 3 breaker open: true fail_closed: 3 fail_open: 1
}
