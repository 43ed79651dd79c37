package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settle is how long the files must stay unchanged before a reload: an
// editor's save, or a ConfigMap's symlink swap, is several events.
const settle = 100 * time.Millisecond

// startWatching watches the configuration's paths, from New on, so that no
// change made once New has returned is missed. A file is watched through
// its directory, so that replacing it (a rename over it, a symlink swap) is
// seen as well as writing it. A path that cannot be watched is logged:
// SIGHUP and the admin API still reload.
func (s *Server) startWatching() {
	if len(s.opts.Watch) == 0 {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Error("cannot watch the configuration; SIGHUP still reloads", "err", err)
		return
	}
	s.watched = map[string]bool{}
	for _, p := range s.opts.Watch {
		dir := p
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			dir = filepath.Dir(p)
			s.watched[filepath.Base(p)] = true // only this file of its directory
		}
		if err := w.Add(dir); err != nil {
			s.log.Error("cannot watch the configuration; SIGHUP still reloads", "path", dir, "err", err)
		}
	}
	s.watcher = w
	s.closers = append(s.closers, w.Close)
}

// watch reloads on hup and when a watched path changes, until ctx ends.
func (s *Server) watch(ctx context.Context, hup <-chan struct{}) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if s.watcher != nil {
		events, errs = s.watcher.Events, s.watcher.Errors
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = s.Reload()
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if s.concerns(e.Name) {
				timer.Reset(settle)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.log.Warn("watching the configuration", "err", err)
		case <-timer.C:
			_ = s.Reload()
		}
	}
}

// concerns reports whether a change of path can change the configuration:
// a watched file, a YAML file of a watched directory, or a ConfigMap's
// ..data link. Other files of the directories (an editor's swap file, a
// log) do not delay or trigger reloads.
func (s *Server) concerns(path string) bool {
	base := filepath.Base(path)
	if len(s.watched) > 0 && s.watched[base] {
		return true
	}
	return strings.HasPrefix(base, "..data") || strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")
}
