package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/internal/tlsconfig"
	"github.com/sluicehq/sluice/redislease"
)

// This file is the only one of the package that knows the gateway's
// configuration: loadGateway and checkGateway are its two uses.

// gatewayFlags are sluice gateway's flags.
type gatewayFlags struct {
	config, upstream string
}

func newGatewayCmd() *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway --config FILE [--upstream URL]",
		Short: "run the rate-limiting reverse proxy in front of an upstream",
		Long: `A rate-limiting reverse proxy: enforces the file's rules, proxies what they allow to the
upstream, answers the rest with 429. Logs JSON to stderr; stops gracefully on SIGINT or
SIGTERM. Check a configuration first with sluice check.`,
		GroupID:           groupServices,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			if f.config == "" {
				return usagef("--config is required: the gateway's YAML configuration file")
			}
			return runGateway(c.Context(), f.config, f.upstream, c.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "the gateway's YAML configuration `FILE` (required; sluice check validates it)")
	fs.StringVar(&f.upstream, "upstream", "", "the upstream requests are proxied to: an http:// or https:// `URL` with a host and no user information (default: upstream: in the file)")
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	return cmd
}

// runGateway loads the configuration at path and runs the gateway in
// front of upstream (the file's when empty) until ctx ends, logging JSON
// to stderr; SIGHUP reloads its TLS files.
func runGateway(ctx context.Context, path, upstream string, stderr io.Writer) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	hup, stopHangups := hangups(ctx) // before New, which may wait for Redis
	defer stopHangups()
	g, err := gateway.New(gateway.Options{Config: cfg, Upstream: upstream, Logger: log})
	if err != nil {
		return err
	}
	rctx, stopReloads := context.WithCancel(ctx)
	reloads := make(chan struct{})
	go func() {
		defer close(reloads)
		for {
			select {
			case <-rctx.Done():
				return
			case <-hup:
				_ = g.ReloadTLS() // logged by the gateway
			}
		}
	}()
	defer func() { stopReloads(); <-reloads }()
	if err := g.Run(ctx); err != nil {
		log.Error("gateway failed", "err", err)
		return errReported
	}
	return nil
}

// checkGateway validates the gateway configuration at path, with every
// check the gateway runs at start (gateway.Check), and describes it in a
// line. A file without upstream: is valid: sluice gateway --upstream gives
// it.
func checkGateway(path string) (string, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return "", err
	}
	if err := gateway.Check(gateway.Options{Config: cfg}); err != nil && !errors.Is(err, gateway.ErrNoUpstream) {
		return "", err
	}
	lines := []string{fmt.Sprintf("%s: ok (%d limits, %d rules, %s store, for sluice gateway)", path, len(cfg.Limits), len(cfg.Rules), cfg.Store.Kind)}
	now := time.Now()
	for _, l := range []struct {
		name string
		tls  tlsconfig.Server
	}{{"listen", cfg.TLS}, {"admin", cfg.Admin.TLS}} {
		if l.tls.Enabled() {
			sum, _ := l.tls.Check(now) // checked by gateway.Check
			auth := "client certificates not asked"
			if l.tls.ClientCAFile != "" {
				auth = "client certificates required"
			}
			lines = append(lines, fmt.Sprintf("  tls (%s): %s; %s", l.name, sum, auth))
		}
	}
	if cfg.TLS.Enabled() && !cfg.Admin.TLS.Enabled() && !cfg.Admin.Token().IsZero() {
		lines = append(lines, "  warning: the gateway's listener is TLS but the admin listener is clear text: its token travels in clear text (set admin.tls, or keep admin.listen on loopback)")
	}
	if cfg.Store.Kind == "redis" {
		lines = append(lines, "  redis: "+cfg.Store.Redis.Connection.Describe(now).String())
	}
	if l := cfg.Store.Leases; l != nil {
		lines = append(lines, fmt.Sprintf("  leases: %s, decided in process on partitions leased in Redis under %q", strings.Join(l.Names(), ", "), cmp.Or(l.Prefix, redislease.DefaultPrefix)))
	}
	return strings.Join(lines, "\n"), nil
}
