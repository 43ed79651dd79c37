package cli

import (
	"log/slog"
	"slices"
	"strings"

	"errors"
	"fmt"
	"os"
	"regexp"

	"github.com/spf13/pflag"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/server"
)

func newCheckCmd() *cobra.Command {
	var path string
	var serve serveFlags
	cmd := &cobra.Command{
		Use:   "check FILE|DIR [serve's flags]",
		Short: "validate a configuration file (of sluice serve, sluice gateway or sluice relay)",
		Long: `Validates a configuration without serving it, and says whose it is: sluice serve's
(envoyproxy/ratelimit's format: a file with a top-level domain, or a directory of them),
sluice relay's (a file with targets: and queues:) or sluice gateway's. Everything a start would check is checked, but for binding the listeners
and connecting to Redis: the files the configuration names (TLS certificates, keys and CAs:
readable, a certificate and its key that match, valid now; secret files and variables), and,
for sluice serve, the flags serve would be started with, given here the same way. What the
certificates and the Redis connection say is printed, with warnings (a certificate that
expires within 14 days). Exits 1, with the file, the line and the reason, if it is not valid.`,
		GroupID: groupTools,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return fmt.Errorf("one file or directory to check, not %d", len(args))
			case len(args) == 1 && path != "":
				return errors.New("the file to check is given twice: as the argument and with --config")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				path = args[0]
			}
			if path == "" {
				return usagef("a file to check is needed: sluice check FILE (or --config FILE)")
			}
			var summary string
			var err error
			switch {
			case isEnvoyConfig(path):
				serve.config = path
				summary, err = checkServe(&serve)
			case isRelayConfig(path):
				if name := changedServeFlag(c.Flags()); name != "" {
					return usagef("--%s is sluice serve's flag: %s is the relay's file", name, path)
				}
				summary, err = checkRelay(path)
			default:
				if name := changedServeFlag(c.Flags()); name != "" {
					return usagef("--%s is sluice serve's flag: %s is the gateway's file, which holds its own TLS, Redis and secret settings", name, path)
				}
				summary, err = checkGateway(path)
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(c.OutOrStdout(), summary)
			return err
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the configuration `FILE` or directory to check (default: the argument)")
	serve.register(cmd.Flags())
	return cmd
}

// changedServeFlag names a flag of serve's that was given, "" for none.
func changedServeFlag(fs *pflag.FlagSet) string {
	name := ""
	fs.Visit(func(f *pflag.Flag) {
		if f.Name != "config" && name == "" {
			name = f.Name
		}
	})
	return name
}

// checkServe validates a decision-service configuration and the flags
// serve would start with (server.Check), and describes them: a line, then
// one per TLS certificate and Redis connection.
func checkServe(f *serveFlags) (string, error) {
	opts, err := f.options(slog.New(slog.DiscardHandler))
	if err != nil {
		return "", err
	}
	checked, err := server.Check(opts)
	if err != nil {
		return "", redisFlagError(err)
	}
	files, err := server.ConfigFiles(f.config)
	if err != nil {
		return "", err
	}
	lines := []string{fmt.Sprintf("%s: ok (envoyproxy/ratelimit format, %d file(s), for sluice serve)", f.config, len(files))}
	if checked.TLS != nil {
		auth := "client certificates: not asked"
		if opts.TLS.ClientCAFile != "" {
			on := opts.ClientAuth
			if len(on) == 0 {
				on = []string{server.ListenerGRPC, server.ListenerHTTP, server.ListenerAdmin}
			}
			auth = "client certificates: required on " + strings.Join(on, ", ")
		}
		lines = append(lines, "  tls (grpc, http, admin): "+checked.TLS.String(), "  "+auth)
		if opts.TLS.ClientCAFile != "" && len(opts.ClientAuth) > 0 && !slices.Contains(opts.ClientAuth, server.ListenerHTTP) && !opts.NoJSON {
			lines = append(lines, "  warning: POST /json on the HTTP listener takes clients without a certificate, who can spend what Envoy's calls spend (--json=false leaves that listener to probes and metrics)")
		}
	}
	if opts.NoJSON {
		lines = append(lines, "  POST /json: off (the HTTP listener serves /healthz, /readyz and /metrics)")
	}
	if checked.Redis != nil {
		lines = append(lines, "  redis: "+checked.Redis.String())
	}
	return strings.Join(lines, "\n"), nil
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
	// Bounded: a file too large for either parser is refused by the
	// gateway's, which says so, without reading it whole here.
	b, err := configfile.ReadFile(path, config.MaxFileSize)
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

// isRelayConfig tells sluice relay's file: a top-level targets: or queues:
// (the gateway's has neither).
func isRelayConfig(path string) bool {
	b, err := configfile.ReadFile(path, config.MaxFileSize)
	if err != nil {
		return false
	}
	return relayTopLine.Match(b)
}

var relayTopLine = regexp.MustCompile(`(?m)^(targets|queues)\s*:`)
