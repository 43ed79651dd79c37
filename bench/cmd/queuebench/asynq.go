package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const asynqType = "queuebench:noop"

func openAsynq(ctx context.Context, e *env) (*suite, error) {
	rdb := redis.NewClient(&redis.Options{Addr: e.opts.redis, DB: e.opts.redisDB, PoolSize: 256})
	s, err := newAsynqSuite(ctx, e, rdb)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return s, nil
}

func newAsynqSuite(ctx context.Context, e *env, rdb *redis.Client) (*suite, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil, fmt.Errorf("redis at %s: %w", e.opts.redis, err)
	}
	durable, err := redisDurability(ctx, rdb)
	if err != nil {
		return nil, err
	}
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	a := &asynqBench{rdb: rdb, inspector: inspector}
	return &suite{
		durable: durable,
		version: fmt.Sprintf("asynq %s (go-redis %s) on Redis %s, DB %d",
			moduleVersion("github.com/hibiken/asynq"), moduleVersion("github.com/redis/go-redis/v9"), infoField(info, "redis_version"), e.opts.redisDB),
		// The clients, the inspector and the servers share rdb, which
		// they do not close. The DB is emptied again, not to leave a
		// backlog in a shared Redis.
		close: func() error {
			err := rdb.FlushDB(context.WithoutCancel(ctx)).Err()
			return errors.Join(err, rdb.Close())
		},
		cases: []testCase{
			{scenario: ingestSingle, label: "Enqueue ×1, 64 goroutines", run: a.ingest},
			{scenario: ingestBatch, label: "—", note: "asynq has no batch enqueue API"},
			{scenario: work, label: "no-op handler, Concurrency 64", run: a.work(64), note: "processed = asynq's processed-total counter"},
			{scenario: work, label: "no-op handler, Concurrency 128", run: a.work(128), note: "processed = asynq's processed-total counter"},
		},
	}, nil
}

// redisDurability says, from the server's settings, what an acknowledged
// write survives.
func redisDurability(ctx context.Context, rdb *redis.Client) (string, error) {
	get := func(name string) (string, error) {
		m, err := rdb.ConfigGet(ctx, name).Result()
		return m[name], err
	}
	aof, err := get("appendonly")
	if err != nil {
		return "", fmt.Errorf("redis CONFIG GET: %w", err)
	}
	fsync, err := get("appendfsync")
	if err != nil {
		return "", err
	}
	save, err := get("save")
	if err != nil {
		return "", err
	}
	switch {
	case aof == "yes" && fsync == "always":
		return "yes: Redis AOF with appendfsync always", nil
	case aof == "yes":
		return fmt.Sprintf("partly: Redis AOF with appendfsync %s (a power loss loses the last second)", fsync), nil
	case save != "":
		return fmt.Sprintf("no: Redis RDB snapshots only (save %q), no AOF", save), nil
	}
	return `no: Redis without persistence (save "", appendonly no): a restart loses every task`, nil
}

// infoField returns one field of an INFO reply.
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

// asynqBench holds what asynq's rows share.
type asynqBench struct {
	rdb       *redis.Client
	inspector *asynq.Inspector
}

// empty flushes asynq's Redis DB (that DB only), so each row starts
// empty, and returns a new client: a client registers a queue's name
// (in asynq:queues) on its first task to the queue only, so one used
// before the flush would leave the queue unregistered.
func (a *asynqBench) empty(ctx context.Context) (*asynq.Client, error) {
	if err := a.rdb.FlushDB(ctx).Err(); err != nil {
		return nil, err
	}
	return asynq.NewClientFromRedisClient(a.rdb), nil
}

func enqueue(c *asynq.Client) putFunc {
	return func(ctx context.Context, _ int) error {
		_, err := c.EnqueueContext(ctx, asynq.NewTask(asynqType, payload))
		return err
	}
}

func (a *asynqBench) ingest(ctx context.Context, e *env) (result, error) {
	c, err := a.empty(ctx)
	if err != nil {
		return result{}, err
	}
	return ingest(ctx, e, 64, 1, enqueue(c))
}

// work pre-fills a backlog, starts a server that works it, and counts what
// asynq counts as processed in the window.
func (a *asynqBench) work(concurrency int) func(context.Context, *env) (result, error) {
	return func(ctx context.Context, e *env) (result, error) {
		c, err := a.empty(ctx)
		if err != nil {
			return result{}, err
		}
		backlog := e.backlog(10000)
		if err := fill(ctx, backlog, 64, 1, enqueue(c)); err != nil {
			return result{}, err
		}
		srv := asynq.NewServerFromRedisClient(a.rdb, asynq.Config{
			Concurrency:       concurrency,
			Queues:            map[string]int{"default": 1},
			TaskCheckInterval: 10 * time.Millisecond,
			LogLevel:          asynq.WarnLevel,
		})
		noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
		if err := srv.Start(noop); err != nil {
			return result{}, err
		}
		w := e.window()
		var before, after *asynq.QueueInfo
		cpu, err := w.watch(ctx, func() (err error) {
			before, err = a.inspector.GetQueueInfo("default")
			return err
		}, func() (err error) {
			after, err = a.inspector.GetQueueInfo("default")
			return err
		})
		srv.Shutdown()
		if err != nil {
			return result{}, err
		}
		return result{
			tasks: int64(after.ProcessedTotal - before.ProcessedTotal), secs: w.to.Sub(w.from).Seconds(),
			dry: after.Pending == 0, backlog: backlog, cpu: cpu,
		}, nil
	}
}
