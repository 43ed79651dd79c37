package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/queue"
)

// openers are sluice's queues, measured through the queue.Queue contract.
// Each opens a new, empty queue whose files, if it has any, go under dir
// (a new empty directory on the disk of -dir, removed after the row); the
// row closes the queue. A queue kept on a server (jsqueue) should name its
// stream after filepath.Base(dir) and remove it on Close, so that rows do
// not see each other's tasks. Add an entry to measure another backend:
// its name becomes an -impl value.
var openers = map[string]func(dir string) (queue.Queue, error){
	"boltqueue": func(dir string) (queue.Queue, error) {
		return boltqueue.Open(filepath.Join(dir, "queue.db"), boltqueue.Options{})
	},
	"jsqueue": openJSQueue,
}

// firstGuess is each backend's work rate (tasks/s) that sizes the first
// round's backlog (20,000 for a backend not named); later rounds size it
// from the rate seen.
var firstGuess = map[string]float64{"boltqueue": 60000, "jsqueue": 2000}

func firstGuessOf(name string) float64 {
	if g, ok := firstGuess[name]; ok {
		return g
	}
	return 20000
}

// natsURL is the server jsqueue's rows use (SLUICE_NATS_URL, default the
// local one).
func natsURL() string {
	if u := os.Getenv("SLUICE_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// openJSQueue opens a jsqueue named after the row's directory; its Close
// deletes the queue's streams and buckets from the server.
func openJSQueue(dir string) (queue.Queue, error) {
	name := "qb_" + strings.NewReplacer(".", "_", "-", "_").Replace(filepath.Base(dir))
	q, err := jsqueue.Open(context.Background(), jsqueue.Options{URL: natsURL(), Name: name})
	if err != nil {
		return nil, err
	}
	return &droppedOnClose{Queue: q, name: name}, nil
}

type droppedOnClose struct {
	*jsqueue.Queue
	name string
}

func (d *droppedOnClose) Close() error {
	err := d.Queue.Close()
	nc, cerr := nats.Connect(natsURL())
	if cerr != nil {
		return fmt.Errorf("drop %s: %w", d.name, cerr)
	}
	defer nc.Close()
	js, cerr := jetstream.New(nc)
	if cerr != nil {
		return fmt.Errorf("drop %s: %w", d.name, cerr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mine []string
	names := js.StreamNames(ctx)
	for s := range names.Name() {
		if s == d.name || strings.HasPrefix(s, d.name+"_") || strings.HasPrefix(s, "KV_"+d.name+"_") {
			mine = append(mine, s)
		}
	}
	for _, s := range mine {
		if derr := js.DeleteStream(ctx, s); derr != nil && err == nil {
			err = fmt.Errorf("drop %s: delete stream %s: %w", d.name, s, derr)
		}
	}
	return err
}

// sluiceVisibility is the lease of the work rows, long enough that no
// lease expires during a row.
const sluiceVisibility = 30 * time.Second

func sluiceNames() []string { return slices.Sorted(maps.Keys(openers)) }

func openSluice(_ context.Context, name string, e *env) (*suite, error) {
	open, ok := openers[name]
	if !ok {
		return nil, fmt.Errorf("no such implementation")
	}
	s := &sluiceBench{name: name, open: open}
	// The queue states its own durability: open one to ask it.
	durable, err := s.durability(e)
	if err != nil {
		return nil, err
	}
	put := func(q queue.Queue) putFunc {
		return func(ctx context.Context, n int) error {
			tasks := make([]queue.Task, n)
			for i := range tasks {
				tasks[i].Payload = payload
			}
			_, err := q.Enqueue(ctx, tasks...)
			return err
		}
	}
	return &suite{
		durable: durable,
		version: fmt.Sprintf("sluice %s through queue.Queue (this checkout), a new queue per row; its durability as its Stats.Durability states it", name),
		close:   func() error { return nil },
		cases: []testCase{
			{scenario: ingestSingle, label: "Enqueue ×1, 64 goroutines", run: s.ingest(64, 1, put)},
			{scenario: ingestBatch, label: "Enqueue ×100, 8 goroutines", run: s.ingest(8, 100, put)},
			{scenario: work, label: "Lease 50 (30 s) + Ack, 4 consumers, a slice's acks at once", run: s.work(4, 50, 50)},
			{scenario: work, label: "Lease 100 (30 s) + Ack, 4 consumers, a slice's acks at once", run: s.work(4, 100, 100)},
			{scenario: work, label: "Lease 20 (30 s) + Ack, 10 consumers, a slice's acks at once", run: s.work(10, 20, 20),
				note: "200 tasks in flight, as 4 × 50"},
			{scenario: work, label: "Lease 50 (30 s) + Ack, 4 consumers × 8 ackers", run: s.work(4, 50, 8),
				note: "at most 32 acks in flight: the rate is bounded by acks per commit"},
		},
	}, nil
}

// sluiceBench is one sluice backend's rows.
type sluiceBench struct {
	name string
	open func(dir string) (queue.Queue, error)
}

func (s *sluiceBench) durability(e *env) (string, error) {
	var durable string
	err := s.with(e, func(q queue.Queue) error {
		st, err := q.Stats(context.Background())
		durable = st.Durability
		return err
	})
	if durable == "" {
		durable = "? (Stats.Durability is empty)"
	}
	return durable, err
}

// with opens a new queue in a new directory, calls f, then closes the
// queue and removes the directory.
func (s *sluiceBench) with(e *env, f func(queue.Queue) error) error {
	dir, err := e.dataDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	q, err := s.open(dir)
	if err != nil {
		return err
	}
	ferr := f(q)
	if err := q.Close(); ferr == nil {
		ferr = err
	}
	return ferr
}

func (s *sluiceBench) ingest(g, n int, put func(queue.Queue) putFunc) func(context.Context, *env) (result, error) {
	return func(ctx context.Context, e *env) (r result, err error) {
		err = s.with(e, func(q queue.Queue) (err error) {
			r, err = ingest(ctx, e, g, n, put(q))
			return err
		})
		return r, err
	}
}

// work pre-fills a backlog and works it off as the relay does: consumers
// lease slices of n tasks, each task acknowledged (with no result) from
// one of ackers goroutines (ackers = n: every delivery of a slice acks as
// it ends).
func (s *sluiceBench) work(consumers, n, ackers int) func(context.Context, *env) (result, error) {
	return func(ctx context.Context, e *env) (r result, err error) {
		err = s.with(e, func(q queue.Queue) error {
			backlog := e.backlog(firstGuessOf(s.name))
			err := fill(ctx, backlog, 4, 500, func(ctx context.Context, n int) error {
				tasks := make([]queue.Task, n)
				for i := range tasks {
					tasks[i].Payload = payload
				}
				_, err := q.Enqueue(ctx, tasks...)
				return err
			})
			if err != nil {
				return err
			}
			l := leaser{
				lease: func(ctx context.Context, n int) ([]func(context.Context) error, error) {
					leases, err := q.Lease(ctx, n, sluiceVisibility)
					acks := make([]func(context.Context) error, len(leases))
					for i, l := range leases {
						acks[i] = func(ctx context.Context) error { return q.Ack(ctx, l.Receipt, nil) }
					}
					return acks, err
				},
				// Not Stats: jsqueue's reads every record.
				backlog: int64(backlog),
			}
			r, err = relay(ctx, e, consumers, ackers, n, l)
			r.backlog = backlog
			return err
		})
		return r, err
	}
}
