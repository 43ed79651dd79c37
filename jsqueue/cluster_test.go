package jsqueue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/queue"
)

// Three nodes, every stream and bucket on all three (R3), producers under
// load, one node killed with SIGKILL mid-load and started again: every
// task whose Enqueue returned nil is delivered.
func TestClusterKillOneNode(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster under load: not in -short")
	}
	// Not parallel: Raft elections under -race on a loaded machine take
	// longer than the 10 s the test keeps a node down.
	start := time.Now()
	ports := []int{redistest.FreePort(t), redistest.FreePort(t), redistest.FreePort(t)}
	routes := make([]string, 3)
	cluster := make([]int, 3)
	for i := range cluster {
		cluster[i] = redistest.FreePort(t)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", cluster[i])
	}
	nodes := make([]*server, 3)
	var wg sync.WaitGroup
	for i := range nodes {
		nodes[i] = startServer(t, fmt.Sprintf("n%d", i), ports[i],
			"--cluster_name", "sluice", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
	}
	urls := []string{nodes[0].url, nodes[1].url, nodes[2].url}
	url := strings.Join(urls, ",")
	waitJetStream(t, url, 3)

	q := open(t, jsqueue.Options{URL: url, Replicas: 3, Timeout: 2 * time.Second, AckWait: 2 * time.Second, MaxAttempts: 100})
	t.Logf("cluster up, queue open after %v", time.Since(start))

	ctx, stop := context.WithCancel(t.Context())
	var mu sync.Mutex
	acked := map[string]bool{}
	failed := 0

	// Consumers, all along: every acknowledged task must come out.
	seen := map[string]bool{}
	missing := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for id := range acked {
			if !seen[id] {
				n++
			}
		}
		return n
	}
	var consumers sync.WaitGroup
	var leaseErrs, ackErrs atomic.Int64
	done := make(chan struct{})
	for range 8 {
		consumers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				ls, err := q.Lease(t.Context(), 100, 10*time.Second)
				if err != nil {
					leaseErrs.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if len(ls) == 0 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				mu.Lock()
				for _, l := range ls {
					seen[l.ID] = true
				}
				mu.Unlock()
				for _, l := range ls {
					if err := q.Ack(t.Context(), l.Receipt, nil); err != nil {
						ackErrs.Add(1)
					}
				}
			}
		})
	}

	// Producers: batches of 10 until stopped; every ID of a batch whose
	// Enqueue returned nil is recorded.
	for p := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				batch := make([]queue.Task, 10)
				for j := range batch {
					batch[j] = queue.Task{Key: fmt.Sprintf("p%d-%d-%d", p, i, j), Payload: fmt.Appendf(nil, "p%d-%d-%d", p, i, j)}
				}
				got, err := q.Enqueue(context.Background(), batch...)
				mu.Lock()
				if err != nil {
					failed++
					if failed <= 4 {
						t.Logf("%v: Enqueue: %v", time.Since(start).Round(time.Millisecond), err)
					}
				} else {
					for _, e := range got {
						acked[e.ID] = true
					}
				}
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	time.Sleep(1500 * time.Millisecond)
	before := count()
	nodes[1].kill()
	t.Logf("%v: killed n1 with %d tasks acknowledged", time.Since(start).Round(time.Millisecond), before)
	// nats-server 2.9 elects a new leader for the streams n1 led after 4
	// to 9 s (its Raft election timeout): keep n1 down past that.
	time.Sleep(10 * time.Second)
	during := count()
	nodes[1].start()
	t.Logf("%v: restarted n1; %d tasks acknowledged while it was down", time.Since(start).Round(time.Millisecond), during-before)
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	total := count()
	t.Logf("producers stopped: %d tasks acknowledged, %d Enqueue calls failed", total, failed)
	if during == before {
		t.Errorf("no Enqueue succeeded in the 10 s a node was down")
	}

	// Drain while the consumers make progress: a task that is lost stops
	// it (20 s without one more delivered), a slow drain does not (R3
	// writes under -race on two loaded cores go at ~100 tasks/s).
	left, progress, deadline := missing(), time.Now(), time.Now().Add(3*time.Minute)
	for left > 0 && time.Since(progress) < 20*time.Second && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if n := missing(); n < left {
			left, progress = n, time.Now()
		}
	}
	close(done)
	consumers.Wait()
	lost := 0
	for id := range acked {
		if !seen[id] {
			lost++
			if lost <= 5 {
				t.Errorf("task %s was acknowledged by Enqueue and never delivered", id)
			}
		}
	}
	t.Logf("drained %d tasks (%d acknowledged, %d lost, %d Lease errors, %d Ack errors) in %v total",
		len(seen), total, lost, leaseErrs.Load(), ackErrs.Load(), time.Since(start))
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged tasks lost", lost, total)
	}
	if total == 0 {
		t.Fatal("no task was acknowledged: the test tested nothing")
	}
}
