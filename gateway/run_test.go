package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// When a listener fails, Run stops the other one and returns the error —
// it does not wait for a second error that will never come.
func TestRunReturnsWhenAListenerFails(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte("listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\nlimits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Config: cfg, Upstream: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	g.ln.Close() // the public listener fails at once
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil after its listener failed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its listener failed")
	}
}
