// Package jsqueue is sluice's fleet queue: a [queue.Queue] on NATS
// JetStream, shared by any number of processes that open it under the
// same name.
//
// # Layout
//
// A queue named N (Options.Name) is made of, on the server:
//
//   - ten tasks streams N_tasks_0 … N_tasks_9, one per priority (file
//     storage, work-queue retention): one message per task on the subject
//     N.task.<priority>.<id>, whose data is the payload. A task's ID is a
//     NUID (22 letters and digits); it is also the message's Nats-Msg-Id,
//     so a publish re-sent after a reconnect is stored once (the stream's
//     Duplicates window is the dedup window, at most 2 minutes: a task's
//     ID is never published again after Enqueue returns; a revived task's
//     message is published under <id>-<its dead letter's sequence>).
//   - in each tasks stream, one durable pull consumer "lease" with no
//     subject filter, explicit ack, AckWait Options.AckWait, MaxDeliver
//     unlimited and MaxAckPending unlimited. (A stream per priority, not
//     one stream with a filtered consumer per priority: nats-server 2.9
//     counts a filtered consumer's pending messages on every pull by
//     walking the stream's subjects, one per task, which held a Lease of
//     50 to ~200 tasks/s at a backlog of 50,000.)
//   - the KV bucket N_status: one record per unfinished task (state,
//     attempts, instants, lease token and end, last outcome; JSON, so
//     `nats kv get N_status <id>` shows it). It has no TTL.
//   - the KV buckets N_succeeded, N_dead and N_cancelled: the records of
//     finished tasks (with the kept result), whose TTL is the retention
//     (Options.Retention, DeadRetention). A finished task's record moves
//     there from N_status.
//   - the KV bucket N_keys, TTL Options.DedupWindow: one entry per
//     idempotency key (named by the key's SHA-256), holding the task's ID
//     and its payload's SHA-256.
//   - the dead-letter stream N_dead_letters (limits retention, max age
//     DeadRetention, one message per subject): a dead task's payload on
//     N.dead.<id>, with its reason in the header Sluice-Reason and the
//     instant of its death in Sluice-Died. Its sequence is the order of
//     deaths ListDead pages through.
//
// # Enqueue
//
// Enqueue checks every task ([queue.Check]), then claims each key with
// KV Create in N_keys: an entry already there within the dedup window
// makes the task a duplicate (same payload digest) or refuses the batch
// with [queue.ErrKeyConflict]. Then it writes the tasks' status records,
// then publishes their messages (ordered by ready time), and returns when
// the server has acknowledged every write (PubAcks). Records are written
// before messages, so a message whose record is missing is the leftover
// of a failed Enqueue and Lease drops it.
//
// A batch is all or nothing as far as the server lets jsqueue know: when
// a write fails midway (a refused key, a server that stops answering),
// Enqueue deletes what the batch had already written (messages, records,
// key claims) before it returns the error. When that cleanup fails too,
// or a write was not confirmed (it may still land), the error says "tasks
// of this call may be stored": a task whose message landed is delivered
// (at-least-once; an Enqueue retried with the same keys finds it as a
// duplicate), and a record whose message never landed stays in N_status,
// counted as ready by Stats and shown as queued by Get, though no Lease
// will ever hand it out (Cancel removes it). JetStream before
// nats-server 2.12 has no atomic multi-message publish.
//
// # Leases
//
// A lease is a record, not a consumer's ack timer: a consumer has one
// AckWait, and a lease has its own visibility. Lease pulls from the
// consumers, highest priority first, with no-wait requests (it never
// waits for tasks to arrive). For each message it reads the task's record
// and, if the task is ready, updates it with a revision-checked KV update
// (state leased, attempts+1, a new random token, until = now +
// visibility, the message's sequence and reply subject), then naks the
// message with a delay of the visibility (NakWithDelay). The message
// stays with the consumer, and the server's timer hands it back to a
// Lease when the lease would end, whether or not its holder is alive: a
// crashed holder's tasks come back at the end of their leases. A Lease
// that finds the task's lease still current (it was extended) naks again
// for the rest of it; one that finds it ended leases the task again (a
// new attempt) or, on its last attempt, dead-letters it with
// [queue.ReasonAttempts]. AckWait only matters if the process running
// Lease dies (or its connection drops) between pulling a message and
// naking it: the message comes back after AckWait.
//
// Every operation with a receipt (Ack, Extend, Retry, DeadLetter) reads
// the record, checks that it is leased under the receipt's token and that
// the lease has not ended, and writes with a revision-checked update: an
// old holder's Ack cannot succeed once the task was leased again,
// retried, extended by someone else or cancelled (ErrLeaseLost). Extend
// writes the new end (and naks the message again if the end moved
// earlier). Retry writes the ready instant, gives the attempt back when
// throttled, and naks the message, through the stored reply subject, with
// a delay to that instant. A task reaches a final state with one
// revision-checked update of its record; then its record is copied to the
// bucket of its final state and removed from N_status, the dead letter is
// published, and its message is deleted from the tasks stream.
//
// MaxDeliver is unlimited because deliveries are not attempts: a nak for
// a not-before, a retry delay, a throttled retry or an extended lease is
// a delivery too. Attempts are counted in the record when a lease is
// handed out and given back by a throttled Retry.
//
// # Dead letters
//
// ListDead reads the dead-letter stream in sequence order from the
// cursor's place, with an ephemeral consumer (created and deleted by the
// call; the server removes it after 2×Timeout if the delete is lost), and
// for each letter the task's record in N_dead: n letters and n record
// reads (32 at a time) for a page of n, whatever the number of dead
// tasks. The cursor, a task's ID, maps to a sequence of the stream: its
// dead letter's (the last on N.dead.<id>), or, for a task revived since,
// the one its live record keeps (dead_seq). A letter is listed while its
// task's record in N_dead is the death it records (Sluice-Died); one
// whose task was revived or whose record expired is skipped. The order
// is the order the letters were stored, which is the order of deaths up
// to deaths in different processes within the same few milliseconds.
//
// Revive reads the task's record in N_dead (revision R) and its dead
// letter (payload, sequence S), then creates its live record in N_status
// with KV Create — waiting, attempts 0, ready at the instant given, with
// dead_seq S, dead_rev R and a reviving mark. That Create is the commit:
// of two concurrent Revives only one creates the record, and the other
// reads it and fails with [queue.ErrNotDead]. Then it removes the dead
// record (a purge of its subject up to revision R, so never the record of
// a later death), publishes the task's message (message ID <id>-S), deletes
// the dead letter and clears the mark with a revision-checked update.
// These steps are logged, not returned, when they fail: the task is
// revived. A process that dies after the commit leaves the mark: Stats
// (as for a finished record left in N_status) finishes, after 10 s, the
// steps not done — it publishes the message from the dead letter if the
// task has none. Until then the task is counted ready by Stats and may
// also be counted and listed dead; it is delivered once its message is
// published.
//
// # Order
//
// Lease takes the priorities from 9 down to 0. Within a priority the
// server hands out messages whose delay ended (retries, ended leases,
// not-befores that came due) first, then never-delivered messages in
// publish order (a batch is published in ready-time order); each call's
// answer is sorted by priority, then ready time. A queue that is read by
// one consumer at a time therefore leases by priority then ready time;
// ready time across retries and new tasks is approximate.
//
// # Scheduling without the server's
//
// nats-server 2.9 and 2.10 have no message scheduling; jsqueue does not
// use it where it exists either. A task with a future not-before is
// published at once: the first Lease that pulls it naks it with a delay
// to its not-before (read from the header Sluice-Ready-At, with no
// record read), and the server redelivers it then. A Lease looks at up
// to 4n messages (at least 1024) per call, so a backlog of scheduled
// tasks in front of ready ones costs a few calls once, not every call.
//
// # Stats
//
// Ready, Scheduled, Leased, Depth and OldestReady are exact at the
// instant of the call: Stats reads every record in N_status (one
// ordered consumer over the bucket), so its cost grows with the number
// of unfinished tasks: 11 ms at 1,000 and 82 ms at 10,000 on a local
// nats-server 2.9 (BenchmarkStats). Poll it every few seconds, not per
// request.
// Succeeded, Dead and Cancelled are the number of records in each
// finished bucket (stream info, one request each): exact within the
// retention (Revive purges the dead record, leaving no marker to count).
// A task whose final update was written by a process that died before it
// moved the record is counted as finished by neither until a Stats call
// finds it in N_status (after 10 s) and finishes the move; Stats finishes
// a revival left half done the same way (see Dead letters).
//
// # Durability
//
// Every write returns after its PubAck: the server stored it in file
// storage (and, with Replicas > 1, a majority of the nodes did).
// nats-server before 2.10 syncs its files every 2 minutes: a returned
// Enqueue survives a crash of the server process, not a power loss of a
// single node. From 2.10 the sync follows the server's sync_interval
// (`sync_interval: always` syncs every write). Stats.Durability and the
// log line of Open say which applies to the connected server.
//
// # Clusters
//
// With Replicas > 1 every stream and bucket is replicated (R3 is the
// usual). jsqueue turns off direct gets on its buckets, so every record
// is read from its stream's leader: a lagging replica would answer "no
// such key" for a record that exists. When the node that leads a stream
// dies, calls that need that stream fail until the survivors elect a new
// leader (4 to 9 s on nats-server 2.9); no acknowledged write is lost.
//
// # Clocks
//
// Lease ends, ready instants and deadlines are instants of the clocks of
// the processes that use the queue (the server's timers only wake
// messages up): keep the fleet's clocks synchronised.
package jsqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/semaphore"

	"github.com/sluicehq/sluice/queue"
)

// Options configure a queue. The zero value of each field means its
// documented default; Open validates them.
type Options struct {
	// URL is the NATS server to connect to, or several separated by
	// commas (a cluster). Required unless Conn is set.
	URL string
	// Conn is a connection to use instead of URL. Close leaves it open.
	// A connection jsqueue makes itself does not buffer writes while it
	// reconnects (they fail at once), so an outage fails Enqueue loudly.
	Conn *nats.Conn
	// Name names the queue's streams, consumers and buckets (see the
	// package doc): letters, digits, '-' and '_', at most 64 (default
	// "sluice"). Processes that open the same name share the queue.
	Name string
	// Replicas is the number of copies of every stream and bucket in a
	// JetStream cluster (default 1, at most 5).
	Replicas int
	// MaxPayload is the largest task payload, in bytes (default 1 MiB or
	// the server's max_payload less 4 KiB for the message's subject and
	// headers, whichever is smaller; never more than that).
	MaxPayload int
	// MaxResult is the largest result Ack keeps, in bytes (default 64
	// KiB; at most the server's max_payload less 4 KiB).
	MaxResult int
	// MaxAttempts is a task's attempts when it does not say (default 25,
	// at most 1000).
	MaxAttempts int
	// DedupWindow is how long an idempotency key is remembered after its
	// task was enqueued (default 24 h).
	DedupWindow time.Duration
	// Retention is how long a succeeded or cancelled task's record is
	// kept for Get (default 24 h); DeadRetention the same for dead tasks
	// and their dead letters (default 7 days).
	Retention     time.Duration
	DeadRetention time.Duration
	// AckWait is the consumers' ack wait: how long a message pulled by a
	// Lease whose process died (or whose connection dropped) before it put
	// the message back stays invisible (default 10 s, at least 1 s). It
	// bounds no lease: a message that comes back while its task's lease
	// is current is put back again.
	AckWait time.Duration
	// Timeout bounds each call's requests to the server (default 5 s).
	Timeout time.Duration
	// Logger receives the queue's rare events (open, a cleanup that
	// failed); default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultName          = "sluice"
	DefaultMaxPayload    = queue.DefaultMaxPayload
	DefaultMaxResult     = queue.DefaultMaxResult
	DefaultMaxAttempts   = queue.DefaultMaxAttempts
	DefaultDedupWindow   = queue.DefaultDedupWindow
	DefaultRetention     = queue.DefaultRetention
	DefaultDeadRetention = queue.DefaultDeadRetention
	DefaultAckWait       = 10 * time.Second
	DefaultTimeout       = 5 * time.Second
)

const (
	maxAttempts = 1000
	// headroom is what a task message's subject and headers may take of
	// the server's max_payload.
	headroom = 4 << 10
	// publishDedup is the longest the tasks stream remembers a message ID.
	publishDedup = 2 * time.Minute
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (o Options) withDefaults() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("jsqueue: open: "+format, args...)
	}
	if o.URL == "" && o.Conn == nil {
		return bad("neither URL nor Conn is set")
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if !validName.MatchString(o.Name) {
		return bad("name %q: letters, digits, '-' and '_' only, at most 64", o.Name)
	}
	ints := []struct {
		v         *int
		def, most int
		name      string
	}{
		{&o.Replicas, 1, 5, "Replicas"},
		{&o.MaxResult, DefaultMaxResult, 64 << 20, "MaxResult"},
		{&o.MaxAttempts, DefaultMaxAttempts, maxAttempts, "MaxAttempts"},
		{&o.MaxPayload, 0, 64 << 20, "MaxPayload"}, // its default depends on the server
	}
	for _, f := range ints {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0 || *f.v > f.most:
			return bad("%s %d: must be from 1 to %d", f.name, *f.v, f.most)
		}
	}
	durs := []struct {
		v          *time.Duration
		def, least time.Duration
		name       string
	}{
		{&o.DedupWindow, DefaultDedupWindow, 100 * time.Millisecond, "DedupWindow"},
		{&o.Retention, DefaultRetention, time.Second, "Retention"},
		{&o.DeadRetention, DefaultDeadRetention, time.Second, "DeadRetention"},
		{&o.AckWait, DefaultAckWait, time.Second, "AckWait"},
		{&o.Timeout, DefaultTimeout, time.Millisecond, "Timeout"},
	}
	for _, f := range durs {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < f.least:
			return bad("%s %v: must be at least %v", f.name, *f.v, f.least)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Queue is a queue.Queue on NATS JetStream. It is safe for concurrent use
// by many goroutines, and many processes may open the same queue.
type Queue struct {
	o       Options
	nc      *nats.Conn
	ownConn bool
	js      jetstream.JetStream
	log     *slog.Logger

	tasks      [queue.MaxPriority + 1]jetstream.Stream // by priority
	deadLetter jetstream.Stream
	consumers  [queue.MaxPriority + 1]jetstream.Consumer
	status     jetstream.KeyValue
	statusLog  jetstream.Stream // the status bucket's stream, to remove a record whole
	deadLog    jetstream.Stream // the dead bucket's stream, to remove a revived task's record whole
	keys       jetstream.KeyValue
	// finished holds the buckets of the final states, by record state.
	finished map[string]jetstream.KeyValue

	// publishing holds, for each publish window in flight, a unit per
	// write; maxPending in all.
	publishing *semaphore.Weighted
	// settling counts the goroutines that hold publishing's units for
	// writes a caller stopped waiting for; stop ends them at Close.
	// settleMu orders their start before Close's wait.
	settling sync.WaitGroup
	settleMu sync.Mutex
	stop     chan struct{}

	durability string
	closed     atomic.Bool
}

var _ queue.Queue = (*Queue)(nil)

// Open connects (unless Options.Conn is given), creates the queue's
// streams, consumers and buckets or updates their configuration, and
// returns the queue. It logs, at Info, the server's version and what an
// Enqueue that returned survives.
func Open(ctx context.Context, o Options) (*Queue, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	q := &Queue{o: o, nc: o.Conn, log: o.Logger, publishing: semaphore.NewWeighted(maxPending), stop: make(chan struct{})}
	if q.nc == nil {
		q.nc, err = nats.Connect(o.URL, nats.Name("sluice jsqueue "+o.Name),
			nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.Timeout(o.Timeout))
		if err != nil {
			return nil, fmt.Errorf("jsqueue: open: connect to %s: %w", o.URL, err)
		}
		q.ownConn = true
	}
	if err := q.open(ctx); err != nil {
		if q.ownConn {
			q.nc.Close()
		}
		return nil, err
	}
	return q, nil
}

func (q *Queue) open(ctx context.Context) error {
	o := &q.o
	limit := int(q.nc.MaxPayload()) - headroom
	switch {
	case o.MaxPayload == 0:
		o.MaxPayload = min(DefaultMaxPayload, limit)
	case o.MaxPayload > limit:
		return fmt.Errorf("jsqueue: open: MaxPayload %d: the server's max_payload %d allows at most %d", o.MaxPayload, q.nc.MaxPayload(), limit)
	}
	if o.MaxResult > limit {
		return fmt.Errorf("jsqueue: open: MaxResult %d: the server's max_payload %d allows at most %d", o.MaxResult, q.nc.MaxPayload(), limit)
	}
	version := q.nc.ConnectedServerVersion()
	q.durability = durability(version, o.Replicas)

	var err error
	q.js, err = jetstream.New(q.nc, jetstream.WithPublishAsyncTimeout(o.Timeout), jetstream.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		return fmt.Errorf("jsqueue: open: %w", err)
	}
	// Up to 45 requests: streams, consumers, buckets and their updates.
	ctx, cancel := context.WithTimeout(ctx, 12*o.Timeout)
	defer cancel()
	// The first layout kept every task in one stream named N; its
	// records name sequences of that stream. Refuse to mix the two.
	switch _, err := q.js.Stream(ctx, o.Name); {
	case err == nil:
		return fmt.Errorf("jsqueue: open: queue %s was created by an earlier jsqueue (one tasks stream, %s): "+
			"work it off with that version, delete the stream %s and the buckets %s_*, then open it again", o.Name, o.Name, o.Name, o.Name)
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("jsqueue: open: look for an earlier layout's stream %s: %w", o.Name, err)
	}
	for p := range q.tasks {
		q.tasks[p], err = q.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        q.taskStream(p),
			Description: fmt.Sprintf("sluice queue %s: one message per unfinished task of priority %d", o.Name, p),
			Subjects:    []string{q.taskSubject(p, "*")},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
			Duplicates:  min(publishDedup, o.DedupWindow),
		})
		if err != nil {
			return fmt.Errorf("jsqueue: open: the tasks stream %s: %w", q.taskStream(p), err)
		}
	}
	q.deadLetter, err = q.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        o.Name + "_dead_letters",
		Description: "sluice queue " + o.Name + ": dead tasks' payloads",
		Subjects:    []string{o.Name + ".dead.*"},
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
		MaxAge:      o.DeadRetention,
		Duplicates:  min(publishDedup, o.DeadRetention),
		// A task's latest death replaces the letter of an earlier one
		// that a revival left behind.
		MaxMsgsPerSubject: 1,
	})
	if err != nil {
		return fmt.Errorf("jsqueue: open: the dead-letter stream: %w", err)
	}
	for p := range q.consumers {
		// One stream per priority and no filter: the server counts an
		// unfiltered consumer's pending messages from the stream's state,
		// where a filtered one (2.9) walks every subject of the stream on
		// every pull, and every task has a subject of its own.
		q.consumers[p], err = q.tasks[p].CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       "lease",
			Description:   fmt.Sprintf("sluice queue %s: Lease of priority %d", o.Name, p),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       o.AckWait,
			MaxDeliver:    -1,
			MaxAckPending: -1,
		})
		if err != nil {
			return fmt.Errorf("jsqueue: open: the consumer of priority %d: %w", p, err)
		}
	}
	bucket := func(suffix, what string, ttl time.Duration) (jetstream.KeyValue, error) {
		kv, err := q.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      o.Name + "_" + suffix,
			Description: "sluice queue " + o.Name + ": " + what,
			TTL:         ttl,
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("jsqueue: open: the bucket %s_%s: %w", o.Name, suffix, err)
		}
		return q.leaderReads(ctx, kv)
	}
	if q.status, err = bucket("status", "unfinished tasks' records", 0); err != nil {
		return err
	}
	if q.statusLog, err = q.js.Stream(ctx, "KV_"+o.Name+"_status"); err != nil {
		return fmt.Errorf("jsqueue: open: the status bucket's stream: %w", err)
	}
	if q.keys, err = bucket("keys", "idempotency keys", o.DedupWindow); err != nil {
		return err
	}
	q.finished = map[string]jetstream.KeyValue{}
	for _, f := range []struct {
		state string
		ttl   time.Duration
	}{{stSucceeded, o.Retention}, {stDead, o.DeadRetention}, {stCancelled, o.Retention}} {
		if q.finished[f.state], err = bucket(f.state, f.state+" tasks' records", f.ttl); err != nil {
			return err
		}
	}
	if q.deadLog, err = q.js.Stream(ctx, "KV_"+o.Name+"_"+stDead); err != nil {
		return fmt.Errorf("jsqueue: open: the dead bucket's stream: %w", err)
	}
	q.log.Info("jsqueue: open", "name", o.Name, "server", q.nc.ConnectedUrlRedacted(), "version", version,
		"replicas", o.Replicas, "max_payload", o.MaxPayload, "durability", q.durability)
	return nil
}

// leaderReads turns off direct gets on kv's stream, so that every read is
// answered by the stream's leader: a replica that lags (a node that just
// restarted) would answer "no such key" for a record that exists, and
// Lease would drop the task's message. nats.go creates buckets with
// direct gets on, so this runs after every create or update.
func (q *Queue) leaderReads(ctx context.Context, kv jetstream.KeyValue) (jetstream.KeyValue, error) {
	name := "KV_" + kv.Bucket()
	s, err := q.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("jsqueue: open: the bucket %s: %w", kv.Bucket(), err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowDirect {
		return kv, nil
	}
	cfg.AllowDirect = false
	if _, err := q.js.UpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("jsqueue: open: the bucket %s: turn direct gets off: %w", kv.Bucket(), err)
	}
	kv, err = q.js.KeyValue(ctx, kv.Bucket())
	if err != nil {
		return nil, fmt.Errorf("jsqueue: open: the bucket %s: %w", kv.Bucket(), err)
	}
	return kv, nil
}

// durability says what a returned write survives on a server of the
// version given.
func durability(version string, replicas int) string {
	copies := "one node"
	if replicas > 1 {
		copies = fmt.Sprintf("a majority of %d nodes (it survives the loss of a minority)", replicas)
	}
	major, minor := serverVersion(version)
	if major < 2 || major == 2 && minor < 10 {
		return fmt.Sprintf("JetStream file storage on %s, synced to disk every 2 minutes (nats-server %s): "+
			"survives a crash of the server process, not a power loss (up to 2 minutes of writes)", copies, version)
	}
	return fmt.Sprintf("JetStream file storage on %s, synced as the server's sync_interval says (nats-server %s): "+
		"with sync_interval: always it survives a power loss; with the default (2 minutes) a process crash only", copies, version)
}

// serverVersion parses "2.9.10" (or "2.11.0-beta") into 2, 9.
func serverVersion(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0
	}
	major, _ = strconv.Atoi(parts[0])
	minor, _ = strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor
}

// Name returns the queue's name (Options.Name).
func (q *Queue) Name() string { return q.o.Name }

// Limits returns the bounds the queue applies: the payload (after the
// server's max_payload) and the result.
func (q *Queue) Limits() (maxPayload, maxResult int) { return q.o.MaxPayload, q.o.MaxResult }

// Close stops using the queue and closes the connection jsqueue made
// (not one given as Options.Conn). Leases held stay held until they
// expire. Close is idempotent.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.settleMu.Lock()
	close(q.stop)
	q.settleMu.Unlock()
	q.settling.Wait()
	if q.ownConn {
		q.nc.Close()
	}
	return nil
}

// begin starts an operation: ErrClosed after Close, else a context bounded
// by Options.Timeout (scale times it for the operations that make many
// requests).
func (q *Queue) begin(ctx context.Context, op string, scale int) (context.Context, context.CancelFunc, error) {
	if q.closed.Load() {
		return nil, nil, fmt.Errorf("jsqueue: %s: %w", op, queue.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(scale)*q.o.Timeout)
	return ctx, cancel, nil
}

func (q *Queue) taskStream(priority int) string { return q.o.Name + "_tasks_" + strconv.Itoa(priority) }

func (q *Queue) taskSubject(priority int, id string) string {
	return q.o.Name + ".task." + strconv.Itoa(priority) + "." + id
}

func (q *Queue) deadSubject(id string) string { return q.o.Name + ".dead." + id }

func (q *Queue) statusSubject(id string) string { return "$KV." + q.o.Name + "_status." + id }

func (q *Queue) deadRecordSubject(id string) string {
	return "$KV." + q.o.Name + "_" + stDead + "." + id
}

// validID reports whether id can be a task's ID: one subject token and
// one KV key, letters and digits.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// wrap says which operation failed.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("jsqueue: %s: %w", op, err)
}

// notFound reports whether err says a key or message is not there.
func notFound(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrMsgNotFound)
}
