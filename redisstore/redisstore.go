// Package redisstore is the Redis store on rueidis, sluice's default Redis
// client: Dial connects (in the background, so that a limiter can start
// before its Redis) and owns the client, NewRueidis adapts a rueidis
// client of your own, and New makes the Store on either. rueidis
// pipelines concurrent calls on one connection automatically, which is
// what makes the store fast under load.
//
// The store itself — its scripts, failure policies, breaker, deny cache
// and keys — is package redisscript, which imports no Redis client; Store,
// Options, Stats and Client here are its types under their usual names. A
// program on go-redis uses redisscript with redisstore/goredis instead,
// and does not compile rueidis.
package redisstore

import "github.com/sluicehq/sluice/redisscript"

// Store is the Redis-backed sluice.Limiter; see redisscript.Store.
type Store = redisscript.Store

// Options configures a Store; see redisscript.Options.
type Options = redisscript.Options

// CoalesceOptions configure how concurrent decisions share script calls;
// see redisscript.CoalesceOptions.
type CoalesceOptions = redisscript.CoalesceOptions

// Stats are a Store's counters; see redisscript.Stats.
type Stats = redisscript.Stats

// Client is what the store needs of a Redis client; see
// redisscript.Client. A *Conn and NewRueidis's adapter are Clients.
type Client = redisscript.Client

// New returns a Store on opts.Client (a *Conn, or NewRueidis's adapter);
// see redisscript.New.
func New(opts Options) (*Store, error) { return redisscript.New(opts) }
