package jsqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/queue"
)

// A producer enqueues a task; a worker leases it, delivers it and acks it
// with the answer, which Get then shows. It needs a NATS server with
// JetStream at 127.0.0.1:4222, so it is compiled, not run, by go test.
func Example() {
	ctx := context.Background()
	q, err := jsqueue.Open(ctx, jsqueue.Options{URL: "nats://127.0.0.1:4222", Name: "example"})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	got, err := q.Enqueue(ctx, queue.Task{Key: "order-42", Payload: []byte(`{"order":42}`), Priority: 5})
	if err != nil {
		log.Fatal(err) // nothing was stored; the call can be retried with the same key
	}
	leases, err := q.Lease(ctx, 10, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range leases {
		// Deliver l.Payload; on a 429, q.Retry(ctx, l.Receipt, queue.Retry{Throttled: true, ...}).
		if err := q.Ack(ctx, l.Receipt, []byte("201 Created")); err != nil {
			log.Print(err) // queue.ErrLeaseLost: the lease ended and the task was handed out again
		}
	}
	info, err := q.Get(ctx, got[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.State, string(info.Result))
}
