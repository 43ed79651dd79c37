package goredis_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore/goredis"
)

// The store on the program's go-redis client: its address, password and
// TLS are go-redis options. Compiled, not run: it needs a Redis
// (TestConformance runs the same store).
func ExampleNew() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "redis.internal:6380",
		Password:              os.Getenv("REDIS_PASSWORD"),
		TLSConfig:             &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "redis.internal"},
		ContextTimeoutEnabled: true, // the store's Timeout bounds each call
	})
	defer client.Close()
	store, err := redisscript.New(redisscript.Options{Client: goredis.New(client), Policy: sluice.FailLocal, Instances: 10})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	d, err := store.Allow(context.Background(), "user-42", sluice.Limit{Name: "api", Quota: 100, Window: time.Minute}, 1)
	fmt.Println(d.Allowed, err)
}

// When go-redis cannot reach Redis, each limit's policy decides; no error
// reaches the caller. Here the client's dialer refuses every connection,
// as a Redis that is down does.
func ExampleNew_redisUnreachable() {
	client := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:6379",
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("connection refused")
		},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisscript.New(redisscript.Options{
		Client:    goredis.New(client),
		Policy:    sluice.FailLocal, // decide in process…
		Instances: 2,                // …on half of each limit
		Policies:  map[string]sluice.FailurePolicy{"login": sluice.FailClosed},
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ctx := context.Background()
	api := sluice.Limit{Name: "api", Algorithm: sluice.SlidingLog, Quota: 4, Window: time.Hour}
	for range 3 {
		d, err := store.Allow(ctx, "user-42", api, 1)
		fmt.Println("api:", d.Allowed, d.Remaining, err)
	}
	d, err := store.Allow(ctx, "user-42", sluice.Limit{Name: "login", Quota: 5, Window: time.Minute}, 1)
	fmt.Println("login:", d.Allowed, d.RetryAfter, err)
	st := store.Stats()
	fmt.Println("unreachable:", st.Unreachable, "fail_local:", st.FailLocal, "fail_closed:", st.FailClosed)
	// Output:
	// api: true 1 <nil>
	// api: true 0 <nil>
	// api: false 0 <nil>
	// login: false 1s <nil>
	// unreachable: true fail_local: 3 fail_closed: 1
}

// The store on a go-redis client that finds the master through Redis
// Sentinel, over TLS, as an ACL user — what sluice serve's
// --redis-sentinel-*, --redis-username, --redis-password-file and
// --redis-tls-ca-file say, in go-redis's options — refusing at start a
// configuration Redis refuses. Compiled, not run: it needs a Sentinel
// setup (TestSentinel runs the same client against one).
func ExampleNew_sentinel() {
	password, err := os.ReadFile("/run/secrets/redis-password")
	if err != nil {
		panic(err)
	}
	caPEM, err := os.ReadFile("/etc/redis/tls/ca.crt")
	if err != nil {
		panic(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		panic("no certificate in /etc/redis/tls/ca.crt")
	}
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "sluice",
		SentinelAddrs:         []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		SentinelPassword:      os.Getenv("SENTINEL_PASSWORD"),
		Username:              "sluice",
		Password:              strings.TrimSpace(string(password)),
		TLSConfig:             &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialTimeout:           time.Second,
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	// What waiting does not heal stops the program; a Redis that is not up
	// yet is left to the failure policy.
	if err := client.Ping(context.Background()).Err(); err != nil {
		var cert *tls.CertificateVerificationError
		if redis.HasErrorPrefix(err, "WRONGPASS") || redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "NOPERM") || errors.As(err, &cert) {
			panic(err)
		}
	}
	store, err := redisscript.New(redisscript.Options{Client: goredis.New(client), Policy: sluice.FailLocal, Instances: 3})
	if err != nil {
		panic(err)
	}
	defer store.Close()
}
