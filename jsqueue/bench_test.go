package jsqueue_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/queue"
)

// go test -run '^$' -bench . -benchtime 2000x ./jsqueue (about 3
// minutes), against the environment's server (R1, file storage).
func BenchmarkEnqueue(b *testing.B) {
	url := serverURL(b)
	for _, size := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			q := open(b, jsqueue.Options{URL: url})
			batch := make([]queue.Task, size)
			for i := range batch {
				batch[i] = queue.Task{Payload: make([]byte, 256)}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := q.Enqueue(b.Context(), batch...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// Lease(100) and an Ack for each, one goroutine.
func BenchmarkLeaseAck(b *testing.B) {
	q := open(b, jsqueue.Options{URL: serverURL(b)})
	batch := make([]queue.Task, 100)
	for range (b.N + 99) / 100 {
		if _, err := q.Enqueue(b.Context(), batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < b.N {
		ls, err := q.Lease(b.Context(), 100, time.Minute)
		if err != nil || len(ls) == 0 {
			b.Fatalf("Lease = %d, %v", len(ls), err)
		}
		for _, l := range ls {
			if err := q.Ack(b.Context(), l.Receipt, nil); err != nil {
				b.Fatal(err)
			}
		}
		done += len(ls)
	}
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "tasks/s")
}

// Stats reads every unfinished task's record.
func BenchmarkStats(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			q := open(b, jsqueue.Options{URL: serverURL(b)})
			batch := make([]queue.Task, 500)
			for range n / 500 {
				if _, err := q.Enqueue(b.Context(), batch...); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				s, err := q.Stats(b.Context())
				if err != nil || s.Depth != int64(n) {
					b.Fatalf("Stats = %+v, %v", s, err)
				}
			}
		})
	}
}

// A page of 100 dead tasks from the middle of the dead: its cost does not
// grow with their number (the dead-letter stream is read from the
// cursor's sequence).
func BenchmarkListDead(b *testing.B) {
	for _, dead := range []int{500, 5000} {
		b.Run(fmt.Sprintf("dead=%d", dead), func(b *testing.B) {
			q := open(b, jsqueue.Options{URL: serverURL(b), Timeout: 30 * time.Second})
			batch := make([]queue.Task, 500)
			for i := range batch {
				batch[i].Payload = make([]byte, 100)
			}
			for range dead / 500 {
				if _, err := q.Enqueue(b.Context(), batch...); err != nil {
					b.Fatal(err)
				}
				ls, err := q.Lease(b.Context(), 500, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				sem := make(chan struct{}, 32)
				for _, l := range ls {
					sem <- struct{}{}
					wg.Go(func() {
						defer func() { <-sem }()
						if err := q.DeadLetter(b.Context(), l.Receipt, "400 Bad Request"); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			half, err := q.ListDead(b.Context(), "", dead/2)
			if err != nil {
				b.Fatal(err)
			}
			after := half[len(half)-1].ID
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if page, err := q.ListDead(b.Context(), after, 100); err != nil || len(page) != 100 {
					b.Fatalf("ListDead = %d tasks, %v", len(page), err)
				}
			}
		})
	}
}
