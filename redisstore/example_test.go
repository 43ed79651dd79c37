package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// A fleet's limiter on a rueidis client of the program's own: every
// process runs this against the same Redis (or Cluster: list its nodes).
// Compiled, not run: it needs a Redis (TestConformance runs the same
// store).
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := redisstore.New(redisstore.Options{
		Client:    redisstore.NewRueidis(client),
		KeyHMAC:   []byte("a secret of the fleet"), // no raw identity in Redis
		Policy:    sluice.FailLocal,                // Redis down: decide locally…
		Instances: 10,                              // …at a tenth of each limit
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	perUser := sluice.Limit{Name: "api", Quota: 100, Window: time.Minute, Burst: 20}
	d, err := store.Allow(context.Background(), "user-42", perUser, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Allowed, d.Remaining)
}

// A limiter that starts before its Redis: Dial returns at once when Redis
// is not there and keeps connecting in the background; meanwhile each
// limit's policy decides, and the store says Redis is unreachable. Here
// nothing listens at the address (a port just freed), so the run shows
// the policies at work.
func ExampleDial() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := l.Addr().String()
	l.Close() // Redis is not there (yet)

	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{addr}})
	if err != nil {
		panic(err) // bad options only: a Redis down is not an error
	}
	defer conn.Close()
	store, err := redisstore.New(redisstore.Options{
		Client:   conn,
		Policy:   sluice.FailClosed,                                          // Redis unreachable: refuse…
		Policies: map[string]sluice.FailurePolicy{"search": sluice.FailOpen}, // …but this one allows
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	ctx := context.Background()
	api := sluice.Limit{Name: "api", Quota: 100, Window: time.Minute}
	search := sluice.Limit{Name: "search", Quota: 10, Window: time.Minute}
	d, err := store.Allow(ctx, "user-42", api, 1)
	fmt.Println("api:", d.Allowed, d.RetryAfter, err)
	d, err = store.Allow(ctx, "user-42", search, 1)
	fmt.Println("search:", d.Allowed, err)
	st := store.Stats()
	fmt.Println("connected:", conn.Connected(), "unreachable:", st.Unreachable, "fail_closed:", st.FailClosed, "fail_open:", st.FailOpen)
	// Output:
	// api: false 1s <nil>
	// search: true <nil>
	// connected: false unreachable: true fail_closed: 1 fail_open: 1
}
