package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/net/netutil"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/filewatch"
	"github.com/sluicehq/sluice/internal/secret"
	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/redislease"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/relay/config"
	"github.com/sluicehq/sluice/relay/console"
	"github.com/sluicehq/sluice/relay/httpapi"
)

// This file is the only one of the package that knows the relay's
// configuration and runs it.

// relayTokenEnv holds the relay's API token when --token-file is not given.
const relayTokenEnv = "SLUICE_RELAY_TOKEN"

type relayFlags struct {
	config, tokenFile string
}

func newRelayCmd() *cobra.Command {
	var f relayFlags
	cmd := &cobra.Command{
		Use:   "relay --config FILE [--token-file FILE]",
		Short: "run the relay: accept work for rate-limited targets, deliver it at their pace",
		Long: `A self-hosted Cloud Tasks that knows its targets' limits: its API accepts every task at once
into durable queues (bbolt files by default, or NATS JetStream), and it delivers them to each
target at the pace its limits allow — configured, or learned from the target's answers — with
retries that honour Retry-After and dead letters for what cannot be delivered. The console
and /metrics are on the admin listener. Every route needs the token (--token-file, or
$SLUICE_RELAY_TOKEN; without either, one is made and written to the data directory).
Reloads on SIGHUP and when the file changes; stops gracefully on SIGINT or SIGTERM.
docs/relay.md is the manual.`,
		GroupID:           groupServices,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			if f.config == "" {
				return usagef("--config is required: the relay's YAML configuration file")
			}
			return runRelay(c.Context(), f, c.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "the relay's YAML configuration `FILE` (required; sluice check validates it)")
	fs.StringVar(&f.tokenFile, "token-file", "", "a `FILE` holding the API token, at least 16 characters (default: $"+relayTokenEnv+")")
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	return cmd
}

// relayToken reads the token, or makes one and keeps it beside the data
// when none is given, so that the relay runs in one command and is never
// open.
func relayToken(f relayFlags, cfg *config.File, log *slog.Logger) (string, error) {
	src := secret.Source{File: f.tokenFile}
	if src.File == "" {
		if _, ok := os.LookupEnv(relayTokenEnv); ok {
			src.Env = relayTokenEnv
		}
	}
	if !src.IsZero() {
		return secret.Read(src, secret.AdminToken)
	}
	dir := filepath.Dir(cfg.StateFile)
	path := filepath.Join(dir, "relay-token")
	if b, err := os.ReadFile(path); err == nil {
		if tok := strings.TrimSpace(string(b)); len(tok) >= 16 {
			log.Info("relay: API token read from the data directory", "file", path)
			return tok, nil
		}
	}
	raw := make([]byte, 24)
	_, _ = rand.Read(raw)
	tok := base64.RawURLEncoding.EncodeToString(raw)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("relay: keep the API token: %w", err)
	}
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("relay: keep the API token: %w", err)
	}
	log.Info("relay: no token given: made one and wrote it to the data directory (give --token-file or $"+relayTokenEnv+" to choose it)", "file", path)
	return tok, nil
}

// opener opens each queue's backend as the file says.
func opener(cfg *config.File, log *slog.Logger) (func(context.Context, string) (queue.Queue, error), error) {
	if n := cfg.Store.NATS; n != nil {
		return func(ctx context.Context, name string) (queue.Queue, error) {
			return jsqueue.Open(ctx, jsqueue.Options{URL: n.URL, Name: n.Prefix + name, Replicas: n.Replicas, Logger: log})
		}, nil
	}
	dir := cfg.Store.Bolt.Dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("relay: store.bolt.dir: %w", err)
	}
	return func(_ context.Context, name string) (queue.Queue, error) {
		return boltqueue.Open(filepath.Join(dir, name+".db"), boltqueue.Options{Logger: log})
	}, nil
}

func runRelay(ctx context.Context, f relayFlags, stderr io.Writer) error {
	cfg, err := config.Load(f.config)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	hup, stopHangups := hangups(ctx)
	defer stopHangups()
	open, err := opener(cfg, log)
	if err != nil {
		return err
	}
	token, err := relayToken(f, cfg, log)
	if err != nil {
		return err
	}
	fl, err := openFleet(cfg, log)
	if err != nil {
		return err
	}
	defer fl.close()
	o := cfg.Options()
	o.Open, o.Logger = open, log
	fl.budgets(&o)
	r, err := relay.New(ctx, o)
	if err != nil {
		return err
	}
	defer r.Close()
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		return err
	}
	if err := fl.register(m); err != nil {
		return err
	}
	for _, name := range r.Queues() {
		name := name
		s, _ := r.Stats(ctx, name)
		if err := m.RegisterRelayQueue(name, s.Target, func() (metrics.RelayQueueStats, bool) {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := r.Stats(sctx, name)
			if err != nil {
				return metrics.RelayQueueStats{}, false
			}
			return relayQueueMetrics(s), true
		}); err != nil {
			return err
		}
	}
	api := httpapi.New(r, httpapi.Options{Token: token, MaxBatchBytes: cfg.API.MaxBatchBytes, MaxBatch: cfg.API.MaxBatch, Logger: log})
	adminMux := http.NewServeMux()
	adminMux.Handle("/metrics", admin.Handler(admin.Options{Token: token}, m.Handler()))
	adminMux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	adminMux.Handle("/", console.New(r, console.Options{Token: token, Logger: log}))

	servers := []*http.Server{}
	listeners := []net.Listener{}
	for _, l := range []struct {
		addr string
		h    http.Handler
	}{{cfg.Listen, api}, {cfg.Admin, adminMux}} {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, o := range listeners {
				o.Close()
			}
			return fmt.Errorf("relay: listen %s: %w", l.addr, err)
		}
		listeners = append(listeners, netutil.LimitListener(ln, cfg.Server.MaxConnections))
		servers = append(servers, &http.Server{
			Handler: l.h, ReadHeaderTimeout: time.Duration(cfg.Server.ReadHeaderTimeout), ReadTimeout: time.Duration(cfg.Server.ReadTimeout),
			WriteTimeout: time.Duration(cfg.Server.WriteTimeout), IdleTimeout: time.Duration(cfg.Server.IdleTimeout),
			MaxHeaderBytes: cfg.Server.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		})
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(servers)+1)
	for i, s := range servers {
		wg.Go(func() {
			if err := s.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- err
				stop()
			}
		})
	}
	// The leases are kept from before the first task until after the
	// last: the partitions are given back once the relay has stopped.
	fl.start(ctx)
	defer fl.stop()
	wg.Go(func() { _ = r.Run(runCtx) })
	// Watching starts before "relay running": a change made once that line
	// is out is never missed.
	watcher, err := filewatch.New(filewatch.Options{Paths: []string{f.config}})
	if err != nil {
		log.Warn("relay: the configuration file is not watched; reload it with SIGHUP", "err", err)
	} else {
		defer watcher.Close()
	}
	wg.Go(func() { watchRelayConfig(runCtx, f.config, watcher, hup, r, fl, log) })
	running := []any{"api", listeners[0].Addr().String(), "admin", listeners[1].Addr().String(),
		"queues", strings.Join(r.Queues(), ","), "targets", strings.Join(r.Targets(), ","), "store", storeName(cfg), "version", version(debug.ReadBuildInfo())}
	log.Info("relay running", append(running, fl.logAttrs()...)...)
	<-runCtx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdown)
	}
	stop()
	wg.Wait()
	fl.stop()
	log.Info("relay stopped")
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func storeName(cfg *config.File) string {
	if cfg.Store.NATS != nil {
		return "nats " + cfg.Store.NATS.URL
	}
	return "bolt " + cfg.Store.Bolt.Dir
}

// watchRelayConfig reloads the configuration on SIGHUP and when its file
// changes: a refused file is logged with its line and the running
// configuration kept.
func watchRelayConfig(ctx context.Context, path string, w *filewatch.Watcher, hup <-chan struct{}, r *relay.Relay, fl *relayFleet, log *slog.Logger) {
	changes := make(chan struct{}, 1)
	poke := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	var watching sync.WaitGroup
	defer watching.Wait()
	if w != nil {
		watching.Go(func() { _ = w.Run(ctx, poke, nil) })
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-changes:
		}
		cfg, err := config.Load(path)
		if err == nil {
			err = fl.same(cfg)
		}
		if err == nil {
			o := cfg.Options()
			fl.budgets(&o)
			err = r.Reload(o)
		}
		if err != nil {
			log.Error("relay: configuration refused; the running one is kept", "err", err)
			continue
		}
		log.Info("relay: configuration reloaded", "file", path)
	}
}

func relayQueueMetrics(s relay.QueueStats) metrics.RelayQueueStats {
	return metrics.RelayQueueStats{
		Depth: s.Depth, Ready: s.Ready, Scheduled: s.Scheduled, InFlight: s.InFlight, Dead: s.Dead,
		OldestAge: s.OldestAge, EffectiveRate: s.EffectiveRate, Limit: s.Limit, ETA: s.ETA, ETAKnown: s.ETAKnown,
		MeanWait: s.MeanWait, Delivered: s.Delivered, Throttled: s.Throttled, Failed: s.Failed,
		DeadLettered: s.DeadLettered, Paused: s.Paused,
	}
}

// checkRelay validates a relay configuration and describes it.
func checkRelay(path string) (string, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return "", err
	}
	o := cfg.Options()
	lines := []string{fmt.Sprintf("%s: ok (%d targets, %d queues, %s store, for sluice relay)", path, len(o.Targets), len(o.Queues), storeName(cfg))}
	leases := map[string]config.Lease{}
	for _, l := range cfg.Leases() {
		leases[l.Target] = l
	}
	if fl := cfg.Fleet; fl != nil {
		now := time.Now()
		if _, err := cfg.RedisDialOptions(now); err != nil { // the password and TLS files, as a start reads them
			return "", err
		}
		member := "random at each start"
		if fl.Member != "" {
			member = fl.Member
		}
		lines = append(lines, fmt.Sprintf("  fleet: redis %s; key prefix %s; member %s; %d target(s) share a limit", fl.Redis.Describe(now), cmp.Or(fl.Prefix, redislease.DefaultPrefix), member, len(leases)))
	}
	for _, t := range o.Targets {
		limits := "learned from its answers"
		if len(t.Limits) > 0 {
			parts := make([]string, len(t.Limits))
			for i, l := range t.Limits {
				parts[i] = l.String()
			}
			limits = strings.Join(parts, "; ")
		}
		lines = append(lines, fmt.Sprintf("  target %s: %s, limits: %s", t.Name, t.Origin, limits))
		if l, ok := leases[t.Name]; ok {
			lo := l.Options
			p := float64(lo.Partitions)
			lines = append(lines, fmt.Sprintf("    fleet: %s shared as lease group %s: %d partitions of %g per %v (burst %g), ttl %v, renew %v, drift %v",
				l.Limit, lo.Limit.Name, lo.Partitions, lo.Limit.Quota/p, lo.Limit.Window, lo.Limit.Capacity()/p, lo.TTL, lo.Renew, lo.Drift))
		}
	}
	for _, q := range o.Queues {
		share := ""
		if q.Reserved > 0 {
			share = fmt.Sprintf(", reserved %g", q.Reserved)
		}
		w := q.Weight
		if w == 0 {
			w = 1
		}
		lines = append(lines, fmt.Sprintf("  queue %s → %s: weight %g%s", q.Name, q.Target, w, share))
	}
	return strings.Join(lines, "\n"), nil
}

// relayFleet holds the leases of the targets that share a limit with
// other relays (a fleet block): one Redis connection, one redislease
// Coordinator, one lease.Holder per target. A nil *relayFleet is a relay
// without a fleet: its methods do nothing.
type relayFleet struct {
	conn    *redisstore.Conn
	member  string
	leases  []config.Lease
	holders []*lease.Holder // in the order of leases
	fleet   *config.Fleet   // as loaded: a reload must not change it

	cancel  context.CancelFunc
	running sync.WaitGroup // the Holders' Run
}

// openFleet dials the fleet's Redis and makes a Holder per fleet target;
// nil when no target has a fleet block. A Redis down at start is no
// error: the relay starts, the Holders hold nothing until it answers, and
// the fleet's tasks wait.
func openFleet(cfg *config.File, log *slog.Logger) (*relayFleet, error) {
	leases := cfg.Leases()
	if len(leases) == 0 {
		return nil, nil
	}
	dial, err := cfg.RedisDialOptions(time.Now())
	if err != nil {
		return nil, err
	}
	conn, err := redisstore.Dial(dial)
	if err != nil {
		return nil, fmt.Errorf("relay: fleet.redis: %w", err) // redisstore's, which says what Redis refused
	}
	coord, err := redislease.New(redislease.Options{Client: conn, Prefix: cfg.Fleet.Prefix})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("relay: fleet: %w", err)
	}
	fl := &relayFleet{conn: conn, member: cfg.Fleet.Member, leases: leases, fleet: cfg.Fleet}
	if fl.member == "" {
		raw := make([]byte, 8)
		_, _ = rand.Read(raw)
		fl.member = "relay-" + hex.EncodeToString(raw)
	}
	for _, l := range leases {
		o := l.Options
		o.Coordinator, o.Member, o.Logger = coord, fl.member, log
		h, err := lease.New(o)
		if err != nil { // checked by config.Load, with the same options
			conn.Close()
			return nil, fmt.Errorf("relay: target %s: fleet: %w", l.Target, err)
		}
		fl.holders = append(fl.holders, h)
	}
	if !conn.Connected() {
		log.Warn("relay: the fleet's Redis does not answer yet: the targets sharing a limit send nothing until it does; connecting in the background",
			"redis", cfg.Fleet.Redis.Describe(time.Now()).String(), "targets", strings.Join(fl.targets(), ","))
	}
	return fl, nil
}

func (fl *relayFleet) targets() []string {
	names := make([]string, len(fl.leases))
	for i, l := range fl.leases {
		names[i] = l.Target
	}
	return names
}

// budgets gives each fleet target of o its Holder's share.
func (fl *relayFleet) budgets(o *relay.Options) {
	if fl == nil {
		return
	}
	for i, l := range fl.leases {
		for j := range o.Targets {
			if o.Targets[j].Name == l.Target {
				o.Targets[j].Budget = relay.HolderBudget(fl.holders[i])
			}
		}
	}
}

// same refuses a reloaded configuration whose fleet settings differ from
// the running ones: the leases are kept under them.
func (fl *relayFleet) same(cfg *config.File) error {
	var leases []config.Lease
	var fleet *config.Fleet
	if fl != nil {
		leases, fleet = fl.leases, fl.fleet
	}
	if !reflect.DeepEqual(cfg.Leases(), leases) || len(leases) > 0 && !reflect.DeepEqual(cfg.Fleet, fleet) {
		return fmt.Errorf("%s: the fleet settings changed (fleet:, a target's fleet block, or the limit it shares): restart the relay for that", cfg.Name())
	}
	return nil
}

// start runs the Holders until stop. Their context is ctx's values
// without its cancellation: a signal stops the relay first, and the
// Holders give their partitions back after it.
func (fl *relayFleet) start(ctx context.Context) {
	if fl == nil {
		return
	}
	ctx, fl.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, h := range fl.holders {
		fl.running.Go(func() { _ = h.Run(ctx) })
	}
}

// stop ends the Holders' Run, which give every partition back (within a
// second each), and waits for them. Idempotent.
func (fl *relayFleet) stop() {
	if fl == nil || fl.cancel == nil {
		return
	}
	fl.cancel()
	fl.running.Wait()
}

// close closes the Redis connection, after stop.
func (fl *relayFleet) close() {
	if fl != nil {
		fl.conn.Close()
	}
}

// logAttrs are the fleet's attributes of the "relay running" line: the
// member ID and each target's lease group.
func (fl *relayFleet) logAttrs() []any {
	if fl == nil {
		return nil
	}
	groups := make([]string, len(fl.leases))
	for i, l := range fl.leases {
		groups[i] = l.Target + ":" + l.Options.Limit.Name
	}
	return []any{"fleet_member", fl.member, "fleet_groups", strings.Join(groups, ",")}
}

// register exports the Holders' state on the relay's /metrics as
// sluice_lease_*, one series per lease group (limit="relay.<target>.<limit>").
func (fl *relayFleet) register(m *metrics.Metrics) error {
	if fl == nil {
		return nil
	}
	return m.RegisterLeases(func() []metrics.LeaseStats {
		out := make([]metrics.LeaseStats, len(fl.holders))
		for i, h := range fl.holders {
			out[i] = leaseMetrics(h.Group().Name, h.Stats())
		}
		return out
	})
}

// leaseMetrics are one Holder's figures: one key (the target's), none of
// a keyed store's failure-policy counts.
func leaseMetrics(group string, s lease.Stats) metrics.LeaseStats {
	unreachable := 0
	if !s.Reachable {
		unreachable = 1
	}
	return metrics.LeaseStats{
		Limit: group, Keys: 1, Held: s.Held, Usable: s.Usable, Quarantined: s.Quarantined, Unreachable: unreachable,
		Acquired: s.Acquired, Released: s.Released, Lost: s.Lost, Fenced: s.Fenced, Quarantine: s.Quarantine,
		Syncs: s.Syncs, SyncErrors: s.SyncErrors,
	}
}
