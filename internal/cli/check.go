package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/server"
)

func newCheckCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "check FILE|DIR",
		Short: "validate a configuration file (of sluice serve or sluice gateway)",
		Long: `Validates a configuration without serving it, and says whose it is: sluice serve's
(envoyproxy/ratelimit's format: a file with a top-level domain, or a directory of them) or
sluice gateway's. Exits 1, with the file, the line and the reason, if it is not valid.`,
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
			summary, err := check(path)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(c.OutOrStdout(), summary)
			return err
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the configuration `FILE` or directory to check (default: the argument)")
	return cmd
}

// check validates the configuration at path, serve's or the gateway's, and
// describes it in a line.
func check(path string) (string, error) {
	if !isEnvoyConfig(path) {
		return checkGateway(path)
	}
	files, err := server.ConfigFiles(path)
	if err == nil {
		_, err = server.EnvoyLoader(path)()
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: ok (envoyproxy/ratelimit format, %d file(s), for sluice serve)", path, len(files)), nil
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
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, config.MaxFileSize+1))
	if err != nil || len(b) > config.MaxFileSize {
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
