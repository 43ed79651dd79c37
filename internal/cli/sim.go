package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/sim/simplot"
)

// simFlags are sluice sim's flags.
type simFlags struct {
	algorithms []string
	trace      string
	limit      string
	burst      float64
	instances  int
	cost       float64
	out        string
}

// simAlgorithms are the algorithms sluice sim replays by default: every
// one with a rate.
var simAlgorithms = []string{"token_bucket", "gcra", "fixed_window", "sliding_log", "sliding_window", "leaky_bucket"}

func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim --trace TRACE --limit RATE --out DIR [flags]",
		Short: "replay a trace through every algorithm on a virtual clock: a table and SVG plots",
		Long: "Replays a trace of requests through each algorithm (the library's own code, on a virtual clock) and\n" +
			"prints what each admitted, rejected and let through in any one window, and how it differs from the\n" +
			"exact sliding log; writes SVG plots of it to --out. Built-in traces: " + strings.Join(sim.Traces, ", ") + ";\n" +
			"or a CSV file of lines \"seconds,cost\".",
		GroupID:           groupTools,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			return f.run(c.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&f.algorithms, "algorithms", simAlgorithms, "the `ALGORITHMS` to replay, comma-separated")
	fs.StringVar(&f.trace, "trace", "", "a built-in `TRACE` ("+strings.Join(sim.Traces, ", ")+") or a CSV file's path (required)")
	fs.StringVar(&f.limit, "limit", "", "the limit's `RATE`, QUOTA/UNIT: 10/min, 100/s, 5/30s (required)")
	fs.Float64Var(&f.burst, "burst", 0, "capacity of token_bucket, gcra and leaky_bucket (default 0: the quota)")
	fs.IntVar(&f.instances, "instances", 1, "also replay on this many local limiters, each with the whole limit, against one shared")
	fs.Float64Var(&f.cost, "cost", 1, "cost of each request of a built-in trace, and of a CSV line without one")
	fs.StringVar(&f.out, "out", "", "the `DIR` the plots and table.txt go to, created with its parents if need be (required)")
	_ = cmd.RegisterFlagCompletionFunc("algorithms", cobra.FixedCompletions(simAlgorithms, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("trace", cobra.FixedCompletions(sim.Traces, cobra.ShellCompDirectiveDefault))
	return cmd
}

// run validates everything, replays, draws every plot in memory and only
// then writes --out: a bad input leaves it untouched.
func (f *simFlags) run(stdout io.Writer) error {
	switch {
	case f.trace == "":
		return usagef("--trace is required: one of %s, or a CSV file's path", strings.Join(sim.Traces, ", "))
	case f.limit == "":
		return usagef("--limit is required: QUOTA/UNIT, as 10/min")
	case f.out == "":
		return usagef("--out is required: the directory the plots go to")
	case f.instances < 1 || f.instances > 10_000:
		return usagef("--instances %d: must be between 1 and 10000", f.instances)
	}
	quota, window, err := sim.ParseRate(f.limit)
	if err != nil {
		return usagef("--limit: %v", strings.TrimPrefix(err.Error(), "sim: "))
	}
	c := sim.Config{Quota: quota, Window: window, Burst: f.burst, Instances: f.instances}
	for _, name := range f.algorithms {
		var a sluice.Algorithm
		if err := a.UnmarshalText([]byte(name)); err != nil || a == sluice.Concurrency {
			return usagef("--algorithms: unknown algorithm %q (want some of %s)", name, strings.Join(simAlgorithms, ", "))
		}
		if slices.Contains(c.Algorithms, a) {
			return usagef("--algorithms: %s is given twice", name)
		}
		c.Algorithms = append(c.Algorithms, a)
	}
	trace, err := f.readTrace(quota, window)
	if err != nil {
		return err
	}
	r, err := sim.Replay(trace, c)
	if err != nil {
		return err
	}
	files := map[string][]byte{}
	for _, name := range simplot.Files(r) {
		if files[name], err = simplot.Draw(r, name); err != nil {
			return err
		}
	}
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		return err
	}
	files["table.txt"] = []byte(table.String())
	if err := writeDir(f.out, files); err != nil {
		return err
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range files {
			if !yield(filepath.Join(f.out, name)) {
				return
			}
		}
	})
	_, err = fmt.Fprintf(stdout, "%s\nwrote %s\n", table.String(), strings.Join(names, ", "))
	return err
}

// readTrace is the built-in trace --trace names, or the CSV file it is.
func (f *simFlags) readTrace(quota float64, window time.Duration) (sim.Trace, error) {
	if slices.Contains(sim.Traces, f.trace) {
		t, err := sim.Builtin(f.trace, quota, window, f.burst, f.cost, f.instances)
		if err != nil {
			return sim.Trace{}, usage(err)
		}
		return t, nil
	}
	file, err := os.Open(f.trace)
	if errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(f.trace, `/\.`) {
		return sim.Trace{}, usagef("--trace: unknown trace %q: not one of %s, nor a file", f.trace, strings.Join(sim.Traces, ", "))
	}
	if err != nil {
		return sim.Trace{}, fmt.Errorf("--trace: %w", err)
	}
	defer file.Close()
	return sim.ParseCSV(file, f.trace, f.cost)
}

// writeDir writes files into dir (created if missing) all or nothing as
// far as the file system allows: into a new directory beside it first,
// then renamed into place.
func writeDir(dir string, files map[string][]byte) error {
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer os.RemoveAll(tmp)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := os.Rename(tmp, dir); err == nil {
		return nil
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--out %s: not a directory", dir)
	}
	// An existing directory: file by file, once every target is known to
	// be a regular file or absent (a rename that would fail is refused
	// before any is made). Other files in it are left alone.
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		st, err := os.Lstat(filepath.Join(dir, name))
		if err == nil && !st.Mode().IsRegular() {
			return fmt.Errorf("--out %s: %s is not a regular file: nothing written", dir, name)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--out: %w", err)
		}
	}
	for _, name := range names {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	return nil
}
