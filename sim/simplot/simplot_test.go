package simplot

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sim"
)

func result(t *testing.T, instances int) *sim.Result {
	t.Helper()
	tr, err := sim.Builtin("on-off", 10, time.Second, 0, 1, instances)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Replay(tr, sim.Config{Quota: 10, Window: time.Second, Instances: instances})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every plot is drawn, names every run in its legend, and is the same
// bytes each time (docs/algorithms.md's plots are checked against a
// regeneration).
func TestDrawIsDeterministic(t *testing.T) {
	t.Parallel()
	r := result(t, 3)
	if got, want := Files(r), []string{"admitted.svg", "rejected.svg", "remaining.svg", "instances.svg"}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	for _, name := range Files(r) {
		a, err := Draw(r, name)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Draw(result(t, 3), name)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two drawings differ", name)
		}
		want := []string{"<svg", "on-off: ", ">sliding_window<", ">leaky_bucket<"}
		if name == "instances.svg" {
			want = append(want, ">gcra ×3 local<")
		}
		for _, w := range want {
			if !bytes.Contains(a, []byte(w)) {
				t.Errorf("%s lacks %q", name, w)
			}
		}
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	r := result(t, 1)
	dir := t.TempDir()
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"admitted.svg", "rejected.svg", "remaining.svg"}) {
		t.Errorf("wrote %v", names)
	}
	if _, err := Draw(r, "instances.svg"); err == nil || !strings.Contains(err.Error(), `no plot "instances.svg"`) {
		t.Errorf("instances.svg of one instance: %v", err)
	}
	if err := Write(filepath.Join(dir, "missing"), r); err == nil {
		t.Error("Write to a missing directory: no error")
	}
}
