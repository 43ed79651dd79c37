package boltqueue_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
)

// The crash tests run producers and a consumer in a child process (this
// test binary again, told so by the environment), kill it with SIGKILL at
// random instants and at named crash points, restart it, and at the end
// drain the queue. The child says on its standard output every task whose
// Enqueue returned ("E id"), every delivery ("D id") and every Ack that
// returned ("A id"); the parent holds it to that.

const childEnv = "SLUICE_BOLTQUEUE_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

// The child's settings, from its environment.
const (
	envPath   = "SLUICE_BOLTQUEUE_PATH"
	envRun    = "SLUICE_BOLTQUEUE_RUN"
	envCrash  = "SLUICE_BOLTQUEUE_CRASH"       // a crash point's name
	envAfter  = "SLUICE_BOLTQUEUE_CRASH_AFTER" // the how-manieth time it is reached
	envFaulty = "SLUICE_BOLTQUEUE_FAULTY"      // answer Enqueue before the commit
	envLimit  = "SLUICE_BOLTQUEUE_FSIZE"       // RLIMIT_FSIZE in bytes (the full-disk test)
)

const (
	leaseBatch = 20
	visibility = 300 * time.Millisecond
	producers  = 8
)

var out sync.Mutex

// say writes one line with one write, so a kill never cuts a line.
func say(kind byte, id string) {
	out.Lock()
	defer out.Unlock()
	_, _ = os.Stdout.Write([]byte(string(kind) + " " + id + "\n"))
}

func child(mode string) int {
	o := boltqueue.Options{LockTimeout: 5 * time.Second, MaxPayload: 64 << 10}
	if os.Getenv(envFaulty) != "" {
		o = boltqueue.AckBeforeCommit(o)
	}
	if point := os.Getenv(envCrash); point != "" {
		after, _ := strconv.Atoi(os.Getenv(envAfter))
		var mu sync.Mutex
		reached := 0
		boltqueue.SetCrashHook(func(p string) {
			if p != point {
				return
			}
			mu.Lock()
			reached++
			n := reached
			mu.Unlock()
			if n >= after {
				if p == "answered-before-commit" {
					// Let the callers answered early say so first.
					time.Sleep(20 * time.Millisecond)
				}
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		})
	}
	if limit := os.Getenv(envLimit); limit != "" {
		n, _ := strconv.ParseUint(limit, 10, 64)
		// Past the limit a write fails with EFBIG instead of killing the
		// process with SIGXFSZ.
		signalIgnoreXFSZ()
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			fmt.Fprintln(os.Stderr, "setrlimit:", err)
			return 3
		}
	}
	q, err := boltqueue.Open(os.Getenv(envPath), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer q.Close()
	switch mode {
	case "work":
		work(q, os.Getenv(envRun))
	case "drain":
		if err := drain(q); err != nil {
			fmt.Fprintln(os.Stderr, "drain:", err)
			return 1
		}
	case "fill":
		return fill(q)
	case "rss":
		return leaseForRSS(q)
	}
	return 0
}

func work(q *boltqueue.Queue, run string) {
	ctx := context.Background()
	stop := time.Now().Add(5 * time.Second) // the parent kills it well before
	var wg sync.WaitGroup
	for g := range producers {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				n := 1
				if i%4 == 3 {
					n = 5 // some batches
				}
				tasks := make([]queue.Task, n)
				for j := range tasks {
					tasks[j].Payload = fmt.Appendf(nil, "r%s-g%d-%d-%d", run, g, i, j)
				}
				got, err := q.Enqueue(ctx, tasks...)
				if err != nil {
					fmt.Fprintln(os.Stderr, "enqueue:", err)
					return
				}
				for _, e := range got {
					say('E', e.ID)
				}
			}
		})
	}
	wg.Go(func() {
		for time.Now().Before(stop) {
			if err := consume(ctx, q, leaseBatch); err != nil {
				fmt.Fprintln(os.Stderr, "consume:", err)
				return
			}
		}
	})
	wg.Wait()
}

// consume leases one slice, delivers it and acknowledges each task.
func consume(ctx context.Context, q *boltqueue.Queue, n int) error {
	ls, err := q.Lease(ctx, n, visibility)
	if err != nil {
		return err
	}
	if len(ls) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	for _, l := range ls {
		say('D', l.ID)
	}
	crashHere("delivered")
	// The acks go out together, as deliveries finishing at once do, and
	// share commits.
	errs := make(chan error, len(ls))
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			if err := q.Ack(ctx, l.Receipt, nil); err != nil {
				errs <- err
				return
			}
			say('A', l.ID)
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

var delivered int

// crashHere is the harness's own crash point, after delivery and before
// the acks.
func crashHere(point string) {
	if os.Getenv(envCrash) != point {
		return
	}
	delivered++
	if after, _ := strconv.Atoi(os.Getenv(envAfter)); delivered >= after {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// drain delivers everything left, waiting for the leases of killed runs
// to end.
func drain(q *boltqueue.Queue) error {
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		s, err := q.Stats(ctx)
		if err != nil {
			return err
		}
		if s.Depth == 0 {
			return nil
		}
		if err := consume(ctx, q, 500); err != nil {
			return err
		}
	}
	return fmt.Errorf("the queue did not drain in 2 min")
}

// fill enqueues 4 KiB tasks until a commit fails, and says each accepted
// one; it exits 0 when Enqueue failed with the file size limit's error.
func fill(q *boltqueue.Queue) int {
	ctx := context.Background()
	payload := make([]byte, 4<<10)
	for i := 0; i < 100000; i++ {
		got, err := q.Enqueue(ctx, queue.Task{Payload: payload}, queue.Task{Payload: payload})
		if err != nil {
			fmt.Fprintln(os.Stderr, "enqueue:", err)
			if strings.Contains(err.Error(), "file too large") {
				// The queue stays usable for reads after a refused commit.
				if _, err := q.Stats(ctx); err != nil {
					fmt.Fprintln(os.Stderr, "stats after the refusal:", err)
					return 1
				}
				return 0
			}
			return 1
		}
		for _, e := range got {
			say('E', e.ID)
		}
	}
	fmt.Fprintln(os.Stderr, "the file size limit was never reached")
	return 1
}

// ledger is what the parent learned from the children's lines.
type ledger struct {
	enqueued  map[string]bool
	delivered map[string]int
	acked     map[string]bool
	problems  []string
	report    string // a line of another kind (the memory figure's)
}

func newLedger() *ledger {
	return &ledger{enqueued: map[string]bool{}, delivered: map[string]int{}, acked: map[string]bool{}}
}

func (l *ledger) line(s string) {
	kind, id, ok := strings.Cut(s, " ")
	if !ok {
		return
	}
	switch kind {
	case "E":
		l.enqueued[id] = true
	case "D":
		if l.acked[id] {
			l.problems = append(l.problems, fmt.Sprintf("task %s delivered after its Ack returned", id))
		}
		l.delivered[id]++
	case "A":
		l.acked[id] = true
	default:
		l.report = s
	}
}

// runChild starts a child in mode and returns when it has ended: killed
// by the parent after killAfter (if positive), by itself at a crash
// point, or on its own.
func runChild(t *testing.T, l *ledger, mode string, env []string, killAfter time.Duration) (killed bool, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode), env...)
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var timer *time.Timer
	if killAfter > 0 {
		timer = time.AfterFunc(killAfter, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	} else {
		timer = time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	}
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		l.line(sc.Text())
	}
	err = cmd.Wait()
	timer.Stop()
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
		return true, errBuf.String()
	}
	if err != nil {
		t.Fatalf("child %s: %v\n%s", mode, err, errBuf.String())
	}
	return false, errBuf.String()
}

var crashPoints = []string{"", "enqueue-synced", "lease-committed", "delivered", "mid-commit"}

// crashTrials runs trials kills of a child against the file at path and
// drains it; it returns the ledger and the number of kills.
func crashTrials(t *testing.T, path string, trials int, faulty bool) (*ledger, int) {
	l := newLedger()
	kills := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for trial := range trials {
		env := []string{envPath + "=" + path, envRun + "=" + strconv.Itoa(trial)}
		if faulty {
			env = append(env, envFaulty+"=1")
		}
		point := crashPoints[trial%len(crashPoints)]
		if faulty && trial%2 == 1 {
			point = "answered-before-commit"
		}
		killAfter := time.Duration(0)
		if point == "" {
			killAfter = time.Duration(30+rng.IntN(250)) * time.Millisecond
		} else {
			env = append(env, envCrash+"="+point, envAfter+"="+strconv.Itoa(1+rng.IntN(60)))
		}
		killed, stderr := runChild(t, l, "work", env, killAfter)
		if !killed {
			t.Fatalf("trial %d (%q): the child ended without being killed\n%s", trial, point, stderr)
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			// Killed before it created the file (a loaded machine can
			// take longer than the random delay to start a child):
			// nothing could have been accepted; the next trial starts
			// afresh.
			continue
		}
		kills++
		if err := boltqueue.Verify(path); err != nil {
			t.Fatalf("trial %d (%q): after the kill: %v", trial, point, err)
		}
		// Drain now and then, so that a long soak's file (and each
		// check of it) stays small.
		if trial%25 == 24 {
			if killed, stderr := runChild(t, l, "drain", []string{envPath + "=" + path}, 0); killed {
				t.Fatalf("the drain did not end in 3 min\n%s", stderr)
			}
		}
	}
	if killed, stderr := runChild(t, l, "drain", []string{envPath + "=" + path}, 0); killed {
		t.Fatalf("the drain did not end in 3 min\n%s", stderr)
	}
	if err := boltqueue.Verify(path); err != nil {
		t.Fatalf("after the drain: %v", err)
	}
	return l, kills
}

// lost returns the tasks whose Enqueue returned that are not in a state
// ok accepts (any state when ok is nil).
func lost(t *testing.T, path string, l *ledger, ok func(queue.State) bool) []string {
	q, err := boltqueue.Open(path, boltqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var missing []string
	for id := range l.enqueued {
		info, err := q.Get(t.Context(), id)
		if err != nil || ok != nil && !ok(info.State) {
			missing = append(missing, fmt.Sprintf("%s (%v %v)", id, info.State, err))
		}
	}
	return missing
}

func succeeded(s queue.State) bool { return s == queue.Succeeded }

func trials(t *testing.T) int {
	if s := os.Getenv("SLUICE_CRASH_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_CRASH_TRIALS=%q: not a positive whole number", s)
		}
		return n
	}
	if testing.Short() {
		return 10
	}
	return 100
}

// TestKill9 is the harness: 0 acknowledged tasks lost, duplicates
// within kills × lease batch, the file consistent after every kill.
func TestKill9(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	n := trials(t)
	l, kills := crashTrials(t, path, n, false)
	for _, p := range l.problems {
		t.Error(p)
	}
	missing := lost(t, path, l, succeeded)
	dups := 0
	for _, n := range l.delivered {
		dups += n - 1
	}
	t.Logf("%d trials, %d kills: %d tasks accepted, %d lost, %d deliveries, %d duplicates (bound %d)",
		n, kills, len(l.enqueued), len(missing), len(l.enqueued)+dups, dups, kills*leaseBatch)
	if len(missing) > 0 {
		t.Errorf("%d accepted tasks lost, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	if dups > kills*leaseBatch {
		t.Errorf("%d duplicate deliveries, more than kills × lease batch = %d", dups, kills*leaseBatch)
	}
	if len(l.enqueued) < n {
		t.Errorf("only %d tasks accepted in %d trials: the harness did little", len(l.enqueued), n)
	}
}

// TestKill9NegativeControl runs the same harness against a queue that
// answers Enqueue before its commit is durable: it must see tasks lost,
// or the harness could not see a loss.
func TestKill9NegativeControl(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	l, kills := crashTrials(t, path, 10, true)
	missing := lost(t, path, l, succeeded)
	t.Logf("answer before commit: %d kills, %d accepted, %d lost", kills, len(l.enqueued), len(missing))
	if len(missing) == 0 {
		t.Fatal("the harness saw no loss from a queue that answers before its commit: it cannot see one")
	}
}

// A full disk (here a file size limit on the process) makes Enqueue fail
// loudly; every task it accepted before is still there after a restart.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	l := newLedger()
	_, stderr := runChild(t, l, "fill", []string{envPath + "=" + path, envLimit + "=" + strconv.Itoa(40<<20)}, 0)
	if !strings.Contains(stderr, "file too large") {
		t.Fatalf("the child's refusal does not say why: %q", stderr)
	}
	if len(l.enqueued) == 0 {
		t.Fatal("nothing was accepted before the limit")
	}
	if err := boltqueue.Verify(path); err != nil {
		t.Fatal(err)
	}
	if missing := lost(t, path, l, nil); len(missing) > 0 {
		t.Fatalf("%d of %d accepted tasks missing after the refusal: %v", len(missing), len(l.enqueued), missing[:min(5, len(missing))])
	}
	t.Logf("accepted %d tasks of 4 KiB under a 40 MiB limit, then: %s", len(l.enqueued), strings.TrimSpace(stderr))
}
