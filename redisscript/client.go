package redisscript

import (
	"context"
	"errors"
	"strings"
)

// Client is what the store needs of a Redis client, and all a driver
// implements: running its script, and knowing whether keys are spread over
// a Cluster. Package redisstore has the rueidis driver (redisstore.Dial, or
// redisstore.NewRueidis for a client of your own); package
// redisstore/goredis adapts a go-redis v9 client. A Client must never retry
// a call on its own: a script call whose outcome is unknown may have spent
// tokens, and replaying it would spend them twice. It must be safe for
// concurrent use, and honour the context's deadline: the store's
// Options.Timeout reaches it only that way.
type Client interface {
	// EvalSHA runs the script loaded under sha and returns its integer
	// array reply. An error reply is a *ReplyError; a script Redis does not
	// know is a *ReplyError whose NoScript reports true; a reply of another
	// shape wraps ErrBadReply.
	EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error)
	// Eval runs the script, which Redis also keeps under its SHA1. Its
	// replies are EvalSHA's.
	Eval(ctx context.Context, script string, keys, args []string) ([]int64, error)
	// Cluster reports whether the client talks to a Redis Cluster, where a
	// script's keys must share a hash slot.
	Cluster() bool
}

// ConnectionWatcher is a Client that connects by itself, in the
// background (redisstore.Conn), and tells the store how each connection
// attempt went: a Store on it sees Redis unreachable before any call, and
// back as soon as it is, and logs and counts both as it does a call's
// outcome. A Client need not implement it.
type ConnectionWatcher interface {
	Client
	// WatchConnection calls report with each connection attempt's outcome
	// (nil: connected), at once with the last one if there was one, until
	// stop is called. report must not block.
	WatchConnection(report func(err error)) (stop func())
}

// ReplyError is an error reply from Redis (as opposed to a failure to reach
// it): the script failed, a key held something else, or the server said it
// cannot serve now (LOADING, CLUSTERDOWN, …; see Unavailable). A Client
// returns one for every error reply.
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return "redis: " + e.Msg }

// NoScript reports a NOSCRIPT reply: Redis does not know the script's SHA1.
func (e *ReplyError) NoScript() bool { return strings.HasPrefix(e.Msg, "NOSCRIPT") }

// Unavailable reports a reply that means Redis will not serve this call,
// rather than that the call is wrong: the server is loading, failing
// over, its cluster is down, it is out of memory or cannot persist — or it
// refuses this client (WRONGPASS, NOAUTH after a password change, NOPERM
// after an ACL change), which no retry of the call heals either. The
// store treats these as outages: the failure policy decides, the breaker
// counts, Redis is reported unreachable with the reply.
func (e *ReplyError) Unavailable() bool {
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "BUSY", "OOM", "MISCONF", "WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(e.Msg, p) {
			return true
		}
	}
	return false
}

// ErrBadReply is a reply the script never sends: an integer array of the
// wrong shape, or something else than an integer array. It is an error,
// never an allow; Clients wrap it for replies of the wrong type.
var ErrBadReply = errors.New("redisscript: unexpected reply from Redis")
