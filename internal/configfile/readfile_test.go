package configfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/configfile"
)

// What ReadFile takes and refuses, in words, without blocking on a named
// pipe.
func TestReadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(dir, "loop")
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, link} {
		if b, err := configfile.ReadFile(path, 7); err != nil || string(b) != "content" {
			t.Errorf("ReadFile(%s) = %q, %v", path, b, err)
		}
	}
	for _, c := range []struct {
		path, says string
		max        int
		is         error
	}{
		{filepath.Join(dir, "missing"), "no such file", 10, os.ErrNotExist},
		{dir, "a directory, not a file", 10, nil},
		{fifo, "not a regular file (a device, a pipe or a socket)", 10, nil},
		{"/dev/null", "not a regular file", 10, nil},
		{file, "larger than 6 bytes", 6, nil},
		{loop, "cannot open it: too many levels of symbolic links", 10, nil},
	} {
		_, err := configfile.ReadFile(c.path, c.max)
		var fe *configfile.FileError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), c.path) {
			t.Errorf("ReadFile(%s): %v; want a FileError saying %q, without the path", c.path, err, c.says)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("ReadFile(%s): %v is not %v", c.path, err, c.is)
		}
	}
}
