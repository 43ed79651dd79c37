package etcdlease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sluicehq/sluice/etcdlease"
	"github.com/sluicehq/sluice/lease"
)

// Two processes share a limit cut into 4 partitions: the first takes
// what it wants, the second finds the rest, and both read the same wants
// to agree on a fair split. Here both run in one process, against the
// test's etcd (endpoints, e.g. "http://127.0.0.1:2379").
func Example() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	c, err := etcdlease.New(etcdlease.Options{Client: cli})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	g := lease.Group{Name: "example/api", Partitions: 4, TTL: 3 * time.Second}

	r1, err := c.Sync(ctx, lease.SyncRequest{Group: g, Member: "host-1", Want: 3, Acquire: 3})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("host-1 acquired", len(r1.Acquired))

	r2, err := c.Sync(ctx, lease.SyncRequest{Group: g, Member: "host-2", Want: 2, Acquire: 2})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("host-2 acquired", len(r2.Acquired))
	fmt.Println("wants", r2.Wants, "fair split", lease.Allot(r2.Wants, g.Partitions))

	// Both end gracefully: what they held goes back at once.
	for _, m := range []struct {
		id string
		r  lease.SyncReply
	}{{"host-1", r1}, {"host-2", r2}} {
		var held []lease.Grant
		for _, a := range m.r.Acquired {
			held = append(held, a.Grant)
		}
		if err := c.Leave(ctx, g, m.id, held); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// host-1 acquired 3
	// host-2 acquired 1
	// wants [3 2] fair split [2 2]
}
