package cli

import (
	"io"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// commandPaths are the paths (without "sluice") of every command a user can
// run, the root's included, with their flags' names.
func commandPaths(t *testing.T) map[string][]string {
	t.Helper()
	paths := map[string][]string{}
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		var flags []string
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { flags = append(flags, f.Name) })
		paths[strings.Join(path, " ")] = append(flags, "help")
		for _, sub := range listed(c) {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	walk(newRoot(io.Discard, io.Discard), nil)
	for _, want := range []string{"", "serve", "gateway", "relay", "enqueue", "demo-target", "check", "try", "sim", "version", "help", "completion", "completion bash", "completion zsh", "completion fish", "completion powershell"} {
		if _, ok := paths[want]; !ok {
			t.Fatalf("no command %q in %v", want, slices.Sorted(mapKeys(paths)))
		}
	}
	return paths
}

func mapKeys(m map[string][]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Every command's help, asked either way, is on stdout, exits 0 and lists
// every flag of the command.
func TestHelpOfEveryCommand(t *testing.T) {
	t.Parallel()
	for path, flags := range commandPaths(t) {
		words := strings.Fields(path)
		for _, args := range [][]string{append(slices.Clone(words), "--help"), append(slices.Clone(words), "-h"), append([]string{"help"}, words...)} {
			code, out, errOut := run(args...)
			if code != 0 || errOut != "" {
				t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
				continue
			}
			if want := "Usage: " + strings.TrimSpace("sluice "+path); !strings.HasPrefix(out, want) {
				t.Errorf("%q: help does not start with %q:\n%s", args, want, out)
			}
			for _, f := range flags {
				if !regexp.MustCompile(`(?m)^  (-\w, )?\s*--` + f + `\b`).MatchString(out) {
					t.Errorf("%q: help does not list --%s:\n%s", args, f, out)
				}
			}
		}
	}
}

// The root's help lists the commands by group, and `sluice help` is it.
func TestRootHelp(t *testing.T) {
	t.Parallel()
	_, out, _ := run("--help")
	for _, want := range []string{
		"Usage: sluice <command> [flags]\n\nsluice: rate limiting for both sides of an API.\n",
		"\nServices:\n  gateway      run the rate-limiting reverse proxy in front of an upstream\n  relay        run the relay: accept work for rate-limited targets, deliver it at their pace\n  serve        run the decision service",
		"\nTools:\n  check        validate a configuration file",
		"\n  enqueue      load a file of tasks",
		"\nOther commands:\n  completion   print the shell completion script",
		"  -v, --version   print the version",
		"Run 'sluice help <command>' (or 'sluice <command> --help') for a command's help.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("root help lacks %q:\n%s", want, out)
		}
	}
	if _, help, _ := run("help"); help != out {
		t.Errorf("sluice help:\n%s\nwant sluice --help's:\n%s", help, out)
	}
}

// Every flag of sluice's own commands names its default (pflag prints a
// non-zero one; the help text says a zero one) or says it is required.
func TestFlagsNameTheirDefault(t *testing.T) {
	t.Parallel()
	// A flag's line starts "  -x, --name" or "      --name"; a description
	// wrapped onto a line that starts with a flag's name is indented more.
	flagLine := regexp.MustCompile(`^  (-\w, |    )--([a-z-]+)`)
	for _, cmd := range []string{"serve", "gateway", "relay", "enqueue", "demo-target", "check", "try"} {
		_, out, _ := run(cmd, "--help")
		_, flags, _ := strings.Cut(out, "\nFlags:\n")
		var name, text string
		checkFlag := func() {
			if name != "" && name != "help" && !strings.Contains(text, "(default") && !strings.Contains(text, "(required") {
				t.Errorf("sluice %s --%s names no default: %q", cmd, name, text)
			}
		}
		for line := range strings.SplitSeq(flags, "\n") {
			if m := flagLine.FindStringSubmatch(line); m != nil {
				checkFlag()
				name, text = m[2], ""
			}
			text += line
		}
		checkFlag()
	}
}

// pflag reads a back-quoted word of a flag's help as the name of its value:
// each flag's value has the name it was given, and none is a sentence.
func TestFlagValueNames(t *testing.T) {
	t.Parallel()
	_, out, _ := run("gateway", "--help")
	for _, want := range []string{"--config FILE ", "--upstream URL "} {
		if !strings.Contains(out, want) {
			t.Errorf("gateway help lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = run("serve", "--help")
	out = strings.Join(strings.Fields(out), " ") // as wrapped
	for _, want := range []string{"--config FILE|DIR the", "--http-addr HOST:PORT the", "--grpc-call-timeout duration end", "(default \"127.0.0.1:8080\")", "(default 64)"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve help lacks %q:\n%s", want, out)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	_, want, _ := run("version")
	if !strings.HasPrefix(want, "sluice ") || strings.Count(want, "\n") != 1 {
		t.Fatalf("sluice version: %q", want)
	}
	for _, flag := range []string{"--version", "-v", "-version"} {
		if code, out, errOut := run(flag); code != 0 || out != want || errOut != "" {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want exit 0, %q", flag, code, out, errOut, want)
		}
	}
}

func TestVersionString(t *testing.T) {
	t.Parallel()
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, c := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3 go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "(devel) go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8"}, "(devel) go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", "c2c01f7fa81a0123456789", "vcs.modified", "false")},
			"(devel) go1.26.8 revision c2c01f7fa81a"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.4-0.20260101000000-c2c01f7fa81a+dirty"}, Settings: settings("vcs.revision", "c2c01f7fa81a0123456789", "vcs.modified", "true")},
			"v1.2.4-0.20260101000000-c2c01f7fa81a+dirty go1.26.8 revision c2c01f7fa81a+dirty"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Settings: settings("vcs.revision", "abc")}, "(devel) go1.26.8 revision abc"},
	} {
		if got := version(c.info, true); got != c.want {
			t.Errorf("version(%+v) = %q, want %q", c.info, got, c.want)
		}
	}
	if got := version(nil, false); !strings.HasPrefix(got, "(devel) go") {
		t.Errorf("version without build information = %q", got)
	}
}

// A usage error is one line saying what was wrong, then the pointer to
// --help, on stderr, exit 2; stdout stays empty.
func TestUsageErrorFirstLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args  []string
		first string
		help  string // the command the pointer names
	}{
		{[]string{"serve", "--fo"}, "sluice serve: unknown flag: --fo", "sluice serve"},
		{[]string{"serve", "-fo"}, "sluice serve: unknown flag: --fo", "sluice serve"},
		{[]string{"serve", "-x"}, "sluice serve: unknown shorthand flag: 'x' in -x", "sluice serve"},
		{[]string{"serve"}, "sluice serve: --config is required: an envoyproxy/ratelimit YAML file, or a directory of them", "sluice serve"},
		{[]string{"serve", "--config", dir, "extra"}, `sluice serve: unexpected argument "extra" (this command takes flags only)`, "sluice serve"},
		{[]string{"serve", "--config"}, "sluice serve: flag needs an argument: --config", "sluice serve"},
		{[]string{"serve", "--config", dir, "--max-connections", "many"}, `sluice serve: --max-connections "many": not a whole number`, "sluice serve"},
		{[]string{"serve", "--config", dir, "--on-redis-failure", "retry"}, `sluice serve: --on-redis-failure: unknown failure policy "retry": want fail_open, fail_closed or fail_local`, "sluice serve"},
		{[]string{"serve", "--config", dir, "--key-hmac-file", "k"}, "sluice serve: --key-hmac-file configures the Redis connection: give --redis (or --redis-sentinel-master) too", "sluice serve"},
		{[]string{"serve", "--config", dir, "--max-connections", "0"}, "sluice serve: --max-connections 0: at least 1 (a bound cannot be switched off)", "sluice serve"},
		{[]string{"gateway"}, "sluice gateway: --config is required: the gateway's YAML configuration file", "sluice gateway"},
		{[]string{"gateway", "--config", "x.yaml", "y.yaml"}, `sluice gateway: unexpected argument "y.yaml" (this command takes flags only)`, "sluice gateway"},
		{[]string{"check"}, "sluice check: a file to check is needed: sluice check FILE (or --config FILE)", "sluice check"},
		{[]string{"check", "a.yaml", "b.yaml"}, "sluice check: one file or directory to check, not 2", "sluice check"},
		{[]string{"check", "--config", "a.yaml", "b.yaml"}, "sluice check: the file to check is given twice: as the argument and with --config", "sluice check"},
		{[]string{"try", "--every", "5"}, `sluice try: --every "5": not a duration; write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h)`, "sluice try"},
		{[]string{"try", "--quota", "-1"}, `sluice try: sluice: invalid limit "try": quota -1: must be a positive finite number between 0.000001 and 4.5e9`, "sluice try"},
		{[]string{"try", "--cost", "0", "--requests", "1"}, `sluice try: sluice: invalid cost: cost 0 for limit "try": must be a positive finite number`, "sluice try"},
		{[]string{"version", "now"}, `sluice version: unexpected argument "now" (this command takes flags only)`, "sluice version"},
		{[]string{"completion", "bash", "extra"}, `sluice completion bash: unknown command "extra" for "sluice completion bash"`, "sluice completion bash"},
		{[]string{"--fo"}, "sluice: unknown flag: --fo", "sluice"},
	} {
		code, out, errOut := run(c.args...)
		lines := strings.Split(errOut, "\n")
		if code != 2 || len(lines) != 3 || lines[0] != c.first || lines[1] != "Run '"+c.help+" --help' for usage." || (c.args[0] != "try" && out != "") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q;\nwant exit 2, stderr %q then the pointer to %s --help", c.args, code, out, errOut, c.first, c.help)
		}
	}
}

// A name that is no command is a usage error with cobra's suggestions,
// run or asked help for.
func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args         []string
		first, after string
	}{
		{[]string{"serv"}, `sluice: unknown command "serv" for "sluice"`, "\n\nDid you mean this?\n\tserve\n\nRun 'sluice --help' for usage.\n"},
		{[]string{"chek", "x.yaml"}, `sluice: unknown command "chek" for "sluice"`, "\n\nDid you mean this?\n\tcheck\n\nRun 'sluice --help' for usage.\n"},
		{[]string{"frobnicate"}, `sluice: unknown command "frobnicate" for "sluice"`, "\nRun 'sluice --help' for usage.\n"},
		{[]string{"help", "gatway"}, `sluice help: unknown command "gatway" for "sluice"`, "\n\nDid you mean this?\n\tgateway\n\nRun 'sluice --help' for usage.\n"},
		{[]string{"help", "serve", "now"}, `sluice help: unknown command "now" for "sluice serve"`, "\nRun 'sluice serve --help' for usage.\n"},
		{[]string{"completion", "fishh"}, `sluice completion: unknown command "fishh" for "sluice completion"`, "\n\nDid you mean this?\n\tfish\n\nRun 'sluice completion --help' for usage.\n"},
	} {
		code, out, errOut := run(c.args...)
		if code != 2 || out != "" || errOut != c.first+c.after {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, stderr %q", c.args, code, out, errOut, c.first+c.after)
		}
	}
}

// A command that only holds subcommands, run without one, says so and
// shows its help, on stderr, exit 2.
func TestMissingCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ args []string }{{nil}, {[]string{"completion"}}} {
		code, out, errOut := run(c.args...)
		path := strings.TrimSpace("sluice " + strings.Join(c.args, " "))
		if want := path + ": a command is needed\n\nUsage: " + path + " "; code != 2 || out != "" || !strings.HasPrefix(errOut, want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, stderr starting %q", c.args, code, out, errOut, want)
		}
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash":       "# bash completion V2 for sluice",
		"zsh":        "#compdef sluice",
		"fish":       "# fish completion for sluice",
		"powershell": "# powershell completion for sluice",
	} {
		if code, out, errOut := run("completion", shell); code != 0 || errOut != "" || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, stdout %.200q; want it to contain %q", shell, code, errOut, out, want)
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", ""}, []string{"check", "completion", "demo-target", "enqueue", "gateway", "help", "relay", "serve", "sim", "try", "version"}},
		{[]string{"__completeNoDesc", "se"}, []string{"serve"}},
		{[]string{"__complete", "help", "g"}, []string{"gateway"}},
		{[]string{"__complete", "try", "--alg"}, []string{"--algorithm"}},
		{[]string{"__complete", "try", "-alg"}, nil}, // a one-dash word is left to cobra: no flag of that shorthand
		{[]string{"__complete", "try", "--algorithm", ""}, []string{"token_bucket", "gcra", "fixed_window", "sliding_log", "sliding_window", "leaky_bucket", "concurrency"}},
		{[]string{"__complete", "serve", "--on-redis-failure", "fail_"}, []string{"fail_open", "fail_closed", "fail_local"}},
	} {
		code, out, _ := run(c.args...)
		var got []string
		for line := range strings.SplitSeq(out, "\n") {
			if line != "" && !strings.HasPrefix(line, ":") {
				name, _, _ := strings.Cut(line, "\t")
				got = append(got, name)
			}
		}
		if code != 0 || !slices.Equal(got, c.want) {
			t.Errorf("%q: exit %d, completions %q, want %q:\n%s", c.args, code, got, c.want, out)
		}
	}
}

// Go's one-dash spelling of a flag becomes pflag's; values, shorthands,
// and what follows -- stay as they are.
func TestLongFlags(t *testing.T) {
	t.Parallel()
	root := newRoot(io.Discard, io.Discard)
	for _, c := range []struct{ in, want string }{
		{"try -quota 2 -window=1s", "try --quota 2 --window=1s"},
		{"try -quota -1 -every -5s", "try --quota -1 --every -5s"},
		{"try --quota -1", "try --quota -1"},
		{"serve -config -weird -response-headers -redis x", "serve --config -weird --response-headers --redis x"},
		{"serve -response-headers=false -grpc-addr :0", "serve --response-headers=false --grpc-addr :0"},
		{"serve -h -v -x", "serve -h -v -x"},
		{"serve -config a -- -config b", "serve --config a -- -config b"},
		{"serve -fo", "serve --fo"},
		{"-version", "--version"},
		{"check -config a.yaml - -1x", "check --config a.yaml - -1x"},
		{"__complete try -alg", "__complete try -alg"},
		{"", ""},
	} {
		if got := strings.Join(longFlags(root, strings.Fields(c.in)), " "); got != c.want {
			t.Errorf("longFlags(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
