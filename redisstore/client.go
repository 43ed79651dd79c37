package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"
)

// Client is what the store needs of a Redis client: running its script,
// and knowing whether keys are spread over a Cluster. NewRueidis adapts a
// rueidis client (the default); package redisstore/goredis adapts a go-redis
// one. A Client must never retry a call on its own: a script call whose
// outcome is unknown may have spent tokens, and replaying it would spend
// them twice.
type Client interface {
	// EvalSHA runs the script loaded under sha and returns its integer
	// array reply. An error reply is a *ReplyError; a script Redis does not
	// know is a *ReplyError whose NoScript reports true.
	EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error)
	// Eval runs the script, which Redis also keeps under its SHA1.
	Eval(ctx context.Context, script string, keys, args []string) ([]int64, error)
	// Cluster reports whether the client talks to a Redis Cluster, where a
	// script's keys must share a hash slot.
	Cluster() bool
}

// ReplyError is an error reply from Redis (as opposed to a failure to reach
// it): the script failed, a key held something else, or the server said it
// cannot serve now (LOADING, CLUSTERDOWN, …; see Unavailable).
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return "redis: " + e.Msg }

// NoScript reports a NOSCRIPT reply: Redis does not know the script's SHA1.
func (e *ReplyError) NoScript() bool { return strings.HasPrefix(e.Msg, "NOSCRIPT") }

// Unavailable reports a reply that means "not now" rather than "wrong": the
// server is loading, failing over, its cluster is down, it is out of
// memory or cannot persist. The store treats these as outages.
func (e *ReplyError) Unavailable() bool {
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "BUSY", "OOM", "MISCONF"} {
		if strings.HasPrefix(e.Msg, p) {
			return true
		}
	}
	return false
}

// rueidisClient adapts a rueidis.Client.
type rueidisClient struct{ c rueidis.Client }

// NewRueidis adapts a rueidis client, single node or Cluster. rueidis
// pipelines concurrent calls on one connection automatically, which is
// what makes the store fast under load. The store does not close it.
func NewRueidis(c rueidis.Client) Client { return rueidisClient{c} }

func (r rueidisClient) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return rueidisReply(r.c.Do(ctx, r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()))
}

func (r rueidisClient) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return rueidisReply(r.c.Do(ctx, r.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()))
}

func (r rueidisClient) Cluster() bool { return r.c.Mode() == rueidis.ClientModeCluster }

func rueidisReply(res rueidis.RedisResult) ([]int64, error) {
	if err := res.Error(); err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok {
			return nil, &ReplyError{Msg: re.Error()}
		}
		return nil, err
	}
	v, err := res.AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadReply, err)
	}
	return v, nil
}

// ErrBadReply is a reply the script never sends: an integer array of the
// wrong shape, or something else than an integer array. It is an error,
// never an allow; Clients wrap it for replies of the wrong type.
var ErrBadReply = errors.New("redisstore: unexpected reply from Redis")
