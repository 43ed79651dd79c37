package redisscript_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/redisscript"
)

// New refuses bad options with an error naming the field; an unknown
// policy is sluice.ErrUnknownFailurePolicy.
func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	client := sharedClient(t)
	for _, c := range []struct {
		opts redisscript.Options
		says string
		is   error
	}{
		{redisscript.Options{}, "Options.Client is required", nil},
		{redisscript.Options{Client: client, Prefix: "a{b"}, "Prefix", nil},
		{redisscript.Options{Client: client, Prefix: strings.Repeat("p", 65)}, "Prefix", nil},
		{redisscript.Options{Client: client, Timeout: -time.Second}, "Timeout -1s", nil},
		{redisscript.Options{Client: client, FailClosedRetryAfter: -time.Second}, "FailClosedRetryAfter", nil},
		{redisscript.Options{Client: client, BreakerCooldown: -time.Second}, "BreakerCooldown", nil},
		{redisscript.Options{Client: client, Instances: -1}, "Instances -1", nil},
		{redisscript.Options{Client: client, DenyCache: -1}, "DenyCache -1", nil},
		{redisscript.Options{Client: client, Policy: 7}, "Policy", sluice.ErrUnknownFailurePolicy},
		{redisscript.Options{Client: client, Policies: map[string]sluice.FailurePolicy{"api": 3}}, `Policies["api"]`, sluice.ErrUnknownFailurePolicy},
	} {
		s, err := redisscript.New(c.opts)
		if err == nil {
			s.Close()
			t.Errorf("New(%+v): no error", c.opts)
			continue
		}
		if !strings.Contains(err.Error(), c.says) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("New(%+v): %v; want it to say %q (and wrap %v)", c.opts, err, c.says, c.is)
		}
	}
}

// watching is a Client that connects by itself, as redisstore.Conn does:
// the test reports its connection attempts.
type watching struct {
	redisscript.Client
	mu      sync.Mutex
	report  func(error)
	stopped bool
}

func (w *watching) WatchConnection(report func(error)) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.report = report
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.stopped = true
	}
}

// A ConnectionWatcher's reports are Redis unreachable and Redis back, as
// a call's outcome is: in Stats, and logged once per change. Close stops
// hearing them.
func TestConnectionWatcherReports(t *testing.T) {
	t.Parallel()
	w := &watching{Client: sharedClient(t)}
	var logs logtest.Buffer
	s, err := redisscript.New(redisscript.Options{Client: w, Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if w.report == nil {
		t.Fatal("New did not watch the connection")
	}
	for _, c := range []struct {
		err         error
		unreachable bool
	}{{errors.New("connection refused"), true}, {errors.New("connection refused again"), true}, {nil, false}, {nil, false}} {
		w.report(c.err)
		if got := s.Stats().Unreachable; got != c.unreachable {
			t.Fatalf("after a report of %v: Unreachable %v, want %v", c.err, got, c.unreachable)
		}
	}
	if n, m := logs.Count(t, "redis unreachable"), logs.Count(t, "redis back"); n != 1 || m != 1 {
		t.Fatalf("%d lines unreachable, %d back; want one each: %q", n, m, logs.Messages(t))
	}
	s.Close()
	if !w.stopped {
		t.Fatal("Close did not stop watching")
	}
}
