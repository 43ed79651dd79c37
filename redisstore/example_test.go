package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// A fleet's limiter: every process runs this against the same Redis (or
// Cluster: list its nodes). Compiled, not run: it needs a Redis.
func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := redisstore.New(redisstore.Options{
		Client:    redisstore.NewRueidis(client),
		KeyHMAC:   []byte("a secret of the fleet"), // no raw identity in Redis
		Policy:    redisstore.FailLocal,            // Redis down: decide locally…
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

// A limiter that may start before its Redis: Dial returns at once when
// Redis is not there and connects in the background; meanwhile the
// policy decides. Compiled, not run: it needs a Redis.
func ExampleDial() {
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err) // bad options only: a Redis down is not an error
	}
	defer conn.Close()
	store, err := redisstore.New(redisstore.Options{
		Client: conn,
		Policy: redisstore.FailClosed,                         // Redis unreachable: refuse…
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), // …and say so, once
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	d, err := store.Allow(context.Background(), "user-42", sluice.Limit{Name: "api", Quota: 100, Window: time.Minute}, 1)
	fmt.Println(d.Allowed, err)
}
