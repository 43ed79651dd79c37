package boltqueue_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
)

// leaseForRSS (a child's mode) leases slices of 20 and acknowledges them
// for two seconds, then prints its resident set size.
func leaseForRSS(q *boltqueue.Queue) int {
	ctx := context.Background()
	stop := time.Now().Add(2 * time.Second)
	n := 0
	for time.Now().Before(stop) {
		ls, err := q.Lease(ctx, 20, time.Minute)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, l := range ls {
			if err := q.Ack(ctx, l.Receipt, nil); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			n++
		}
	}
	rss, err := residentKiB()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("R %d %d\n", rss, n)
	return 0
}

func residentKiB() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status")
}

// TestMemoryIndependentOfBacklog is the memory figure: the
// resident set of a process that leases in slices of 20 from a queue of
// 1e6 tasks against one of 1e3. It fills a 1e6-task file (about half a
// minute), so it runs only when SLUICE_MEMORY is set (make bench-queue-memory).
func TestMemoryIndependentOfBacklog(t *testing.T) {
	if os.Getenv("SLUICE_MEMORY") == "" {
		t.Skip("SKIP: the 1e6-task memory figure runs with SLUICE_MEMORY=1 (make bench-queue-memory)")
	}
	rss := map[int]int64{}
	for _, backlog := range []int{1000, 1000000} {
		path := filepath.Join(t.TempDir(), "queue.db")
		q, err := boltqueue.Open(path, boltqueue.Options{})
		if err != nil {
			t.Fatal(err)
		}
		batch := make([]queue.Task, 1000)
		for i := range batch {
			batch[i].Payload = make([]byte, 100)
		}
		for n := 0; n < backlog; n += len(batch) {
			if _, err := q.Enqueue(t.Context(), batch...); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		l := newLedger()
		if killed, stderr := runChild(t, l, "rss", []string{envPath + "=" + path}, 0); killed {
			t.Fatalf("the child was killed\n%s", stderr)
		}
		line := l.report
		var kib int64
		var leased int
		if _, err := fmt.Sscanf(line, "R %d %d", &kib, &leased); err != nil {
			t.Fatalf("the child said %q: %v", line, err)
		}
		rss[backlog] = kib
		t.Logf("backlog %d tasks of 100 bytes: file %.1f MiB (%.0f bytes per task); a consumer leasing slices of 20 (%d leased in 2 s): RSS %.1f MiB",
			backlog, float64(fi.Size())/(1<<20), float64(fi.Size())/float64(backlog), leased, float64(kib)/1024)
	}
	ratio := float64(rss[1000000]) / float64(rss[1000])
	t.Logf("RSS at 1e6 / RSS at 1e3 = %.2f (bound 1.2)", ratio)
	if ratio > 1.2 {
		t.Errorf("RSS grows with the backlog: %.2f× at 1e6 against 1e3", ratio)
	}
}
