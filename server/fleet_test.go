package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// The fleet's figures: L = 400/s and B = 40, a global limit on leases.
const (
	fleetL, fleetB = 400.0, 40.0
)

// startFleet starts a sluice serve per Redis address (member a, b, c…),
// each leasing the global limit as leases says, and returns their HTTP
// addresses.
func startFleet(t *testing.T, redisAddrs []string, leases string) []string {
	t.Helper()
	dir := writeFiles(t, map[string]string{"edge.yaml": fmt.Sprintf(`domain: edge
descriptors:
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: %v, algorithm: token_bucket, burst: %v}
`, fleetL, fleetB)})
	parsed, err := server.ParseLeases("leases.yaml", []byte(leases))
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for i, redis := range redisAddrs {
		l := *parsed
		l.Member = string(rune('a' + i))
		s, err := server.New(server.Options{Load: server.EnvoyLoader(dir), Redis: &redisconfig.Connection{Addrs: []string{redis}}, RedisTimeout: redisTimeout(),
			Leases: &l, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, nil) }()
		t.Cleanup(func() { cancel(); <-done })
		addrs = append(addrs, s.HTTPAddr())
	}
	return addrs
}

// drive offers each instance its rate of global requests (cost 1) until
// end and returns the instants of the admitted ones, by instance.
func drive(t *testing.T, addrs []string, rates []float64, end time.Time) [][]time.Time {
	t.Helper()
	out := make([][]time.Time, len(addrs))
	var wg sync.WaitGroup
	for i := range addrs {
		wg.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			const tick = 5 * time.Millisecond
			owed := 0.0
			for now := time.Now(); now.Before(end); now = time.Now() {
				owed += rates[i] * tick.Seconds()
				for ; owed >= 1; owed-- {
					resp, err := client.Post("http://"+addrs[i]+"/json", "application/json", strings.NewReader(globalReq))
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						out[i] = append(out[i], time.Now())
					}
				}
				time.Sleep(time.Until(now.Add(tick)))
			}
		})
	}
	wg.Wait()
	return out
}

// mostInAWindow is the most instants of all in any span [t, t+w).
func mostInAWindow(byInstance [][]time.Time, w time.Duration) int {
	var all []time.Time
	for _, ts := range byInstance {
		all = append(all, ts...)
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range all {
		for all[i].Sub(all[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// countIn counts the instants in [from, to).
func countIn(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, x := range ts {
		if !x.Before(from) && x.Before(to) {
			n++
		}
	}
	return n
}

func skipTimed(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("timed, over 10 s; not with -short")
	}
	if raceEnabled {
		t.Skip("timed: the race detector's slowdown breaks the pacing (run without -race: make test's timed step)")
	}
	// Not parallel: the figures want the machine's CPUs to themselves.
}

// Three instances on one Redis share the global limit on leases, cut
// into 32 partitions, under uneven load: 80 %, 15 % and 5 % of twice L.
// What they admit together in any 1 s window stays within L + B, and
// once the partitions have followed the demand (a few rounds) they admit
// at least 90 % of L.
func TestFleetLeasedGlobal(t *testing.T) {
	skipTimed(t)
	const warmUp, measured = 4 * time.Second, 8 * time.Second
	redis := redistest.StartServer(t)
	addrs := startFleet(t, []string{redis.Addr(), redis.Addr(), redis.Addr()}, "limits:\n  - name: edge.generic_key_global\n    partitions: 32\n    ttl: 1s\n")
	start := time.Now()
	got := drive(t, addrs, []float64{0.8 * 2 * fleetL, 0.15 * 2 * fleetL, 0.05 * 2 * fleetL}, start.Add(warmUp+measured))
	var after []int
	total := 0
	for _, ts := range got {
		n := countIn(ts, start.Add(warmUp), start.Add(warmUp+measured))
		after, total = append(after, n), total+n
	}
	most := mostInAWindow(got, time.Second)
	utilization := float64(total) / (fleetL * measured.Seconds())
	t.Logf("admitted %d in %v after the warm-up (%.1f %% of L; by instance %v); at most %d in any 1 s window (bound %v)",
		total, measured, 100*utilization, after, most, fleetL+fleetB)
	if most > int(fleetL+fleetB) {
		t.Errorf("%d admitted in a 1 s window: more than L + B = %v", most, fleetL+fleetB)
	}
	if utilization < 0.9 {
		t.Errorf("utilization %.1f %% of L after the warm-up; want at least 90 %%", 100*utilization)
	}
}

// One of three instances is cut from Redis (a regional partition) with
// the limit fail_local and an outage share of 10 %: it spends what it
// holds until its leases' local deadline, then only its share of the
// 10 % kept out of the leases, L × 0.1 / 3 per second (the member count it
// last saw), while the two others take its partitions over after their
// quarantine. In any 1 s window the fleet stays within L + B.
func TestFleetLeasedRegionalCut(t *testing.T) {
	skipTimed(t)
	const (
		warmUp = 4 * time.Second
		cutFor = 6 * time.Second
		ttl    = time.Second
		share  = 0.1
	)
	redis := redistest.StartServer(t)
	var proxies []*redistest.Proxy
	var via []string
	for range 3 {
		p := redistest.StartProxy(t, redis.Addr())
		proxies, via = append(proxies, p), append(via, p.Addr())
	}
	addrs := startFleet(t, via, fmt.Sprintf("limits:\n  - name: edge.generic_key_global\n    partitions: 32\n    ttl: %v\n    on_failure: fail_local\n    outage_share: %v\n", ttl, share))
	start := time.Now()
	cutAt := start.Add(warmUp)
	go func() {
		time.Sleep(time.Until(cutAt))
		proxies[2].Blackhole(true)
		time.Sleep(cutFor)
		proxies[2].Blackhole(false)
	}()
	each := 2 * fleetL / 3
	got := drive(t, addrs, []float64{each, each, each}, cutAt.Add(cutFor+2*time.Second))
	most := mostInAWindow(got, time.Second)
	// From a TTL after the cut (its last renew was sent before it), the
	// cut instance decides alone: its share and its share's burst.
	from := cutAt.Add(ttl + 100*time.Millisecond)
	alone := cutFor - ttl - 100*time.Millisecond
	c := countIn(got[2], from, from.Add(alone))
	localRate := fleetL * share / 3
	cBound := int(localRate*alone.Seconds() + fleetB*share/3 + 1)
	t.Logf("cut instance: %d admitted in the %v it decided alone (its share: %.1f/s, bound %d); the fleet: at most %d in any 1 s window (bound %v)",
		c, alone.Round(time.Millisecond), localRate, cBound, most, fleetL+fleetB)
	if most > int(fleetL+fleetB) {
		t.Errorf("%d admitted in a 1 s window: more than L + B = %v", most, fleetL+fleetB)
	}
	if c > cBound || c < cBound/2 {
		t.Errorf("the cut instance admitted %d alone in %v; want its share, about %.0f and at most %d", c, alone, localRate*alone.Seconds(), cBound)
	}
	_, body := httpDo(t, "GET", "http://"+addrs[2]+"/metrics", "")
	m := regexp.MustCompile(`sluice_lease_fallback_total\{limit="edge.generic_key_global",policy="fail_local"\} (\d+)`).FindStringSubmatch(body)
	if n, _ := strconv.Atoi(m[1]); m == nil || n == 0 {
		t.Errorf("the cut instance counted no fail_local decision: %v", m)
	}
}
