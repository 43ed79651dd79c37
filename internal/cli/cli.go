// Package cli implements the sluice command's subcommands. main only calls
// Main; everything here writes to the writers it is given, so tests run it
// in process.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed
	exitUsage = 2 // bad arguments
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"try", "play a limit against a stream of requests on a simulated clock", runTry},
		{"serve", "run the decision service (Envoy RLS over gRPC, JSON over HTTP)", runServe},
		{"gateway", "run the rate-limiting reverse proxy in front of an upstream", runGateway},
		{"check", "validate a configuration file", runCheck},
		{"version", "print the version", runVersion},
	}
}

// Main runs the subcommand named by args[0] and returns the exit code.
// Long-running commands stop when ctx ends (main ends it on SIGINT or
// SIGTERM).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "sluice: rate limiting for both sides of an API.")
	fmt.Fprintln(w, "\nUsage: sluice <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `sluice <command> -h` for a command's flags.")
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	fmt.Fprintln(stdout, "sluice", version())
	return exitOK
}

// version is the module version, or the VCS revision of a source build.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		v = "devel " + rev[:min(12, len(rev))] + modified
	}
	return strings.TrimSpace(v + " " + info.GoVersion)
}
