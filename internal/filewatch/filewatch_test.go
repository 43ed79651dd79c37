package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Which changes concern a watcher of one file and of one directory.
func TestConcerns(t *testing.T) {
	t.Parallel()
	dir, conf := t.TempDir(), t.TempDir()
	cert := filepath.Join(dir, "tls.crt")
	w, err := New(Options{Paths: []string{cert, filepath.Join(dir, "tls.key"), conf}, Match: func(b string) bool { return strings.HasSuffix(b, ".yaml") }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, c := range []struct {
		path string
		want bool
	}{
		{cert, true},
		{filepath.Join(dir, "tls.key"), true},
		{filepath.Join(dir, "..data"), true},     // a Secret's symlink swap
		{filepath.Join(dir, "..data_tmp"), true}, // its first step
		{filepath.Join(dir, "ca.crt"), false},    // another file of a watched file's directory
		{filepath.Join(dir, ".tls.crt.swp"), false},
		{filepath.Join(conf, "rules.yaml"), true}, // a file Match accepts in a watched directory
		{filepath.Join(conf, "notes.txt"), false},
		{filepath.Join(conf, "..data"), true},
		{"/elsewhere/tls.crt", false},
	} {
		if got := w.concerns(c.path); got != c.want {
			t.Errorf("concerns(%s) = %v, want %v", c.path, got, c.want)
		}
	}
}

// Writing a watched file, renaming another over it and swapping the
// "..data" link of a Kubernetes volume are each reported; nothing is
// reported before a change.
func TestReportsChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A Kubernetes Secret volume: tls.crt -> ..data/tls.crt, ..data -> a
	// timestamped directory.
	v1 := filepath.Join(dir, "..2026_12_03_v1")
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(v1, "tls.crt"), []byte("one"), 0o600))
	must(t, os.Symlink(filepath.Base(v1), filepath.Join(dir, "..data")))
	must(t, os.Symlink(filepath.Join("..data", "tls.crt"), filepath.Join(dir, "tls.crt")))
	plain := filepath.Join(dir, "plain.pem")
	must(t, os.WriteFile(plain, []byte("one"), 0o600))

	w, err := New(Options{Paths: []string{filepath.Join(dir, "tls.crt"), plain}, Settle: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	changes := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx, func() { changes <- struct{}{} }, nil) })
	defer wg.Wait()
	defer cancel()

	wait := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported in 10 s", what)
		}
	}
	select {
	case <-changes:
		t.Fatal("a change reported before any")
	default:
	}
	must(t, os.WriteFile(plain, []byte("two"), 0o600))
	wait("write")
	tmp := filepath.Join(dir, "plain.pem.new")
	must(t, os.WriteFile(tmp, []byte("three"), 0o600))
	must(t, os.Rename(tmp, plain))
	wait("rename over")
	v2 := filepath.Join(dir, "..2026_12_03_v2")
	must(t, os.Mkdir(v2, 0o755))
	must(t, os.WriteFile(filepath.Join(v2, "tls.crt"), []byte("two"), 0o600))
	must(t, os.Symlink(filepath.Base(v2), filepath.Join(dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	wait("..data swap")
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{}); err == nil {
		t.Error("no path: no error")
	}
	missing := filepath.Join(t.TempDir(), "no", "such", "tls.crt")
	if _, err := New(Options{Paths: []string{missing}}); err == nil || !strings.Contains(err.Error(), filepath.Dir(missing)) {
		t.Errorf("a path whose directory does not exist: %v; want an error naming it", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
