// Package filewatch tells when files have changed and settled: a
// configuration's, a certificate's. It is the one importer of fsnotify.
//
// A file is watched through its directory, so that replacing it (an
// editor's rename over it, a Kubernetes ConfigMap's or Secret's symlink
// swap of "..data") is seen as well as writing it; other files of that
// directory (an editor's swap file) are ignored. A directory is watched for
// the files Options.Match accepts. Changes are reported once they have
// settled (no event for Options.Settle), so that the several events of one
// save, or of a swap that replaces several files at once, make one report.
package filewatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultSettle is Options.Settle's default.
const DefaultSettle = 100 * time.Millisecond

// Options configures a Watcher.
type Options struct {
	// Paths are the files and directories to watch. Required.
	Paths []string
	// Match, for a watched directory, says whether a change of the file
	// named base (no directory) matters. Default: every file.
	Match func(base string) bool
	// Settle is how long the files must stay unchanged before a change is
	// reported. Default DefaultSettle.
	Settle time.Duration
}

// Watcher reports settled changes of its paths (Run). Its zero value is
// not usable; New makes one.
type Watcher struct {
	w      *fsnotify.Watcher
	files  map[string]map[string]bool // directory → base names of the files watched in it; nil: any Match
	match  func(string) bool
	settle time.Duration
}

// New starts watching opts.Paths at once, so that no change made once New
// has returned is missed (Run reports it). It fails when the system cannot
// watch (inotify instances exhausted) or a path cannot be watched (its
// directory does not exist): the error names the path. Close releases it.
func New(opts Options) (*Watcher, error) {
	if len(opts.Paths) == 0 {
		return nil, errors.New("filewatch: no path to watch")
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{w: fw, files: map[string]map[string]bool{}, match: opts.Match, settle: opts.Settle}
	if w.settle <= 0 {
		w.settle = DefaultSettle
	}
	for _, p := range opts.Paths {
		dir, base := p, ""
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			dir, base = filepath.Dir(p), filepath.Base(p)
		}
		dir = filepath.Clean(dir)
		if _, seen := w.files[dir]; !seen {
			if err := fw.Add(dir); err != nil {
				fw.Close()
				return nil, &os.PathError{Op: "watch", Path: dir, Err: err}
			}
			w.files[dir] = map[string]bool{}
		}
		if base == "" {
			w.files[dir] = nil // the whole directory
		} else if w.files[dir] != nil {
			w.files[dir][base] = true
		}
	}
	return w, nil
}

// Run calls changed once per settled change, until ctx ends, and then
// returns nil; watch errors (an event queue overflow) are passed to
// failed, when it is not nil, and counted as a change (something may have
// been missed). changed runs on Run's goroutine: a slow one delays the
// next report, it loses none.
func (w *Watcher) Run(ctx context.Context, changed func(), failed func(error)) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	events, errs := w.w.Events, w.w.Errors
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if w.concerns(e.Name) {
				timer.Reset(w.settle)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if failed != nil {
				failed(err)
			}
			timer.Reset(w.settle)
		case <-timer.C:
			changed()
		}
	}
}

// concerns reports whether a change of path can change what is watched:
// a watched file, a Kubernetes "..data" swap in a watched file's
// directory, or a file Match accepts in a watched directory.
func (w *Watcher) concerns(path string) bool {
	dir, base := filepath.Dir(path), filepath.Base(path)
	files, ok := w.files[dir]
	switch {
	case !ok:
		return false
	case strings.HasPrefix(base, "..data"):
		return true
	case files == nil:
		return w.match == nil || w.match(base)
	}
	return files[base]
}

// Close stops watching. Run returns once its context ends; Close does not
// end it.
func (w *Watcher) Close() error { return w.w.Close() }
