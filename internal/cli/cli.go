// Package cli implements the sluice command: its subcommands, their flags,
// help, version and shell completion, on github.com/spf13/cobra. main only
// calls Main; everything here writes to the writers it is given, so tests
// run it in process.
//
// Flags are spelled --name (pflag's spelling, shown in every help) or
// -name (Go's flag package's, which sluice used before cobra): Main turns
// the second into the first. No command has one-letter flags to combine,
// so the two spellings cannot be confused.
//
// A usage error (an unknown command or flag, a missing or extra argument, a
// bad value) prints one line saying what was wrong, then a pointer to the
// command's --help, to stderr, and exits 2. A command that fails at run time
// exits 1. Help goes to stdout and exits 0.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed
	exitUsage = 2 // bad arguments
)

// Command groups in the root's help.
const (
	groupServices = "services"
	groupTools    = "tools"
)

// Main runs the command line args (without the program name) and returns
// the exit code. Long-running commands stop when ctx ends (main ends it on
// SIGINT or SIGTERM). Main is safe to call from several goroutines at once:
// each call builds its own commands.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(longFlags(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	return report(cmd, err, stderr)
}

// newRoot builds the command tree, writing to stdout and stderr.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice <command> [flags]",
		Short: "rate limiting for both sides of an API",
		Long:  "sluice: rate limiting for both sides of an API.",
		// A command is needed: the root's RunE says so, and names an
		// unknown one (with cobra's suggestions).
		Args:    cobra.ArbitraryArgs,
		RunE:    runGroup,
		Version: version(debug.ReadBuildInfo()),
		// Main prints errors and usage itself (report), once.
		SilenceErrors:     true,
		SilenceUsage:      true,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("sluice {{.Version}}\n")
	root.Flags().BoolP("version", "v", false, "print the version, as sluice version does")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(inWords(err)) })
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { writeHelp(c.OutOrStdout(), c) })
	root.SetUsageFunc(func(c *cobra.Command) error { writeHelp(c.ErrOrStderr(), c); return nil })

	root.AddGroup(&cobra.Group{ID: groupServices, Title: "Services:"}, &cobra.Group{ID: groupTools, Title: "Tools:"})
	root.AddCommand(newServeCmd(), newGatewayCmd(), newRelayCmd(), newDemoTargetCmd(), newEnqueueCmd(), newCheckCmd(), newTryCmd(), newSimCmd(), newVersionCmd())
	root.SetHelpCommand(newHelpCmd(root))
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" { // cobra's: in our words, and a shell it lacks is a usage error
			c.Use, c.Short = "completion <shell>", "print the shell completion script for bash, zsh, fish or powershell"
			c.Args, c.RunE = cobra.ArbitraryArgs, runGroup
		}
	}
	markUsageErrors(root)
	return root
}

// runGroup runs a command that only holds subcommands: without one it is a
// usage error that shows the command's help; with an unknown one, a usage
// error naming it.
func runGroup(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return unknownCommand(c, args[0])
	}
	return &usageError{err: errors.New("a command is needed"), showHelp: true}
}

// unknownCommand is the usage error for a name that is no subcommand of c,
// with cobra's suggestions of the names it is close to.
func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default
	}
	if s := c.SuggestionsFor(name); len(s) > 0 {
		msg += "\n\nDid you mean this?"
		for _, name := range s {
			msg += "\n\t" + name
		}
		msg += "\n"
	}
	return &usageError{err: errors.New(msg), pointTo: c}
}

// usageError is a mistake in the command line (exit 2): the message says
// what was wrong; then comes a pointer to pointTo's --help (the failing
// command's when nil), or its whole help when showHelp is set.
type usageError struct {
	err      error
	pointTo  *cobra.Command
	showHelp bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// inWords is a flag's parse error said in the flag's terms: the flag, the
// value given and what it must be — not the Go function that refused it
// (pflag's `invalid argument "x" for "--n" flag: strconv.ParseInt: ...`).
func inWords(err error) error {
	ive, ok := errors.AsType[*pflag.InvalidValueError](err)
	if !ok {
		return err
	}
	f := ive.GetFlag()
	var want string
	switch f.Value.Type() {
	case "int", "int64", "uint", "uint64":
		want = "not a whole number"
	case "float64":
		want = "not a number"
	case "duration":
		want = "not a duration; write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h)"
	case "bool":
		want = "true or false"
	default:
		return fmt.Errorf("--%s: %w", f.Name, errors.Unwrap(ive)) // the flag's own type says the value and the rule
	}
	return fmt.Errorf("--%s %q: %s", f.Name, ive.GetValue(), want)
}

// usage marks err as a usage error (it is returned as is if it is one).
func usage(err error) error {
	if _, ok := errors.AsType[*usageError](err); ok {
		return err
	}
	return &usageError{err: err}
}

// usagef is a usage error with a formatted message.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// errReported ends a command with exit 1 after it has said why itself
// (in its JSON log).
var errReported = errors.New("failed; see the log")

// markUsageErrors makes every argument check in the tree, cobra's (the
// completion commands') and ours, return usage errors.
func markUsageErrors(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usage(err)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markUsageErrors(sub)
	}
}

// report prints err, as returned by cmd, and returns the exit code.
func report(cmd *cobra.Command, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errReported):
		return exitError
	}
	u, ok := errors.AsType[*usageError](err)
	if !ok {
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		return exitError
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), u.err)
	switch {
	case u.showHelp:
		fmt.Fprintln(stderr)
		writeHelp(stderr, cmd)
	case u.pointTo != nil:
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", u.pointTo.CommandPath())
	default:
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return exitUsage
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Long: `Prints sluice's version: the module version, or (devel) for a build from a source tree;
the Go version it was built with; and, when the build recorded one, the VCS revision
(+dirty: with local changes). sluice --version prints the same.`,
		GroupID:           groupTools,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(c.OutOrStdout(), "sluice", c.Root().Version)
			return err
		},
	}
}

// version says which build this is, from its build information (ok false:
// none): the main module's version ("(devel)" for a build from a source
// tree), the Go version and, when the build recorded it, the VCS revision
// (its first 12 digits; +dirty: with local changes).
func version(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "(devel) " + runtime.Version()
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	goVersion := info.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	v += " " + goVersion
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " revision " + rev + dirty
	}
	return v
}

// noArgs is the argument check of a command that takes none.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q (this command takes flags only)", args[0])
	}
	return nil
}

// enumNames lists the names of an enumeration's values 0, 1, … up to
// the first one its MarshalText refuses (sluice.Algorithm's,
// sluice.FailurePolicy's): the names its UnmarshalText reads.
func enumNames[E interface {
	~uint8
	MarshalText() ([]byte, error)
}]() []string {
	var names []string
	for e := E(0); ; e++ {
		name, err := e.MarshalText()
		if err != nil {
			return names
		}
		names = append(names, string(name))
		if e == math.MaxUint8 {
			return names
		}
	}
}
