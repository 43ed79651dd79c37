package boltqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
)

// A task that failed for good is dead-lettered with its reason; ListDead
// shows it with its payload, and Revive gives it a new life, attempts
// counted from zero. A second Revive is refused: it is not dead.
func ExampleQueue_Revive() {
	dir, err := os.MkdirTemp("", "boltqueue-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	q, err := boltqueue.Open(filepath.Join(dir, "work.db"), boltqueue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	if _, err := q.Enqueue(ctx, queue.Task{Payload: []byte(`{"order":42}`)}); err != nil {
		log.Fatal(err)
	}
	leases, err := q.Lease(ctx, 1, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := q.DeadLetter(ctx, leases[0].Receipt, "400 Bad Request"); err != nil {
		log.Fatal(err)
	}

	dead, err := q.ListDead(ctx, "", 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Printf("%v: %s (%s)\n", d.State, d.Payload, d.Outcome)
	}
	if err := q.Revive(ctx, dead[0].ID, time.Time{}); err != nil {
		log.Fatal(err)
	}
	again, err := q.Lease(ctx, 1, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leased again: %s, attempt %d\n", again[0].Payload, again[0].Attempt)
	err = q.Revive(ctx, dead[0].ID, time.Time{})
	fmt.Println(errors.Is(err, queue.ErrNotDead), err)
	// Output:
	// dead: {"order":42} (400 Bad Request)
	// leased again: {"order":42}, attempt 1
	// true queue: the task is not dead: task 0000000000000001 is leased
}
