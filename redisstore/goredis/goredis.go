// Package goredis adapts a go-redis v9 client for redisstore, for programs
// that already hold one:
//
//	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
//	rc, err := goredis.New(client)
//	store, err := redisstore.New(redisstore.Options{Client: rc})
package goredis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redisstore"
)

type client struct {
	c       redis.UniversalClient
	cluster bool
}

// New adapts c: a *redis.Client, *redis.ClusterClient, *redis.Ring or any
// other UniversalClient. It refuses a client of those three types that
// retries commands (go-redis's default, MaxRetries 3): a decision replayed
// after a timeout may spend twice. Configure MaxRetries: -1.
func New(c redis.UniversalClient) (redisstore.Client, error) {
	retries := 0
	cluster := false
	switch c := c.(type) {
	case *redis.Client:
		retries = c.Options().MaxRetries
	case *redis.ClusterClient:
		retries, cluster = c.Options().MaxRetries, true
	case *redis.Ring:
		retries = c.Options().MaxRetries
	}
	if retries > 0 {
		return nil, fmt.Errorf("goredis: the client retries failed commands (MaxRetries %d): a retried decision can spend twice; set MaxRetries: -1", retries)
	}
	return client{c: c, cluster: cluster}, nil
}

func (a client) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return reply(a.c.EvalSha(ctx, sha, keys, anys(args)...))
}

func (a client) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return reply(a.c.Eval(ctx, script, keys, anys(args)...))
}

func (a client) Cluster() bool { return a.cluster }

func reply(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			return nil, &redisstore.ReplyError{Msg: re.Error()}
		}
		if cmd.Err() == nil { // a reply of another shape
			return nil, fmt.Errorf("goredis: %w", redisstore.ErrBadReply)
		}
		return nil, err
	}
	return v, nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
