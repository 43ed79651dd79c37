package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/server"
)

func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the configuration file (required; see `sluice check`)")
	upstream := fs.String("upstream", "", "the upstream URL requests are proxied to (overrides upstream: in the file)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice gateway --config FILE [--upstream URL]\n\nA rate-limiting reverse proxy: enforces the file's rules, proxies what they allow to the\nupstream, answers the rest with 429. Logs JSON to stderr; stops gracefully on SIGINT or SIGTERM.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, "sluice gateway:", err)
		return exitError
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	g, err := gateway.New(gateway.Options{Config: cfg, Upstream: *upstream, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "sluice gateway:", err)
		return exitError
	}
	if err := g.Run(ctx); err != nil {
		log.Error("gateway failed", "err", err)
		return exitError
	}
	return exitOK
}

func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the configuration file to validate (or give it as the argument)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *path == "" && fs.NArg() == 1 {
		*path = fs.Arg(0)
	} else if fs.NArg() > 0 {
		*path = ""
	}
	if *path == "" {
		fmt.Fprintln(stderr, "Usage: sluice check FILE (or --config FILE)")
		return exitUsage
	}
	if isEnvoyConfig(*path) {
		files, err := server.ConfigFiles(*path)
		if err == nil {
			_, err = server.EnvoyLoader(*path)()
		}
		if err != nil {
			fmt.Fprintln(stderr, "sluice check:", err)
			return exitError
		}
		fmt.Fprintf(stdout, "%s: ok (envoyproxy/ratelimit format, %d file(s), for sluice serve)\n", *path, len(files))
		return exitOK
	}
	cfg, err := config.Load(*path)
	if err == nil {
		// Every start-time check, as sluice gateway runs it; the
		// upstream may come from --upstream at start.
		if err = gateway.Check(gateway.Options{Config: cfg}); errors.Is(err, gateway.ErrNoUpstream) {
			err = nil
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice check:", err)
		return exitError
	}
	fmt.Fprintf(stdout, "%s: ok (%d limits, %d rules, %s store, for sluice gateway)\n", *path, len(cfg.Limits), len(cfg.Rules), cfg.Store.Kind)
	return exitOK
}

// isEnvoyConfig tells the decision service's files (envoyproxy/ratelimit's
// format: a directory of them, or a file with a top-level domain) from the
// gateway's.
func isEnvoyConfig(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	if fi.IsDir() {
		return true
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var top map[string]any
	if yaml.Unmarshal(b, &top) == nil {
		_, domain := top["domain"]
		_, descriptors := top["descriptors"]
		return domain || descriptors
	}
	// Not YAML that decodes as a mapping: a top-level "domain:" line still
	// says whose it is, so that its errors come from the right parser.
	return envoyDomainLine.Match(b)
}

var envoyDomainLine = regexp.MustCompile(`(?m)^domain\s*:`)
