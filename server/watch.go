package server

import (
	"context"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/internal/filewatch"
)

// startWatching watches the configuration's paths, from New on, so that no
// change made once New has returned is missed: a file through its
// directory (a rename over it, a ConfigMap's symlink swap), a directory for
// its YAML files. A path that cannot be watched is logged: SIGHUP and the
// admin API still reload.
func (s *Server) startWatching() {
	if len(s.opts.Watch) == 0 {
		return
	}
	w, err := filewatch.New(filewatch.Options{Paths: s.opts.Watch, Match: isYAML})
	if err != nil {
		s.log.Error("cannot watch the configuration; SIGHUP still reloads", "err", err)
		return
	}
	s.watcher = w
	s.closers = append(s.closers, w.Close)
}

// isYAML: a change of another file of a watched directory (an editor's
// swap file, a log) neither delays nor triggers a reload.
func isYAML(base string) bool {
	return strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")
}

// watch reloads the configuration on hup and when a watched path
// changes, and the TLS files on hup and when they change, until ctx ends.
func (s *Server) watch(ctx context.Context, hup <-chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.watcher != nil {
		wg.Go(func() {
			_ = s.watcher.Run(ctx, func() { _ = s.Reload() }, func(err error) { s.log.Warn("watching the configuration", "err", err) })
		})
	}
	if s.tls != nil {
		wg.Go(func() { _ = s.tls.Run(ctx) }) // nil when ctx ends
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = s.Reload()
			if s.tls != nil {
				_ = s.tls.Reload()
			}
		}
	}
}
