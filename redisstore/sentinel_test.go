package redisstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisstore"
)

const sentinelPassword = "the-sentinels-own-password-5e2"

// sentinelFailoverBound is the longest docs/stores.md says decisions take
// to reach the new master once the Sentinels have named it: rueidis
// follows +switch-master at once, and asks the Sentinels every
// SentinelRefresh (2 s) besides.
const sentinelFailoverBound = 5 * time.Second

func sentinelOptions(s *redistest.Sentinels) redisstore.DialOptions {
	return redisstore.DialOptions{Password: defaultPassword, Sentinel: redisstore.Sentinel{
		MasterName: s.Name(), Addrs: s.Addrs(), Password: sentinelPassword,
	}}
}

// The conformance suite, unchanged, through Sentinel: a master and a
// replica, with passwords on Redis and on the Sentinels.
func TestConformanceSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel setup")
	}
	t.Parallel()
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: defaultPassword, SentinelPassword: sentinelPassword})
	conn := dialed(t, sentinelOptions(s))
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		return newStore(t, conformanceOptions(conn, now))
	})
}

// Decisions follow a failover: once the Sentinels name the new master, a
// decision lands there within sentinelFailoverBound (the time is
// logged); meanwhile each decision is Redis's or the failure policy's,
// never an error.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel setup")
	}
	t.Parallel()
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Sentinels: 3, Password: defaultPassword, SentinelPassword: sentinelPassword})
	conn := dialed(t, sentinelOptions(s))
	store := newStore(t, redisstore.Options{Client: conn, Policy: sluice.FailClosed, Timeout: 500 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond})
	limit := sluice.Limit{Name: "failover", Quota: 1, Window: time.Hour}
	prefix := fmt.Sprintf("failover-%d-", time.Now().UnixNano())
	// A fresh key under a quota of 1 is allowed by Redis, and refused by
	// fail_closed: an allowed decision is Redis's.
	if d, err := store.Allow(ctx, prefix+"before", limit, 1); err != nil || !d.Allowed {
		t.Fatalf("before the failover: %+v, %v", d, err)
	}
	old := s.MasterAddr()
	master := s.Failover()
	named := time.Now()
	if master == old {
		t.Fatal("the failover kept the master")
	}
	for i := 0; ; i++ {
		key := fmt.Sprintf("%safter-%d", prefix, i)
		d, err := store.Allow(ctx, key, limit, 1)
		if err != nil {
			t.Fatalf("during the failover: %v; want Redis's decision or the policy's", err)
		}
		if d.Allowed {
			out, err := s.Server(master).CLI("--no-auth-warning", "-a", defaultPassword, "--scan", "--pattern", "*"+key+"*")
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(out) != "" {
				t.Logf("decisions reached the new master %s %v after the Sentinels named it (%d decisions)", master, time.Since(named).Round(time.Millisecond), i+1)
				break
			}
		}
		if time.Since(named) > sentinelFailoverBound {
			t.Fatalf("no decision on the new master %s %v after the Sentinels named it", master, sentinelFailoverBound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Sentinel setup Dial is wrong about: the Sentinels' password, the
// master's name, Redis's password; each refused at once.
func TestSentinelRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel setup")
	}
	t.Parallel()
	s := redistest.StartSentinels(t, redistest.SentinelOptions{Password: defaultPassword, SentinelPassword: sentinelPassword})
	wrongSentinel := sentinelOptions(s)
	wrongSentinel.Sentinel.Password = wrongPassword
	refused(t, wrongSentinel, "AUTH as \"default\" at "+s.Addrs()[0], "WRONGPASS")
	noSentinelPassword := sentinelOptions(s)
	noSentinelPassword.Sentinel.Password = ""
	refused(t, noSentinelPassword, "asks for a password")
	unknown := sentinelOptions(s)
	unknown.Sentinel.MasterName = "elsewhere"
	refused(t, unknown, `no Sentinel at `+s.Addrs()[0]+` knows a master named "elsewhere"`)
	wrongRedis := sentinelOptions(s)
	wrongRedis.Password = wrongPassword
	refused(t, wrongRedis, "AUTH as \"default\" at "+s.MasterAddr(), "WRONGPASS")
}
