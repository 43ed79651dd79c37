package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func run(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The seed's bucket (B=5, r=2/s) against a request every 100 ms: the five
// in the bucket and the one refilled by 500 ms pass.
func TestTrySeed(t *testing.T) {
	t.Parallel()
	code, out, errOut := run("try", "-quota", "2", "-window", "1s", "-burst", "5", "-requests", "8", "-every", "100ms")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"token_bucket 2 per 1s, burst 5", "500ms     allow          0", "600ms    reject        0.2        400ms", "6 of 8 allowed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTryNeverFits(t *testing.T) {
	t.Parallel()
	code, out, _ := run("try", "-algorithm", "fixed_window", "-quota", "3", "-cost", "4", "-requests", "1")
	if code != 0 || !strings.Contains(out, "reject") || !strings.Contains(out, "never") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"try", "-quota", "-1"}, "quota -1"},
		{[]string{"try", "-algorithm", "leaky"}, "unknown algorithm"},
		{[]string{"try", "-requests", "0"}, "-requests 0"},
		{[]string{"try", "-every", "-1s"}, "-every -1s"},
		{[]string{"try", "-requests", "10", "-every", "1000000h"}, "-every 1000000h0m0s: must be between 0 and 87600h0m0s"},
		{[]string{"try", "-cost", "0"}, "cost 0"},
		{[]string{"try", "extra"}, "unexpected argument"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{nil, "Usage: sluice <command>"},
	} {
		code, out, errOut := run(c.args...)
		if code != 2 || !strings.Contains(errOut+out, c.says) {
			t.Errorf("%q: exit %d, output %q; want exit 2 saying %q", c.args, code, errOut+out, c.says)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	t.Parallel()
	if code, out, _ := run("version"); code != 0 || !strings.HasPrefix(out, "sluice ") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
	if code, out, _ := run("help"); code != 0 || !strings.Contains(out, "try") {
		t.Fatalf("help: exit %d, %q", code, out)
	}
}
