// Command queuebench measures durable queues side by side on this
// machine's local services: River on PostgreSQL, asynq on Redis, NATS
// JetStream used directly, raw bbolt, and sluice's own queues through the
// [queue.Queue] contract. It prints a plain-text table and writes the same
// as Markdown (-out); `make bench-queue` runs it.
//
// Each row is one way of using one queue, in one of three scenarios:
//
//	ingest-single  64 goroutines, each enqueueing one task per call
//	ingest-batch   8 goroutines, each enqueueing 100 tasks per call
//	work           a pre-filled backlog worked off by no-op workers
//
// and states whether what the queue acknowledged is durable, and why
// (from the server's settings where it has them; a sluice queue's own
// Stats.Durability).
//
// A round runs every row once, for -warmup (not counted) and then for
// -duration; -rounds rounds alternate the implementations (A B A B …) so
// that a disturbance of the shared machine spreads over all of them. A row
// gives the median of its rounds' tasks/s and their range, the median of
// the rounds' p99 latencies, and the CPU, in cores, that queuebench and the
// whole machine used in the median round (the rest went to the server and
// to whatever else ran). A work row whose backlog ran out before the end
// of a round says so: its figure is then a lower bound. Backlogs are sized
// from the fastest rate seen so far (a first guess in round 1), and each
// row's note gives the median round's.
//
// sluice's queues and JetStream are worked as sluice's relay works: 4
// consumers each take a slice (Lease, Fetch) and acknowledge its tasks
// from 8 goroutines at once, then take the next; p99 is a task's time from
// its slice's return to its acknowledgement's return. River and asynq run
// their own workers; their rows count what the queue itself recorded as
// done (River's completed rows, asynq's processed-total counter).
//
// Every payload is 64 bytes. Data files (bbolt, sluice) go to a temporary
// directory under -dir, removed at the end; the output names its
// filesystem. PostgreSQL's database must exist (`make bench-queue` creates
// it); River's migrations are run on it and its river_job table is
// truncated before each row. asynq works in Redis DB -redis-db, which
// queuebench flushes (that DB only) before each row and at the end.
// JetStream rows use the stream QUEUEBENCH, deleted afterwards.
//
// To measure another sluice backend, add its opener to [openers]
// (sluice.go); every other implementation is a file of its own with an
// open function listed in [openSystem].
//
//	queuebench -impl river,asynq -scenario work -duration 2s -rounds 1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "queuebench:", err)
		os.Exit(1)
	}
}

// The scenarios, in the order rows are printed.
const (
	ingestSingle = "ingest-single"
	ingestBatch  = "ingest-batch"
	work         = "work"
)

var scenarios = []string{ingestSingle, ingestBatch, work}

// options are the parsed flags.
type options struct {
	args      []string
	impls     []string
	scenarios []string
	duration  time.Duration
	warmup    time.Duration
	rounds    int
	out       string
	dir       string
	backlog   int

	postgres  string
	pgConns   int
	redis     string
	redisDB   int
	nats      string
	riverWork riverWork
}

// systemNames lists every implementation, anchors first.
func systemNames() []string {
	names := []string{"river", "asynq", "jetstream", "bbolt"}
	return append(names, sluiceNames()...)
}

func parse(args []string, stderr io.Writer) (options, error) {
	o := options{args: args}
	fs := flag.NewFlagSet("queuebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	impls := fs.String("impl", strings.Join(systemNames(), ","), "comma-separated `implementations` to measure")
	scen := fs.String("scenario", strings.Join(scenarios, ","), "comma-separated `scenarios`: "+strings.Join(scenarios, ", "))
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each row in each round")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each row's measurement")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; rows give the median and the range")
	fs.StringVar(&o.out, "out", "", "also write the table as Markdown to this `file`")
	fs.StringVar(&o.dir, "dir", os.TempDir(), "`directory` under which the data files of bbolt and sluice go")
	fs.IntVar(&o.backlog, "backlog", 0, "tasks pre-filled for each work row (0: sized from the rates seen)")
	fs.StringVar(&o.postgres, "postgres", "postgres://postgres@127.0.0.1:5432/sluice_bench?sslmode=disable", "PostgreSQL `URL` for River")
	fs.IntVar(&o.pgConns, "pg-conns", 64, "River's pool size: one connection per ingest goroutine lets concurrent commits share a WAL flush")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis `address` for asynq")
	fs.IntVar(&o.redisDB, "redis-db", 15, "Redis `DB` for asynq, flushed before each row")
	fs.StringVar(&o.nats, "nats", "nats://127.0.0.1:4222", "NATS `URL` for JetStream")
	fs.IntVar(&o.riverWork.maxWorkers, "river-workers", 200, "River's MaxWorkers in the work row")
	fs.DurationVar(&o.riverWork.cooldown, "river-cooldown", time.Millisecond, "River's FetchCooldown in the work row (River's default: 100ms)")
	fs.DurationVar(&o.riverWork.poll, "river-poll", 10*time.Millisecond, "River's FetchPollInterval in the work row (River's default: 1s)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.impls = list(*impls)
	o.scenarios = list(*scen)
	for _, s := range o.impls {
		if !slices.Contains(systemNames(), s) {
			return o, fmt.Errorf("-impl %q: want some of %s", s, strings.Join(systemNames(), ", "))
		}
	}
	for _, s := range o.scenarios {
		if !slices.Contains(scenarios, s) {
			return o, fmt.Errorf("-scenario %q: want some of %s", s, strings.Join(scenarios, ", "))
		}
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case len(o.impls) == 0 || len(o.scenarios) == 0:
		return o, errors.New("-impl and -scenario must name at least one each")
	case o.duration <= 0 || o.warmup < 0 || o.rounds < 1 || o.backlog < 0:
		return o, errors.New("-duration and -rounds must be positive, -warmup and -backlog not negative")
	case o.pgConns < 1 || o.pgConns > 1000:
		return o, errors.New("-pg-conns must be from 1 to 1000")
	case o.riverWork.maxWorkers < 1 || o.riverWork.cooldown < time.Millisecond || o.riverWork.poll < o.riverWork.cooldown:
		return o, errors.New("-river-workers must be positive, -river-cooldown at least 1ms and -river-poll at least -river-cooldown")
	}
	return o, nil
}

// list splits a comma-separated flag, dropping empty entries.
func list(s string) []string {
	var l []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			l = append(l, f)
		}
	}
	return l
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(o.dir, "queuebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{opts: o, tmp: tmp, rates: map[string]float64{}}

	var opened []*suite
	defer func() {
		for _, s := range opened {
			if err := s.close(); err != nil {
				fmt.Fprintf(stderr, "queuebench: close %s: %v\n", s.name, err)
			}
		}
	}()
	for _, name := range o.impls {
		s, err := openSystem(ctx, name, e)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		s.name = name
		s.cases = slices.DeleteFunc(s.cases, func(c testCase) bool { return !slices.Contains(o.scenarios, c.scenario) })
		opened = append(opened, s)
	}

	t := &table{}
	for _, s := range opened {
		for _, c := range s.cases {
			t.add(s, c)
		}
	}
	for round := 1; round <= o.rounds; round++ {
		for _, s := range opened {
			for _, c := range s.cases {
				if c.run == nil {
					continue
				}
				e.row = s.name + "/" + c.scenario + "/" + c.label
				r, err := c.run(ctx, e)
				if err != nil {
					return fmt.Errorf("round %d: %s %s %s: %w", round, s.name, c.scenario, c.label, err)
				}
				e.observe(r.rate())
				t.record(s, c, r)
				fmt.Fprintf(stderr, "round %d/%d  %-10s %-13s %-50s %s\n", round, o.rounds, s.name, c.scenario, c.label, r.summary())
			}
		}
	}

	h := header(ctx, o, tmp, opened)
	if err := t.writeText(stdout, h); err != nil {
		return err
	}
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		if err := t.writeMarkdown(f, h); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "queuebench: wrote", o.out)
	}
	return nil
}

// openSystem connects to one implementation and lists its rows.
func openSystem(ctx context.Context, name string, e *env) (*suite, error) {
	switch name {
	case "river":
		return openRiver(ctx, e)
	case "asynq":
		return openAsynq(ctx, e)
	case "jetstream":
		return openJetStream(ctx, e)
	case "bbolt":
		return openBolt(ctx, e)
	}
	return openSluice(ctx, name, e)
}
