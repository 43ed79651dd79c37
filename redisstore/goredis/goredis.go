// Package goredis adapts a go-redis v9 client for the Redis store, for
// programs that already hold one. With it the store is package
// redisscript's, and rueidis (package redisstore's client) is not
// compiled:
//
//	client := redis.NewClient(&redis.Options{
//		Addr:                  "redis.internal:6379",
//		Password:              os.Getenv("REDIS_PASSWORD"),
//		TLSConfig:             &tls.Config{MinVersion: tls.VersionTLS12}, // nil: plain TCP
//		ContextTimeoutEnabled: true, // the store's Timeout bounds each call
//	})
//	store, err := redisscript.New(redisscript.Options{Client: goredis.New(client)})
//
// Everything about the connection is go-redis's, set on the client you
// pass. What redisstore.DialOptions (and sluice serve's --redis-* flags,
// the gateway's store.redis) say, a go-redis program says so:
//
//   - an ACL user and its password: Options.Username and Options.Password
//     (read them from a file or the environment, never a literal);
//   - a database: Options.DB (a single node only);
//   - TLS: Options.TLSConfig, with RootCAs from the CA file
//     (x509.CertPool.AppendCertsFromPEM), Certificates for a client
//     certificate (tls.LoadX509KeyPair), ServerName when the certificate
//     does not hold the host dialled, MinVersion tls.VersionTLS12; never
//     InsecureSkipVerify;
//   - Sentinel: redis.NewFailoverClient(&redis.FailoverOptions{MasterName,
//     SentinelAddrs, SentinelUsername, SentinelPassword, Username,
//     Password, DB, TLSConfig}), which follows failovers;
//   - a Cluster: redis.NewClusterClient(&redis.ClusterOptions{Addrs, …});
//   - the connect timeout: Options.DialTimeout (go-redis's default 5 s);
//     the command timeout is the store's Options.Timeout, with
//     ContextTimeoutEnabled (below).
//
// One thing go-redis does not do that redisstore.Dial does: refuse at
// start a configuration Redis refuses (a wrong password, an unknown
// user, a CA that did not sign Redis's certificate), which waiting does not
// heal. Call client.Ping once before serving and stop on an error that
// is not a connection's: redis.HasErrorPrefix(err, "WRONGPASS"),
// "NOAUTH" or "NOPERM", or a *tls.CertificateVerificationError.
// ExampleNew_sentinel shows it.
//
// Set ContextTimeoutEnabled: without it go-redis bounds a call by its own
// ReadTimeout (3 s by default), not by the store's Options.Timeout (50 ms),
// so a Redis that stops answering holds each decision for seconds before
// the failure policy decides.
//
// The client's retries stay on for the program's other commands; the
// store's script calls are never retried (a call whose reply was lost may
// have spent, and replaying it would spend twice). The store does not
// close the client.
package goredis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redisscript"
)

type client struct {
	c       redis.UniversalClient
	cluster bool
}

// New adapts c: a *redis.Client, *redis.ClusterClient, *redis.Ring or any
// other UniversalClient; only a *redis.ClusterClient is a Cluster, whose
// multi-limit calls the store splits by hash slot. Script calls go out
// marked NoRetry, whatever the client's MaxRetries. Safe for concurrent
// use, as c is.
func New(c redis.UniversalClient) redisscript.Client {
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

// reply maps a command's outcome to the Client contract: an error reply
// is a *redisscript.ReplyError, a reply that is not an integer array wraps
// redisscript.ErrBadReply, any other error (the transport, the context) is
// returned as it is.
func reply(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			return nil, &redisscript.ReplyError{Msg: re.Error()}
		}
		if cmd.Err() == nil { // a reply of another shape
			return nil, fmt.Errorf("goredis: %w", redisscript.ErrBadReply)
		}
		return nil, err
	}
	return v, nil
}
