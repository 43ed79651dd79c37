package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/config"
)

// A gateway on the memory store in front of an upstream: the first
// request of a client goes through, the second within the minute is
// answered 429 by the gateway.
func Example() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))
	defer upstream.Close()
	cfg, err := config.Parse("gateway.yaml", []byte(`
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
limits:
  - {name: per-ip, quota: 1, window: 1m}
rules:
  - name: all
    quotas: [{limit: per-ip, key: ip}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := gateway.New(gateway.Options{Config: cfg, Upstream: upstream.URL})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 2 {
		resp, err := client.Get("http://" + g.Addr() + "/hello")
		if err != nil {
			fmt.Println(err)
			break
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// 200 OK
	// 429 Too Many Requests
	// stopped: <nil>
}

// Check refuses what New would, without binding or connecting: here an
// upstream given without its scheme. A file that leaves the upstream to
// --upstream is checked whole, then reported as ErrNoUpstream.
func ExampleCheck() {
	cfg, err := config.Parse("gateway.yaml", []byte(`
limits: [{name: per-ip, quota: 100, window: 1m}]
rules: [{name: all, quotas: [{limit: per-ip, key: ip}]}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(gateway.Check(gateway.Options{Config: cfg, Upstream: "localhost:3000"}))
	fmt.Println(gateway.Check(gateway.Options{Config: cfg, Upstream: "http://localhost:3000"}))
	fmt.Println(gateway.Check(gateway.Options{Config: cfg}))
	// Output:
	// gateway: upstream "localhost:3000": an http:// or https:// URL with a host (did you mean http://localhost:3000?)
	// <nil>
	// gateway: no upstream: give --upstream or upstream: in the configuration
}
