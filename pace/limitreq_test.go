package pace_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pace"
)

// limitReq is nginx's limit_req with nodelay, on the runtime's clock (so
// under testing/synctest, exact), after ngx_http_limit_req_module.c: the
// excess is kept in thousandths of a request and drained at the rate per
// elapsed millisecond; a request that would take it above the burst is
// answered 429 at once and not counted. Each answer takes rtt. nginx_test.go
// runs the same scenarios against a real nginx; this one runs them in a
// fraction of a second, and the same figures come out (docs/BENCHMARKS.md).
type limitReq struct {
	rate, burst int64 // requests per second; requests over the rate nginx takes at once
	rtt         time.Duration

	mu        sync.Mutex
	started   bool
	excess    int64 // thousandths of a request
	last      int64 // Unix milliseconds of the last request counted
	throttled int
}

func (l *limitReq) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	time.Sleep(l.rtt / 2)
	if !l.admit(time.Now().UnixMilli()) {
		time.Sleep(l.rtt / 2)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	time.Sleep(l.rtt / 2)
	_, _ = w.Write([]byte("ok"))
}

func (l *limitReq) admit(now int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.started {
		l.started, l.last = true, now
		return true
	}
	elapsed := now - l.last
	excess := max(l.excess-l.rate*elapsed+1000, 0)
	if excess > l.burst*1000 {
		l.throttled++
		return false
	}
	l.excess = excess
	if elapsed != 0 {
		l.last = now
	}
	return true
}

// emulatedRun sends requests from workers goroutines through a Transport
// over a Pacer of o to a limitReq of rate and burst, on the fake clock, and
// returns the time they took, the 429s and the best possible time (the burst
// and the first at once, then one every 1/rate).
func emulatedRun(t *testing.T, o pace.Options, rate, burst int64, requests, workers int) (took time.Duration, throttled int, best time.Duration) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		target := &limitReq{rate: rate, burst: burst, rtt: time.Millisecond}
		p := newPacer(t, o)
		tr, err := pace.NewTransport(pace.TransportOptions{Base: inProcess{target}, Pacer: p})
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: tr}
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= int64(requests) {
					resp, err := client.Get("http://target.test/api")
					if err != nil {
						t.Error(err)
						return
					}
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("status %d", resp.StatusCode)
					}
				}
			})
		}
		wg.Wait()
		took, throttled = time.Since(start), target.throttled
	})
	best = time.Duration(float64(requests-int(burst)-1) / float64(rate) * float64(time.Second))
	return took, throttled, best
}

// TestEmulatedNginx is TestNginxSmooth and TestNginxSlowStart on the fake
// clock, against limitReq.
func TestEmulatedNginx(t *testing.T) {
	fifty := sluice.Limit{Name: "nginx", Quota: nginxRate, Window: time.Second}
	clumping := fifty
	clumping.Burst = 2 * nginxBurst
	t.Run("50/s, no burst", func(t *testing.T) {
		took, throttled, best := emulatedRun(t, pace.Options{Limits: []sluice.Limit{fifty}}, nginxRate, nginxBurst, 600, nginxWorkers)
		t.Logf("600 requests in %v (best possible %v), %d × 429", took, best, throttled)
		if throttled != 0 || float64(600)/took.Seconds() < 0.97*nginxRate {
			t.Errorf("%d × 429 and %.1f per second, want 0 and ≥ 97 %% of %d", throttled, 600/took.Seconds(), nginxRate)
		}
	})
	t.Run("50/s, burst 10, the negative control", func(t *testing.T) {
		_, throttled, _ := emulatedRun(t, pace.Options{Limits: []sluice.Limit{clumping}}, nginxRate, nginxBurst, 600, nginxWorkers)
		t.Logf("%d × 429", throttled)
		if throttled == 0 {
			t.Error("0 × 429: releasing 10 at once should draw some from a burst of 5")
		}
	})
	t.Run("no limit configured", func(t *testing.T) {
		took, throttled, best := emulatedRun(t, pace.Options{}, nginxRate, nginxBurst, 1500, nginxWorkers)
		t.Logf("1500 requests in %v (best possible %v: %.1f %%), %d × 429", took, best, 100*best.Seconds()/took.Seconds(), throttled)
		if float64(best)/float64(took) < 0.95 {
			t.Errorf("took %v, want ≤ %v (95 %% of the best possible)", took, time.Duration(float64(best)/0.95))
		}
	})
}

// TestEmulatedSlowStartSweep runs the slow start against limitReq of other
// rates and bursts, each for about 30 s of the fake clock: a Pacer told
// nothing must reach 85 % of the best possible time whatever the limit (the
// opening blast and the collapse after it gave 74–99 % before the slow
// start, 84 % on average).
func TestEmulatedSlowStartSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("21 runs of 30 simulated seconds")
	}
	var table strings.Builder
	for _, rate := range []int64{10, 20, 35, 50, 70, 100, 200} {
		for _, burst := range []int64{0, 5, 20} {
			requests := int(rate*30 + burst + 1)
			took, throttled, best := emulatedRun(t, pace.Options{}, rate, burst, requests, nginxWorkers)
			share := best.Seconds() / took.Seconds()
			fmt.Fprintf(&table, "\n%3d/s burst %2d: %5d requests in %-8v %5.1f %% of the best possible, %2d × 429", rate, burst, requests, took.Round(time.Millisecond), 100*share, throttled)
			if share < 0.85 {
				t.Errorf("%d/s, burst %d: %.1f %% of the best possible time, want ≥ 85 %%", rate, burst, 100*share)
			}
		}
	}
	t.Log(table.String())
}
