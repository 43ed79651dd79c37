package boltqueue_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queuetest"
)

func options(c queuetest.Config) boltqueue.Options {
	return boltqueue.Options{
		Now: c.Now, DedupWindow: c.DedupWindow, MaxAttempts: c.MaxAttempts,
		MaxPayload: 4096, MaxResult: 1024, LockTimeout: time.Second,
	}
}

func TestConformance(t *testing.T) {
	queuetest.Run(t, queuetest.Backend{
		Open: func(t *testing.T, c queuetest.Config) queue.Queue {
			q, err := boltqueue.Open(filepath.Join(t.TempDir(), "queue.db"), options(c))
			if err != nil {
				t.Fatal(err)
			}
			return q
		},
		Reopen: func(t *testing.T, q queue.Queue, c queuetest.Config) queue.Queue {
			path := q.(*boltqueue.Queue).Path()
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q2, err := boltqueue.Open(path, options(c))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = q2.Close() })
			return q2
		},
		FakeClock:  true,
		MaxPayload: 4096,
		MaxResult:  1024,
	})
}
