package redisstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisstore"
)

// The conformance suite, unchanged, against a 3-master Redis Cluster the
// test starts itself. Its multi-limit requests use different keys, so they
// span hash slots: the compensated path.
func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	nodes := redistest.StartCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	rc := newRueidis(t, addrs...)
	client := redisstore.NewRueidis(rc)
	if !client.Cluster() {
		t.Fatal("the client does not see a cluster")
	}
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		return newStore(t, conformanceOptions(client, now))
	})
}
