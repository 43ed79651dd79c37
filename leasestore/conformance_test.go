package leasestore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/leasestore"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redislease"
	"github.com/sluicehq/sluice/redisstore"
)

// redisCoordinator returns a redislease Coordinator on the environment's
// Redis, under a prefix of its own.
func redisCoordinator(t testing.TB) *redislease.Coordinator {
	t.Helper()
	addr := redistest.Addr(t)
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	c, err := redislease.New(redislease.Options{Client: conn, Prefix: "leasestore-test-" + hex.EncodeToString(b[:]) + ":"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// storeOn returns a NewLimiter of Stores on c leasing limits, with Next a
// memory store on the suite's clock.
func storeOn(c *redislease.Coordinator, limits []leasestore.Leased) limittest.NewLimiter {
	return func(t *testing.T, now func() time.Time) sluice.Limiter {
		next, err := memstore.New(memstore.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		s, err := leasestore.New(leasestore.Options{Coordinator: c, Next: next, Limits: limits, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.Close()
			next.Close()
		})
		return s
	}
}

// The limits a leasestore does not lease pass the whole suite through
// Next: leasing a limit changes nothing for the others.
func TestConformanceNotLeased(t *testing.T) {
	t.Parallel()
	c := redisCoordinator(t)
	limittest.Run(t, storeOn(c, []leasestore.Leased{{Name: "hot"}, {Name: "global-50k"}}))
}

// leasedNames are the names of the token_bucket and gcra limits the
// conformance suite uses, all leased (in one partition, so that the
// suite's small quotas can be cut) for TestConformanceLeased.
func leasedNames() []leasestore.Leased {
	names := []string{"seed", "keys", "xtime", "per-ip", "per-user", "back", "api", "other", "race", "good",
		"debt", "floor", "charge-bad", "refused-huge", "inspect-token_bucket", "inspect-gcra"}
	for i := range 100 {
		names = append(names, "pure-"+strconv.Itoa(i))
	}
	var out []leasestore.Leased
	for _, n := range names {
		out = append(out, leasestore.Leased{Name: n, Partitions: 1})
	}
	return out
}

// leasedFailures are the conformance tests that fail when every limit
// they use is leased, and why (docs/leasestore.md has the same list).
// TestConformanceLeased runs the suite in a child process and checks that
// exactly these fail.
var leasedFailures = map[string]string{
	// A key's first request finds no partition (its Holder's first
	// rounds are under way) and, once acquired, the partitions of a new
	// group are quarantined TTL + drift and start empty: every table
	// that expects a fresh key to admit at once fails at its first step.
	"Timelines/seed/token_bucket_B5_r2":            "first request: no partition yet",
	"Timelines/seed/token_bucket_B8_r1":            "first request: no partition yet",
	"Timelines/seed/idle_never_refills_past_burst": "first request: no partition yet",
	"Timelines/seed/fractional_cost":               "first request: no partition yet",
	"Timelines/seed/gcra_B5_r2":                    "first request: no partition yet",
	"Timelines/keys_are_independent":               "first request: no partition yet",
	"XTimeRateTables/NewLimiter(10,1)":             "first request: no partition yet",
	"XTimeRateTables/NewLimiter(10,3)":             "first request: no partition yet",
	"XTimeRateDifferential":                        "first request: no partition yet",
	"AllowAll/AllOrNothing":                        "first request: no partition yet",
	"AllowAll/RejectionsCount":                     "first request: no partition yet",
	"AllowAll/RetryAfterIsTheLongest":              "first request: no partition yet",
	"AllowAll/CombinedAllowedIsTheLeastRemaining":  "first request: no partition yet",
	"AllowAll/ConcurrencyIsHeldOnlyWhenAllowed":    "first request: no partition yet",
	"ClockBackwards/token_bucket":                  "first request: no partition yet",
	"ClockBackwards/gcra":                          "first request: no partition yet",
	"ParameterChange":                              "first request: no partition yet",
	"Identities":                                   "first request: no partition yet",
	"LastTokenRace/token_bucket":                   "no partition on a frozen clock: 0 admitted, not 100",
	"LastTokenRace/gcra":                           "no partition on a frozen clock: 0 admitted, not 100",
	"BadInput":                                     "after the bad calls, the key's first request finds no partition",
	"Inspect":                                      "a leased limit cannot be peeked or reset (ErrLeased)",
	"Charge/Timelines/TokenBucketDebt":             "first request: no partition yet (its charge would be refused too)",
	"Charge/Timelines/GCRADebt":                    "first request: no partition yet (its charge would be refused too)",
	"Charge/Timelines/DebtFloor":                   "a leased limit cannot be charged (ErrLeased)",
	"Charge/BadInput":                              "a leased limit cannot be charged (ErrLeased)",
	// A part of an AllOrNothing call not tried, because another part
	// can never fit, reports Remaining 0, not what is left.
	"AllowAll/NeverFittingPart": "a part not tried reports Remaining 0",
	// A leased name is a token bucket's: the same name under another
	// algorithm is refused (ErrInvalidLimit).
	"Timelines/seed/fixed_window_boundary": "the leased name under fixed_window is refused",
	"Timelines/seed/sliding_log_boundary":  "the leased name under sliding_log is refused",
	"Charge/Timelines/FixedWindowDebt":     "the leased name under fixed_window is refused",
	"Charge/Timelines/SlidingWindowDebt":   "the leased name under sliding_window is refused",
	"ClockBackwards/fixed_window":          "the leased name under fixed_window is refused",
	"ClockBackwards/sliding_log":           "the leased name under sliding_log is refused",
	"ClockBackwards/sliding_window":        "the leased name under sliding_window is refused",
	"ClockBackwards/leaky_bucket":          "the leased name under leaky_bucket is refused",
	"LastTokenRace/fixed_window":           "the leased name under fixed_window is refused",
	"LastTokenRace/sliding_log":            "the leased name under sliding_log is refused",
	"LastTokenRace/sliding_window":         "the leased name under sliding_window is refused",
	"LastTokenRace/leaky_bucket":           "the leased name under leaky_bucket is refused",
	"LastTokenRace/concurrency":            "the leased name under concurrency is refused",
	"MatchesPureAlgorithms/token_bucket":   "first request: no partition yet",
	"MatchesPureAlgorithms/gcra":           "first request: no partition yet",
	"MatchesPureAlgorithms/fixed_window":   "the leased name under fixed_window is refused",
	"MatchesPureAlgorithms/sliding_log":    "the leased name under sliding_log is refused",
	"MatchesPureAlgorithms/sliding_window": "the leased name under sliding_window is refused",
	"MatchesPureAlgorithms/leaky_bucket":   "the leased name under leaky_bucket is refused",
	"MatchesPureAlgorithms/concurrency":    "the leased name under concurrency is refused",
}

const childEnv = "LEASESTORE_CONFORMANCE_CHILD"

// The conformance suite with every token_bucket and gcra limit it uses
// leased, on redislease and the environment's Redis: the suite runs in a
// child process (its failures are expected), and exactly the tests of
// leasedFailures must fail — a leased limit that starts passing one, or
// fails another, is a change of semantics to document.
func TestConformanceLeased(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		limittest.Run(t, storeOn(redisCoordinator(t), leasedNames()))
		return
	}
	t.Parallel()
	redistest.Addr(t) // skip (loudly) or fail here, not in the child
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestConformanceLeased$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, _ := cmd.CombinedOutput() // it fails: what matters is which tests
	failed := map[string]bool{}
	passed := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	const prefix = "TestConformanceLeased/"
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for verdict, set := range map[string]bool{"--- FAIL: ": true, "--- PASS: ": false} {
			if rest, ok := strings.CutPrefix(line, verdict+prefix); ok {
				name, _, _ := strings.Cut(rest, " (")
				if set {
					failed[name] = true
				} else {
					passed++
				}
			}
		}
	}
	if passed == 0 {
		t.Fatalf("the child ran no test:\n%s", out)
	}
	// Keep the leaves: a test fails when one of its subtests does.
	var got []string
	for name := range failed {
		leaf := true
		for other := range failed {
			if strings.HasPrefix(other, name+"/") {
				leaf = false
			}
		}
		if leaf {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	for _, name := range got {
		if _, ok := leasedFailures[name]; !ok {
			t.Errorf("%s fails on leases, and leasedFailures does not say why", name)
		}
	}
	for name := range leasedFailures {
		if !failed[name] {
			t.Errorf("%s passes on leases (or did not run): remove it from leasedFailures and docs/leasestore.md", name)
		}
	}
	if t.Failed() {
		t.Logf("failing on leases (%d, %d passing):\n%s", len(got), passed, strings.Join(got, "\n"))
	}
}
