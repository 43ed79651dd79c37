package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/server"
)

// A decision service on free loopback ports, reading an
// envoyproxy/ratelimit file (2 calls a minute per api_key), on a memory
// store whose clock stands still so that the output does not change.
func Example() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(file), 0o600); err != nil {
		panic(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 45, 0, time.UTC)
	store, err := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	s, err := server.New(server.Options{
		Load: server.EnvoyLoader(dir), Limiter: store,
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
	})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }() // nil: no SIGHUP channel

	for range 3 {
		resp, err := http.Post("http://"+s.HTTPAddr()+"/json", "application/json",
			strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`))
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ", string(body))
	}
	stop() // drains, then closes the listeners
	fmt.Println("Run:", <-done)
	// Output:
	// 200 {"overall_code":"OK","statuses":[{"code":"OK","current_limit":{"requests_per_unit":2,"unit":"MINUTE"},"limit_remaining":1,"duration_until_reset":"15s"}]}
	// 200 {"overall_code":"OK","statuses":[{"code":"OK","current_limit":{"requests_per_unit":2,"unit":"MINUTE"},"duration_until_reset":"15s"}]}
	// 429 {"overall_code":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","current_limit":{"requests_per_unit":2,"unit":"MINUTE"},"duration_until_reset":"15s"}]}
	// Run: <nil>
}
