package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// table gathers every round's result of every row.
type table struct {
	rows []*row
}

// row is one line of the table.
type row struct {
	impl, durable      string
	scenario, label    string
	note               string
	results            []result
	scenarioIdx, order int
}

func (t *table) add(s *suite, c testCase) {
	t.rows = append(t.rows, &row{
		impl: s.name, durable: s.durable, scenario: c.scenario, label: c.label, note: c.note,
		scenarioIdx: slices.Index(scenarios, c.scenario), order: len(t.rows),
	})
}

func (t *table) record(s *suite, c testCase, r result) {
	for _, w := range t.rows {
		if w.impl == s.name && w.scenario == c.scenario && w.label == c.label {
			w.results = append(w.results, r)
			return
		}
	}
}

// sorted returns the rows by scenario, then in the order added.
func (t *table) sorted() []*row {
	rows := slices.Clone(t.rows)
	slices.SortStableFunc(rows, func(a, b *row) int { return a.scenarioIdx - b.scenarioIdx })
	return rows
}

var columns = []string{"scenario", "impl", "how", "durable", "tasks/s (median)", "min–max", "p99", "cpu bench/server/machine", "notes"}

// cells formats a row. The figures are the median round's tasks/s (the
// lower of the two middle ones for an even count), the range of all
// rounds, the median of the rounds' p99s, and the median round's CPU.
func (w *row) cells() []string {
	c := []string{w.scenario, w.impl, w.label, w.durable, "—", "—", "—", "—", w.note}
	if len(w.results) == 0 {
		return c
	}
	rs := slices.Clone(w.results)
	slices.SortFunc(rs, func(a, b result) int {
		switch {
		case a.rate() < b.rate():
			return -1
		case a.rate() > b.rate():
			return 1
		}
		return 0
	})
	med := rs[(len(rs)-1)/2]
	c[4] = fmt.Sprintf("%.0f", med.rate())
	c[5] = fmt.Sprintf("%.0f–%.0f", rs[0].rate(), rs[len(rs)-1].rate())
	p99s := make([]time.Duration, 0, len(rs))
	var dry, errs int64
	var first error
	for _, r := range rs {
		if r.p99 > 0 {
			p99s = append(p99s, r.p99)
		}
		if r.dry {
			dry++
		}
		errs += r.errs
		if first == nil {
			first = r.first
		}
	}
	if len(p99s) > 0 {
		slices.Sort(p99s)
		c[6] = fmtDur(p99s[(len(p99s)-1)/2])
	}
	c[7] = med.cpu.String()
	var notes []string
	if w.note != "" {
		notes = append(notes, w.note)
	}
	if med.backlog > 0 {
		notes = append(notes, fmt.Sprintf("backlog %d", med.backlog))
	}
	if dry > 0 {
		notes = append(notes, fmt.Sprintf("RAN DRY in %d of %d rounds: a lower bound", dry, len(rs)))
	}
	if errs > 0 {
		notes = append(notes, fmt.Sprintf("%d errors, first: %v", errs, first))
	}
	c[8] = strings.Join(notes, "; ")
	return c
}

func (t *table) writeText(out io.Writer, header []string) error {
	for _, h := range header {
		fmt.Fprintln(out, h)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for _, w := range t.sorted() {
		fmt.Fprintln(tw, strings.Join(w.cells(), "\t"))
	}
	return tw.Flush()
}

func (t *table) writeMarkdown(out io.Writer, header []string) error {
	fmt.Fprintln(out, "# Durable queues: throughput")
	fmt.Fprintln(out)
	for _, h := range header {
		fmt.Fprintf(out, "- %s\n", strings.TrimSpace(h))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "| %s |\n", strings.Join(columns, " | "))
	fmt.Fprintf(out, "|%s\n", strings.Repeat("---|", len(columns)))
	for _, w := range t.sorted() {
		cells := w.cells()
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		fmt.Fprintf(out, "| %s |\n", strings.Join(cells, " | "))
	}
	_, err := fmt.Fprintln(out)
	return err
}

// header says what was measured, where and how.
func header(ctx context.Context, o options, tmp string, opened []*suite) []string {
	h := []string{
		fmt.Sprintf("queuebench %s: %d round(s) of %v each (after %v of warm-up), implementations alternating; %s, %d CPUs, GOMAXPROCS %d",
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.rounds, o.duration, o.warmup, runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0)),
		"command: queuebench " + strings.Join(o.args, " "),
		"data files (bbolt, sluice) in " + filesystem(ctx, tmp),
		"ingest-single: 64 goroutines, one task per call; ingest-batch: 8 goroutines, 100 tasks per call; p99 is a call's latency (ingest) or a task's from its lease's return to its ack's return (work); payloads are 64 bytes",
		"cpu: cores used by queuebench / by the servers (postgres, redis-server, nats-server) / by the whole machine in the median round",
	}
	for _, s := range opened {
		h = append(h, fmt.Sprintf("%s: %s", s.name, s.version))
	}
	return h
}

// filesystem describes dir's filesystem with df -T.
func filesystem(ctx context.Context, dir string) string {
	out, err := exec.CommandContext(ctx, "df", "-T", dir).Output()
	if err != nil {
		return dir + " (df -T: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 7 {
		return dir
	}
	return fmt.Sprintf("%s (df -T: %s, %s, mounted on %s)", dir, f[0], f[1], f[6])
}

// moduleVersion returns the version of a module built into queuebench.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Path
			}
			return d.Version
		}
	}
	return "?"
}
