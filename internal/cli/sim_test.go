package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestSimBoundary(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := run("sim", "--trace", "boundary", "--limit", "10/min", "--algorithms", "fixed_window,sliding_log", "--out", out)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := `trace boundary: 20 requests in 1m0.1s; limit 10 per 1m0s, burst 10 (token_bucket, gcra, leaky_bucket)

     algorithm  offered  admitted  rejected  most in a window  max delay  unlike sliding log
  fixed_window       20        20         0                20         0s                  10
   sliding_log       20        10        10                10         0s                   0

wrote ` + strings.Join([]string{filepath.Join(out, "admitted.svg"), filepath.Join(out, "rejected.svg"), filepath.Join(out, "remaining.svg"), filepath.Join(out, "table.txt")}, ", ") + "\n"
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	table, err := os.ReadFile(filepath.Join(out, "table.txt"))
	if err != nil || !strings.HasPrefix(stdout, string(table)) {
		t.Errorf("table.txt %q, %v: want the table printed", table, err)
	}
	// Into an existing directory, the files are replaced.
	if code, _, stderr := run("sim", "--trace", "boundary", "--limit", "10/min", "--out", out); code != 0 {
		t.Errorf("again into %s: exit %d, %s", out, code, stderr)
	}
}

// A CSV trace, fractional costs and local instances.
func TestSimCSV(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := writeFile(t, "trace.csv", "seconds,cost\n0,2.5\n0,2.5\n0,2.5\n0,2.5\n0,2.5\n2.5,2.5\n")
	code, stdout, stderr := run("sim", "--trace", trace, "--limit", "1/s", "--burst", "10", "--algorithms", "token_bucket", "--instances", "2", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d, %s", code, stderr)
	}
	for _, want := range []string{
		"   token_bucket        6         5         1                10         0s                   -",
		"token_bucket ×2 local        6         6         0              12.5         0s                   -",
		filepath.Join(dir, "instances.svg"),
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// Bad input: a message naming the problem (and the line), exit 2 for the
// flags and 1 for the file, and nothing written to --out.
func TestSimBadInput(t *testing.T) {
	t.Parallel()
	bad := writeFile(t, "bad.csv", "0\n1,1\n0.5\n")
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--trace", "boundary", "--limit", "10/min", "--algorithms", "token_bucket,bogus"}, 2, `unknown algorithm "bogus"`},
		{[]string{"--trace", "boundary", "--limit", "10/min", "--algorithms", "concurrency"}, 2, `unknown algorithm "concurrency"`},
		{[]string{"--trace", "bursty", "--limit", "10/min"}, 2, `unknown trace "bursty"`},
		{[]string{"--trace", "boundary", "--limit", "10/fortnight"}, 2, `--limit: rate "10/fortnight": unit "fortnight"`},
		{[]string{"--trace", "boundary", "--limit", "ten/min"}, 2, `quota "ten" is not a positive number`},
		{[]string{"--trace", "boundary"}, 2, "--limit is required"},
		{[]string{"--limit", "10/min"}, 2, "--trace is required"},
		{[]string{"--trace", "boundary", "--limit", "10/min", "--instances", "0"}, 2, "--instances 0"},
		{[]string{"--trace", bad, "--limit", "10/min"}, 1, bad + ":3: time 0.5 s is before the line before's (1 s)"},
		{[]string{"--trace", "missing.csv", "--limit", "10/min"}, 1, "missing.csv: no such file"},
		{[]string{"--trace", "boundary", "--limit", "10/min", "--cost", "2.5", "--algorithms", "sliding_log"}, 1, "sliding_log: request 1"},
		{[]string{"--trace", "boundary", "--limit", "10/min", "--burst", "-1"}, 1, "burst -1"},
	} {
		dir := filepath.Join(t.TempDir(), "out")
		code, stdout, stderr := run(append([]string{"sim", "--out", dir}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.says) || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d saying %q", c.args, code, stdout, stderr, c.code, c.says)
		}
		if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 0 {
			t.Errorf("%q: wrote %v", c.args, entries)
		}
	}
	// An existing --out where one of the files would land on a directory:
	// refused before any file is replaced.
	dir := t.TempDir()
	old := filepath.Join(dir, "admitted.svg")
	if err := os.WriteFile(old, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "table.txt", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run("sim", "--trace", "boundary", "--limit", "10/min", "--out", dir)
	if b, _ := os.ReadFile(old); code == 0 || string(b) != "old" || !strings.Contains(stderr, "table.txt is not a regular file") {
		t.Errorf("exit %d, stderr %q, admitted.svg %q; want refused with admitted.svg untouched", code, stderr, b)
	}
}

// docRuns are the runs of docs/algorithms.md, each into
// docs/algorithms/NAME.
var docRuns = []struct {
	name string
	args string
}{
	{"boundary", "--trace boundary --limit 10/min"},
	{"burst-then-idle", "--trace burst-then-idle --limit 1/s --burst 8"},
	{"poisson", "--trace poisson --limit 10/min"},
	{"on-off", "--trace on-off --limit 10/min"},
	{"adversarial", "--trace adversarial --limit 10/min"},
	{"instances", "--trace instances --limit 100/s --instances 10"},
}

// docBlock is a table of docs/algorithms.md: the command, then its table
// between markers that SLUICE_WRITE_DOCS rewrites.
var docBlock = regexp.MustCompile("(?s)<!-- sim ([a-z-]+) -->\n```text\n.*?```\n<!-- end -->")

// TestAlgorithmsDocUpToDate regenerates the plots and tables of
// docs/algorithms.md into a temporary directory and compares them with
// the checked-in ones. SLUICE_WRITE_DOCS=1 (make algorithms) writes them
// instead.
func TestAlgorithmsDocUpToDate(t *testing.T) {
	write := os.Getenv("SLUICE_WRITE_DOCS") != ""
	docs := filepath.Join("..", "..", "docs")
	md, err := os.ReadFile(filepath.Join(docs, "algorithms.md"))
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]string{}
	for _, r := range docRuns {
		checked := filepath.Join(docs, "algorithms", r.name)
		out := filepath.Join(t.TempDir(), r.name)
		if write {
			out = checked
		}
		args := append([]string{"sim"}, strings.Fields(r.args)...)
		if code, _, stderr := run(append(args, "--out", out)...); code != 0 {
			t.Fatalf("sluice sim %s: exit %d, %s", r.args, code, stderr)
		}
		cmd := "sluice sim " + r.args + " --out docs/algorithms/" + r.name
		if !bytes.Contains(md, []byte("$ "+cmd+"\n")) {
			t.Errorf("docs/algorithms.md does not show `$ %s`", cmd)
		}
		got, _ := os.ReadDir(out)
		want, _ := os.ReadDir(checked)
		if len(got) != len(want) {
			t.Errorf("%s: %d files, %d checked in: run make algorithms", r.name, len(got), len(want))
		}
		for _, e := range got {
			g, _ := os.ReadFile(filepath.Join(out, e.Name()))
			w, err := os.ReadFile(filepath.Join(checked, e.Name()))
			if !bytes.Equal(g, w) {
				t.Errorf("docs/algorithms/%s/%s is out of date (%v): run make algorithms", r.name, e.Name(), err)
			}
			if e.Name() == "table.txt" {
				tables[r.name] = string(g)
			}
		}
	}
	seen := map[string]bool{}
	fresh := docBlock.ReplaceAllFunc(md, func(b []byte) []byte {
		name := string(docBlock.FindSubmatch(b)[1])
		seen[name] = true
		return []byte("<!-- sim " + name + " -->\n```text\n" + tables[name] + "```\n<!-- end -->")
	})
	for _, r := range docRuns {
		if !seen[r.name] {
			t.Errorf("docs/algorithms.md has no table of %s (<!-- sim %s -->)", r.name, r.name)
		}
	}
	switch {
	case write:
		if err := os.WriteFile(filepath.Join(docs, "algorithms.md"), fresh, 0o644); err != nil {
			t.Fatal(err)
		}
	case !bytes.Equal(fresh, md):
		t.Error("docs/algorithms.md's tables are out of date: run make algorithms")
	}
}
