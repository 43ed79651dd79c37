package boltqueue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
)

func openBench(b *testing.B) *boltqueue.Queue {
	b.Helper()
	q, err := boltqueue.Open(filepath.Join(b.TempDir(), "bench.db"), boltqueue.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Close() })
	return q
}

func report(b *testing.B, q *boltqueue.Queue, tasks int) {
	b.ReportMetric(float64(tasks)/b.Elapsed().Seconds(), "tasks/s")
	commits, changes := q.CommitStats()
	if commits > 0 {
		b.ReportMetric(float64(changes)/float64(commits), "changes/commit")
	}
}

// 64 producers of single tasks: each Enqueue is durable when it returns;
// they share fsyncs through the group commit.
func BenchmarkEnqueue64(b *testing.B) {
	q := openBench(b)
	payload := make([]byte, 100)
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := q.Enqueue(ctx, queue.Task{Payload: payload}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	report(b, q, b.N)
}

// Batches of 100 from 8 producers.
func BenchmarkEnqueueBatch100(b *testing.B) {
	q := openBench(b)
	batch := make([]queue.Task, 100)
	for i := range batch {
		batch[i].Payload = make([]byte, 100)
	}
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := q.Enqueue(ctx, batch...); err != nil {
				b.Error(err)
				return
			}
		}
	})
	report(b, q, b.N*100)
}

// The consumer side: slices of 50 leased, each task acknowledged on its
// own (as deliveries finish), 4 consumers.
func BenchmarkLeaseAck(b *testing.B) {
	q := openBench(b)
	ctx := context.Background()
	batch := make([]queue.Task, 1000)
	for i := range batch {
		batch[i].Payload = make([]byte, 100)
	}
	for n := 0; n < b.N+4*50; n += len(batch) {
		if _, err := q.Enqueue(ctx, batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for range 4 {
		wg.Go(func() {
			for {
				mu.Lock()
				left := b.N - done
				mu.Unlock()
				if left <= 0 {
					return
				}
				ls, err := q.Lease(ctx, 50, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				var acks sync.WaitGroup
				for _, l := range ls {
					acks.Go(func() {
						if err := q.Ack(ctx, l.Receipt, nil); err != nil {
							b.Error(err)
						}
					})
				}
				acks.Wait()
				mu.Lock()
				done += len(ls)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	report(b, q, done)
}

// One producer: each Enqueue waits for its own commit, nothing else (the
// committer's wait for answered callers must not tax a lone caller).
func BenchmarkEnqueue1(b *testing.B) {
	q := openBench(b)
	payload := make([]byte, 100)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := q.Enqueue(ctx, queue.Task{Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	report(b, q, b.N)
}

// killAll dead-letters every task of q (ready ones, leased for an hour),
// 64 at a time so that they share commits.
func killAll(b *testing.B, q *boltqueue.Queue) {
	b.Helper()
	ctx := context.Background()
	for {
		ls, err := q.Lease(ctx, 1000, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) == 0 {
			return
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for _, l := range ls {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := q.DeadLetter(ctx, l.Receipt, "400 Bad Request"); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}

// A page of 100 dead tasks from the middle of the dead: its cost does not
// grow with their number (the dead index is read from the cursor's place).
func BenchmarkListDead(b *testing.B) {
	for _, dead := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("dead=%d", dead), func(b *testing.B) {
			q := openBench(b)
			ctx := context.Background()
			batch := make([]queue.Task, 1000)
			for i := range batch {
				batch[i].Payload = make([]byte, 100)
			}
			for range dead / 1000 {
				if _, err := q.Enqueue(ctx, batch...); err != nil {
					b.Fatal(err)
				}
			}
			killAll(b, q)
			after := "" // the middle: the last of the first dead/2
			for left := dead / 2; left > 0; {
				page, err := q.ListDead(ctx, after, min(left, queue.MaxList))
				if err != nil {
					b.Fatal(err)
				}
				after, left = page[len(page)-1].ID, left-len(page)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if page, err := q.ListDead(ctx, after, 100); err != nil || len(page) != 100 {
					b.Fatalf("ListDead = %d tasks, %v", len(page), err)
				}
			}
		})
	}
}
