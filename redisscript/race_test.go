package redisscript_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
)

// The last-token race across processes: 4 OS processes × 16 goroutines
// each try 4 times, at once, to take a token from one key of capacity 100
// that never refills; 1000 trials. Every trial must admit exactly 100.
// The same harness run with a GET-then-SET limiter must over-admit.
func TestLastTokenRaceAcrossProcesses(t *testing.T) {
	addr := redistest.Addr(t)
	trials := 1000
	if testing.Short() {
		trials = 50
	}
	counts, coalesced := raceProcesses(t, addr, "script", trials)
	for trial, n := range counts {
		if n != 100 {
			t.Fatalf("trial %d: %d admitted, want exactly 100", trial, n)
		}
	}
	// The stores coalesce (the default): the race must have gone through
	// batches too, or it tested only the single call.
	if coalesced == 0 {
		t.Fatal("no decision was coalesced in any process: the batches were not raced")
	}
	t.Logf("%d trials × 4 processes × 16 goroutines: exactly 100 admitted in every trial; %d decisions went in batches", trials, coalesced)
}

func TestLastTokenRaceCatchesGetThenSet(t *testing.T) {
	addr := redistest.Addr(t)
	worst := 0
	counts, _ := raceProcesses(t, addr, "getset", 20)
	for _, n := range counts {
		worst = max(worst, n)
	}
	if worst <= 100 {
		t.Fatalf("GET-then-SET admitted at most %d of 100 in 20 trials: the harness cannot see a race", worst)
	}
	t.Logf("GET-then-SET admitted up to %d of 100", worst)
}

const (
	raceProcs      = 4
	raceGoroutines = 16
	raceAttempts   = 4
)

// raceProcesses runs the race in raceProcs child processes (this test
// binary, re-executed) and returns the admitted count of each trial.
func raceProcesses(t *testing.T, addr, variant string, trials int) (counts []int, coalesced int) {
	t.Helper()
	prefix := fmt.Sprintf("race-%s-%d", variant, time.Now().UnixNano())
	counts = make([]int, trials)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, raceProcs)
	for range raceProcs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRaceChild$", "-test.v")
		cmd.Env = append(os.Environ(), "SLUICE_RACE_CHILD="+strings.Join([]string{addr, variant, prefix, strconv.Itoa(trials)}, ","))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var trial, n int
				if _, err := fmt.Sscanf(sc.Text(), "trial %d admitted %d", &trial, &n); err == nil {
					mu.Lock()
					counts[trial] += n
					mu.Unlock()
				} else if _, err := fmt.Sscanf(sc.Text(), "coalesced %d", &n); err == nil {
					mu.Lock()
					coalesced += n
					mu.Unlock()
				}
			}
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("child: %v", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return counts, coalesced
}

// TestRaceChild is a child process of raceProcesses (it does nothing in a
// normal run). For each trial it waits at a barrier of all processes in
// Redis, then races.
func TestRaceChild(t *testing.T) {
	env := os.Getenv("SLUICE_RACE_CHILD")
	if env == "" {
		t.Skip("a child process of TestLastTokenRace*; nothing to do on its own")
	}
	parts := strings.Split(env, ",")
	addr, variant, prefix := parts[0], parts[1], parts[2]
	trials, _ := strconv.Atoi(parts[3])
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	store, err := redisscript.New(redisscript.Options{Client: redisstore.NewRueidis(rc), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	// A token per 36 s: none comes back during a trial; the key expires
	// within the hour.
	limit := sluice.Limit{Name: "race", Quota: 100, Window: time.Hour}
	for trial := range trials {
		barrier := fmt.Sprintf("%s:barrier:%d", prefix, trial)
		if err := rc.Do(ctx, rc.B().Incr().Key(barrier).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		rc.Do(ctx, rc.B().Expire().Key(barrier).Seconds(60).Build())
		for {
			n, _ := rc.Do(ctx, rc.B().Get().Key(barrier).Build()).AsInt64()
			if n >= raceProcs {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		key := fmt.Sprintf("%s:key:%d", prefix, trial)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range raceGoroutines {
			wg.Go(func() {
				for range raceAttempts {
					if take(ctx, variant, store, rc, key, limit) {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		fmt.Printf("trial %d admitted %d\n", trial, admitted.Load())
	}
	fmt.Printf("coalesced %d\n", store.Stats().Batched)
}

// take is one attempt: the store's atomic script, or the seed's
// read-then-write on a shared counter (two round trips, nothing atomic).
func take(ctx context.Context, variant string, store *redisscript.Store, rc rueidis.Client, key string, limit sluice.Limit) bool {
	if variant == "script" {
		d, err := store.Allow(ctx, key, limit, 1)
		return err == nil && d.Allowed
	}
	used, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return false
	}
	if used >= 100 {
		return false
	}
	return rc.Do(ctx, rc.B().Set().Key(key).Value(strconv.FormatInt(used+1, 10)).Ex(time.Minute).Build()).Error() == nil
}
