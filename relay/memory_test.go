package relay_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/relay"
)

// rssChildEnv, when set to a directory, makes the test binary a relay
// over the queue files there (see drainForRSS).
const rssChildEnv = "SLUICE_RELAY_RSS_DIR"

func memoryOptions(dir, origin string) relay.Options {
	o := oneTarget(origin, func(tc *relay.Target) {
		tc.Limits = []sluice.Limit{{Name: "per_second", Quota: 200, Window: time.Second}}
	})
	o.Open = boltOpener(dir)
	o.Logger = quietLog()
	return o
}

// drainForRSS (a child's mode) runs a relay over the backlog in dir,
// delivering slowly (200/s) for three seconds, then prints its resident
// set size and how many it delivered.
func drainForRSS(dir string) int {
	delivered := 0
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
	defer tg.Close()
	r, err := relay.New(context.Background(), memoryOptions(dir, tg.URL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = r.Run(ctx)
	s, _ := r.Stats(context.Background(), "jobs")
	delivered = int(s.Delivered)
	rss, err := residentKiB()
	_ = r.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("R %d %d %d\n", rss, delivered, s.Depth)
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
// resident set of a relay draining 1e6 queued tasks slowly against one
// draining 1e3. Filling 1e6 tasks takes a while, so it runs only when
// SLUICE_MEMORY is set (make bench-relay-memory).
func TestMemoryIndependentOfBacklog(t *testing.T) {
	if os.Getenv("SLUICE_MEMORY") == "" {
		t.Skip("SKIP: the 1e6-task memory figure runs with SLUICE_MEMORY=1 (make bench-relay-memory)")
	}
	rss := map[int]int64{}
	for _, backlog := range []int{1000, 1000000} {
		dir := t.TempDir()
		r, err := relay.New(context.Background(), memoryOptions(dir, "http://127.0.0.1:1"))
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, 100)
		batch := make([]relay.Request, 1000)
		for i := range batch {
			batch[i] = relay.Request{URL: "/records", Body: body}
		}
		for n := 0; n < backlog; n += len(batch) {
			if _, err := r.Enqueue(context.Background(), "jobs", batch...); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(filepath.Join(dir, "jobs.db"))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), rssChildEnv+"="+dir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		var kib int64
		var delivered, depth int
		if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "R %d %d %d", &kib, &delivered, &depth); err != nil {
			t.Fatalf("the child said %q: %v", out, err)
		}
		rss[backlog] = kib
		t.Logf("backlog %d tasks (file %.1f MiB): a relay delivering at 200/s (%d in 3 s, %d left): RSS %.1f MiB",
			backlog, float64(fi.Size())/(1<<20), delivered, depth, float64(kib)/1024)
	}
	ratio := float64(rss[1000000]) / float64(rss[1000])
	t.Logf("RSS at 1e6 / RSS at 1e3 = %.2f (bound 1.2)", ratio)
	if ratio > 1.2 {
		t.Errorf("RSS grows with the backlog: %.2f× at 1e6 against 1e3", ratio)
	}
}
