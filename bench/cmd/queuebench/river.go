package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverWork is the tuning of River's work row: River's defaults
// (FetchCooldown 100ms, FetchPollInterval 1s) cap a client at MaxWorkers
// jobs per cooldown.
type riverWork struct {
	maxWorkers     int
	cooldown, poll time.Duration
}

// noopArgs is River's job: a 64-byte payload, worked by doing nothing.
type noopArgs struct {
	P string `json:"p"`
}

func (noopArgs) Kind() string { return "queuebench_noop" }

func openRiver(ctx context.Context, e *env) (*suite, error) {
	cfg, err := pgxpool.ParseConfig(e.opts.postgres)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(e.opts.pgConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s, err := newRiverSuite(ctx, e, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func newRiverSuite(ctx context.Context, e *env, pool *pgxpool.Pool) (*suite, error) {
	var version, fsync, syncCommit string
	err := pool.QueryRow(ctx, `select current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')`).
		Scan(&version, &fsync, &syncCommit)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s: %w (does the database exist? make bench-queue creates it)", e.opts.postgres, err)
	}
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate River's schema: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error { return nil }))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := river.NewClient(driver, &river.Config{Workers: workers, Logger: logger})
	if err != nil {
		return nil, err
	}
	r := &riverBench{e: e, pool: pool, driver: driver, workers: workers, logger: logger, client: client}

	durable := fmt.Sprintf("yes: PostgreSQL fsync=%s, synchronous_commit=%s (WAL flushed at commit)", fsync, syncCommit)
	if fsync != "on" || syncCommit == "off" {
		durable = fmt.Sprintf("no: PostgreSQL fsync=%s, synchronous_commit=%s", fsync, syncCommit)
	}
	args := noopArgs{P: string(payload)}
	w := e.opts.riverWork
	return &suite{
		durable: durable,
		version: fmt.Sprintf("River %s (riverpgxv5, pgx %s, pool of %d connections) on PostgreSQL %s",
			moduleVersion("github.com/riverqueue/river"), moduleVersion("github.com/jackc/pgx/v5"), e.opts.pgConns, version),
		close: func() error { pool.Close(); return nil },
		cases: []testCase{
			{scenario: ingestSingle, label: "Insert ×1, 64 goroutines", run: r.ingest(64, 1, func(ctx context.Context, _ int) error {
				_, err := client.Insert(ctx, args, nil)
				return err
			})},
			{scenario: ingestBatch, label: "InsertMany ×100, 8 goroutines", run: r.ingest(8, 100, func(ctx context.Context, n int) error {
				_, err := client.InsertMany(ctx, r.params(n))
				return err
			})},
			{scenario: ingestBatch, label: "InsertManyFast (COPY) ×100, 8 goroutines", run: r.ingest(8, 100, func(ctx context.Context, n int) error {
				_, err := client.InsertManyFast(ctx, r.params(n))
				return err
			})},
			{
				scenario: work,
				label: fmt.Sprintf("no-op worker, MaxWorkers %d, FetchCooldown %v, FetchPollInterval %v",
					w.maxWorkers, w.cooldown, w.poll),
				note: "completed = rows in state completed, committed by River's batch completer",
				run:  r.work,
			},
		},
	}, nil
}

// riverBench holds what River's rows share.
type riverBench struct {
	e       *env
	pool    *pgxpool.Pool
	driver  *riverpgxv5.Driver
	workers *river.Workers
	logger  *slog.Logger
	client  *river.Client[pgx.Tx]
}

func (r *riverBench) params(n int) []river.InsertManyParams {
	p := make([]river.InsertManyParams, n)
	for i := range p {
		p[i].Args = noopArgs{P: string(payload)}
	}
	return p
}

// empty removes every job, so each row starts on an empty table.
func (r *riverBench) empty(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, `truncate river_job`)
	return err
}

func (r *riverBench) count(ctx context.Context, state string) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, `select count(*) from river_job where state = $1`, state).Scan(&n)
	return n, err
}

func (r *riverBench) ingest(g, n int, put putFunc) func(context.Context, *env) (result, error) {
	return func(ctx context.Context, e *env) (result, error) {
		if err := r.empty(ctx); err != nil {
			return result{}, err
		}
		return ingest(ctx, e, g, n, put)
	}
}

// work pre-fills a backlog with InsertManyFast, starts a client that works
// it, and counts the jobs whose completion was committed in the window.
func (r *riverBench) work(ctx context.Context, e *env) (result, error) {
	if err := r.empty(ctx); err != nil {
		return result{}, err
	}
	backlog := e.backlog(15000)
	err := fill(ctx, backlog, 4, 2000, func(ctx context.Context, n int) error {
		_, err := r.client.InsertManyFast(ctx, r.params(n))
		return err
	})
	if err != nil {
		return result{}, err
	}
	w := e.opts.riverWork
	worker, err := river.NewClient(r.driver, &river.Config{
		Workers:           r.workers,
		Logger:            r.logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: w.maxWorkers}},
		FetchCooldown:     w.cooldown,
		FetchPollInterval: w.poll,
	})
	if err != nil {
		return result{}, err
	}
	if err := worker.Start(ctx); err != nil {
		return result{}, err
	}
	win := e.window()
	var before, after, left int64
	cpu, err := win.watch(ctx, func() (err error) {
		before, err = r.count(ctx, "completed")
		return err
	}, func() (err error) {
		if after, err = r.count(ctx, "completed"); err != nil {
			return err
		}
		left, err = r.count(ctx, "available")
		return err
	})
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if serr := worker.Stop(stopCtx); err == nil {
		err = serr
	}
	if err != nil {
		return result{}, err
	}
	return result{
		tasks: after - before, secs: win.to.Sub(win.from).Seconds(),
		dry: left == 0, backlog: backlog, cpu: cpu,
	}, nil
}
