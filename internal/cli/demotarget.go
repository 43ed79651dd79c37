package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/net/netutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/memstore"
)

type demoTargetFlags struct {
	listen string
	rate   float64
	burst  float64
	policy bool
}

func newDemoTargetCmd() *cobra.Command {
	var f demoTargetFlags
	cmd := &cobra.Command{
		Use:   "demo-target [--listen ADDR] [--rate N] [--burst B]",
		Short: "run a rate-limited HTTP service to try the relay against",
		Long: `A stand-in for a rate-limited API, to try sluice relay on one machine: every request is
counted against one global limit of --rate per second (sluice's own HTTP middleware, GCRA
with --burst); allowed ones get 200 with a short JSON body, the rest 429 with Retry-After
and the RateLimit fields, as a real API would answer. Every --every it logs what it
received. Loopback by default; it is a demo, not a server to expose.`,
		GroupID:           groupTools,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			return runDemoTarget(c.Context(), f, c.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8702", "the `ADDR` to listen on")
	fs.Float64Var(&f.rate, "rate", 50, "the requests per second the service allows")
	fs.Float64Var(&f.burst, "burst", 5, "the requests above the rate it allows at once")
	fs.BoolVar(&f.policy, "policy", true, "send RateLimit-Policy and RateLimit on every answer (false: only 429 and Retry-After)")
	return cmd
}

func runDemoTarget(ctx context.Context, f demoTargetFlags, stderr io.Writer) error {
	if err := configfile.CheckAddr(f.listen); err != nil {
		return usagef("--listen: %v", err)
	}
	limit := sluice.Limit{Name: "demo", Algorithm: sluice.GCRA, Quota: f.rate, Window: time.Second, Burst: max(1, f.burst)}
	if err := limit.Validate(); err != nil {
		return usagef("--rate %g --burst %g: %v", f.rate, f.burst, err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	mw, err := httplimit.New(httplimit.Options{Limiter: store, Rules: []httplimit.Rule{{
		Name: "demo", Quotas: []httplimit.Quota{{Limit: limit, Key: httplimit.Key{Kind: httplimit.Global}}},
	}}})
	if err != nil {
		return err
	}
	var allowed, total atomic.Uint64
	handler := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		allowed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, "{\"ok\":true,\"n\":%d}\n", allowed.Load())
	}))
	counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		total.Add(1)
		if !f.policy {
			w = stripPolicy{w}
		}
		handler.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("demo-target: %w", err)
	}
	srv := &http.Server{Handler: counting, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	log.Info("demo target listening", "addr", ln.Addr().String(), "rate", f.rate, "burst", limit.Burst)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(netutil.LimitListener(ln, 1024)) }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var lastAllowed, lastTotal uint64
	for {
		select {
		case <-ctx.Done():
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
			<-done
			return nil
		case err := <-done:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		case <-tick.C:
			a, tt := allowed.Load(), total.Load()
			if tt != lastTotal {
				log.Info("demo target", "allowed_per_second", float64(a-lastAllowed)/5, "throttled_per_second", float64((tt-lastTotal)-(a-lastAllowed))/5, "allowed", a, "throttled", tt-a)
			}
			lastAllowed, lastTotal = a, tt
		}
	}
}

// stripPolicy drops the RateLimit fields: a target that says nothing of
// its limit but 429 and Retry-After.
type stripPolicy struct{ http.ResponseWriter }

func (s stripPolicy) WriteHeader(code int) {
	s.Header().Del("RateLimit-Policy")
	s.Header().Del("RateLimit")
	s.ResponseWriter.WriteHeader(code)
}

func (s stripPolicy) Write(b []byte) (int, error) {
	s.Header().Del("RateLimit-Policy")
	s.Header().Del("RateLimit")
	return s.ResponseWriter.Write(b)
}
