package redisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/drivertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// The driver contract, through a rueidis client of the test's own and
// through a Conn (Dial), single node and Cluster.
func TestDriverContract(t *testing.T) {
	t.Run("NewRueidis", func(t *testing.T) {
		drivertest.Run(t, redisstore.NewRueidis(newRueidis(t, redistest.Addr(t))), false)
	})
	t.Run("Dial", func(t *testing.T) {
		conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{redistest.Addr(t)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		drivertest.Run(t, conn, false)
	})
	t.Run("Cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a Redis Cluster")
		}
		nodes := redistest.StartCluster(t, 3)
		drivertest.Run(t, redisstore.NewRueidis(newRueidis(t, nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr())), true)
	})
}
