package jsqueue_test

import (
	"fmt"
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
