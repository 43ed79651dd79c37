package redisscript_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/redisscript"
	"github.com/sluicehq/sluice/redisstore"
)

// interleaving is a Client that plays a Cluster on one node (so that a
// call across hash slots is split and compensated) and, just before the
// first undo reaches Redis, runs before: another caller's decision
// landing between a spend and its undo. With naive set, the undo runs
// the script without its guard (every spend given back), the negative
// control.
type interleaving struct {
	redisscript.Client
	before func()
	naive  func(src string) string
	once   sync.Once
}

func (c *interleaving) Cluster() bool { return true }

func (c *interleaving) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if args[2] != redisscript.OpUndo {
		return c.Client.EvalSHA(ctx, sha, keys, args)
	}
	c.once.Do(c.before)
	if c.naive != nil {
		for alg := sluice.TokenBucket; alg <= sluice.Concurrency; alg++ {
			if src, algSHA := redisscript.ScriptOf(alg); algSHA == sha {
				return c.Client.Eval(ctx, c.naive(src), keys, args)
			}
		}
	}
	return c.Client.EvalSHA(ctx, sha, keys, args)
}

// An undo never gives back more than the limit allows: when another call
// wrote the state between a spend and its undo — refilling a bucket to its
// cap, counting in the next window, or writing a new state after the key
// expired — the spend is left spent (the call under-admits, as documented)
// rather than given back into a state that no longer holds it. The naive
// undo (the same script without its guard) admits one call too many in
// every case.
func TestUndoAfterAnotherWrite(t *testing.T) {
	t.Parallel()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Addr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	// The guard of each fragment, and the naive variant without it.
	guards := map[sluice.Algorithm]string{
		sluice.TokenBucket: "if stamp ~= 0 and s[3] == stamp then",
		sluice.GCRA:        "if stamp ~= 0 and s[3] == stamp then",
		sluice.LeakyBucket: "if stamp ~= 0 and s[3] == stamp then",
		sluice.FixedWindow: "if sfdiv(uat, window) * window == s[1] then",
	}
	for alg, guard := range guards {
		for _, c := range []struct {
			between string // "": nobody; "refilled"; "expired"
			naive   bool
			want    int // calls allowed at once after the undo
		}{
			{"", false, 2}, // the spend given back: the whole capacity
			{"refilled", false, 1},
			{"expired", false, 1},
			{"refilled", true, 2}, // the control over-admits
			{"expired", true, 2},
		} {
			t.Run(fmt.Sprintf("%v/between=%s/naive=%v", alg, c.between, c.naive), func(t *testing.T) {
				t.Parallel()
				if src, _ := redisscript.ScriptOf(alg); !strings.Contains(src, guard) {
					t.Fatalf("the %v undo has no guard %q", alg, guard)
				}
				clock := limittest.NewClock(time.Now().Truncate(time.Hour))
				client := &interleaving{Client: redisstore.NewRueidis(rc)}
				if c.naive {
					client.naive = func(src string) string { return strings.Replace(src, guard, "if true then", 1) }
				}
				s, err := redisscript.New(redisscript.Options{Client: client, TestNow: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				key := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
				// Capacity 2, all of it back within a second.
				limit := sluice.Limit{Name: "undo", Algorithm: alg, Quota: 2, Window: time.Second}
				blocker := sluice.Limit{Name: "blocker", Quota: 1, Window: time.Hour}
				ctx := context.Background()
				if d, err := s.Allow(ctx, key+"/b", blocker, 1); err != nil || !d.Allowed {
					t.Fatalf("blocker: %+v, %v", d, err)
				}
				client.before = func() {
					if c.between == "" {
						return
					}
					// Ten seconds later, another caller spends one: the state
					// is full again (or gone, expired, and written anew), then
					// holds that one.
					clock.Add(10 * time.Second)
					if c.between == "expired" {
						stateKey, _ := stateKeyOf(t, s, limit, key)
						if err := rc.Do(ctx, rc.B().Del().Key(stateKey).Build()).Error(); err != nil {
							t.Error(err)
						}
					}
					if d, err := s.Allow(ctx, key, limit, 1); err != nil || !d.Allowed || d.Remaining != 1 {
						t.Errorf("the caller in between: %+v, %v", d, err)
					}
				}
				reqs := []sluice.Request{{Key: key, Limit: limit, Cost: 1}, {Key: key + "/b", Limit: blocker, Cost: 1}}
				if _, slot := stateKeyOf(t, s, limit, key); slot == slotOf(t, s, blocker, key+"/b") {
					t.Fatal("the two keys share a hash slot: no compensation to test")
				}
				if d, err := s.AllowAll(ctx, reqs, sluice.AllOrNothing, nil); err != nil || d.Allowed {
					t.Fatalf("AllowAll: %+v, %v; want rejected by the blocker", d, err)
				}
				if s.Stats().Compensations == 0 {
					t.Fatal("nothing undone")
				}
				// At this instant, of a capacity of 2: both when the undo gave
				// the spend back; one when a caller in between spent the other.
				allowed := 0
				for range 3 {
					if d, _ := s.Allow(ctx, key, limit, 1); d.Allowed {
						allowed++
					}
				}
				if allowed != c.want {
					t.Fatalf("%d allowed after the undo; want %d", allowed, c.want)
				}
			})
		}
	}
}

// stateKeyOf and slotOf locate a limit's states, for the test's check that
// its keys fall in different slots.
func stateKeyOf(t *testing.T, s *redisscript.Store, l sluice.Limit, key string) (string, uint16) {
	t.Helper()
	k, slot, err := s.StateKey(l, key)
	if err != nil {
		t.Fatal(err)
	}
	return k, slot
}

func slotOf(t *testing.T, s *redisscript.Store, l sluice.Limit, key string) uint16 {
	t.Helper()
	_, slot := stateKeyOf(t, s, l, key)
	return slot
}
