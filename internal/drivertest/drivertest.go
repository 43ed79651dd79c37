// Package drivertest is the contract of a redisscript.Client — a Redis
// driver — which the tests of every driver run: redisstore's (rueidis) and
// redisstore/goredis's. It checks, against a real Redis, what the store
// relies on and a driver could get wrong: keys and arguments reach the
// script in order, an integer array comes back exact, EVALSHA finds a
// script EVAL loaded, and each kind of failure is told apart — NOSCRIPT
// and the other error replies (*redisscript.ReplyError), a reply of
// another shape (redisscript.ErrBadReply), and the caller's context. The
// store's decisions themselves are limittest's.
package drivertest

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/redisscript"
)

// keys share a hash slot, so that the calls work on a Cluster too.
var keys = []string{"{sluice-drivertest}:a", "{sluice-drivertest}:b"}

// Run checks client, which talks to a Redis Cluster when cluster is true
// and to a single node otherwise. Its subtests run in parallel.
func Run(t *testing.T, client redisscript.Client, cluster bool) {
	ctx := context.Background()
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		if got := client.Cluster(); got != cluster {
			t.Fatalf("Cluster() = %v, want %v", got, cluster)
		}
	})
	t.Run("KeysArgsAndReplyInOrder", func(t *testing.T) {
		t.Parallel()
		// A script of its own, so that its first EVALSHA finds it only
		// if the EVAL before loaded it.
		script := `return {#KEYS, tonumber(ARGV[1]) * 2, tonumber(ARGV[2]), tonumber(ARGV[3]), #ARGV} -- ` + rand.Text()
		args := []string{"21", "-7", "9007199254740991"}
		want := []int64{2, 42, -7, 1<<53 - 1, 3}
		got, err := client.Eval(ctx, script, keys, args)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Eval = %v, %v; want %v", got, err, want)
		}
		got, err = client.EvalSHA(ctx, sha(script), keys, args)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("EvalSHA of the script Eval ran = %v, %v; want %v", got, err, want)
		}
	})
	t.Run("NoScript", func(t *testing.T) {
		t.Parallel()
		_, err := client.EvalSHA(ctx, sha("return {1} -- never loaded "+rand.Text()), keys, nil)
		var re *redisscript.ReplyError
		if !errors.As(err, &re) || !re.NoScript() || re.Unavailable() {
			t.Fatalf("EvalSHA of an unknown SHA1: %v; want a *redisscript.ReplyError that is NoScript", err)
		}
	})
	t.Run("ErrorReplies", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			script      string
			unavailable bool
		}{
			{`return redis.error_reply("LOADING Redis is loading the dataset in memory")`, true},
			{`return redis.error_reply("CLUSTERDOWN The cluster is down")`, true},
			{`return redis.error_reply("sluice: script protocol 3, client protocol 0")`, false},
			{`error("a runtime error in the script")`, false},
		} {
			_, err := client.Eval(ctx, c.script, keys, nil)
			var re *redisscript.ReplyError
			if !errors.As(err, &re) || re.NoScript() || re.Unavailable() != c.unavailable || errors.Is(err, redisscript.ErrBadReply) {
				t.Errorf("%s: %v; want a *redisscript.ReplyError, Unavailable %v", c.script, err, c.unavailable)
			}
		}
	})
	t.Run("RepliesOfAnotherShape", func(t *testing.T) {
		t.Parallel()
		for _, script := range []string{`return "text"`, `return 7`, `return {1, "x"}`} {
			_, err := client.Eval(ctx, script, keys, nil)
			var re *redisscript.ReplyError
			if !errors.Is(err, redisscript.ErrBadReply) || errors.As(err, &re) {
				t.Errorf("%s: %v; want redisscript.ErrBadReply, not a reply error", script, err)
			}
		}
	})
	// Not in parallel with the others: a call whose context is already
	// cancelled may be the one that makes a rueidis client dial a pipe it
	// opens lazily, and every call waiting for that pipe then gets the
	// dial's error (redisstore.Dial's Conn dials without the caller's
	// context; a rueidis client of the program's own may not).
	t.Run("CallerContext", func(t *testing.T) {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := client.Eval(cancelled, `return {1}`, keys, nil)
		var re *redisscript.ReplyError
		if !errors.Is(err, context.Canceled) || errors.As(err, &re) || errors.Is(err, redisscript.ErrBadReply) {
			t.Fatalf("Eval with a cancelled context: %v; want context.Canceled", err)
		}
	})
}

func sha(script string) string {
	sum := sha1.Sum([]byte(script))
	return hex.EncodeToString(sum[:])
}
