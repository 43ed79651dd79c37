package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/redisstore"
)

// Check's Redis client never reaches a Redis: every call is
// ErrNotConnected (an outage to the store), and it is no Cluster.
func TestOfflineRedis(t *testing.T) {
	t.Parallel()
	c, closeConn, err := offlineRedis(redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EvalSHA(context.Background(), "sha", []string{"k"}, nil); !errors.Is(err, redisstore.ErrNotConnected) {
		t.Errorf("EvalSHA: %v, want ErrNotConnected", err)
	}
	if _, err := c.Eval(context.Background(), "return 1", []string{"k"}, nil); !errors.Is(err, redisstore.ErrNotConnected) {
		t.Errorf("Eval: %v, want ErrNotConnected", err)
	}
	if c.Cluster() {
		t.Error("Cluster: true")
	}
	if err := closeConn(); err != nil {
		t.Errorf("close: %v", err)
	}
}
