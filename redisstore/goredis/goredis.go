// Package goredis adapts a go-redis v9 client for redisstore, for programs
// that already hold one:
//
//	client := redis.NewClient(&redis.Options{Addr: addr})
//	store, err := redisstore.New(redisstore.Options{Client: goredis.New(client)})
//
// The client's retries stay on for the program's other commands; the
// store's script calls are never retried (a call whose reply was lost may
// have spent, and replaying it would spend twice).
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
// other UniversalClient. Script calls go out marked NoRetry, whatever the
// client's MaxRetries.
func New(c redis.UniversalClient) redisstore.Client {
	_, cluster := c.(*redis.ClusterClient)
	return client{c: c, cluster: cluster}
}

// noRetry is a command go-redis must not replay after a failure.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

func (a client) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return a.run(ctx, "evalsha", sha, keys, args)
}

func (a client) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return a.run(ctx, "eval", script, keys, args)
}

func (a client) run(ctx context.Context, name, payload string, keys, args []string) ([]int64, error) {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, payload, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	for _, v := range args {
		cmdArgs = append(cmdArgs, v)
	}
	cmd := redis.NewCmd(ctx, cmdArgs...)
	cmd.SetFirstKeyPos(3)
	_ = a.c.Process(ctx, noRetry{cmd}) // the error is the command's
	return reply(cmd)
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
