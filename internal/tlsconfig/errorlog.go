package tlsconfig

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// handshakeLogEvery is how often at most a failed TLS handshake is logged:
// a scanner or a client without a certificate under mTLS fails them by
// the thousand.
const handshakeLogEvery = time.Minute

// HTTPErrorLog returns the ErrorLog for an http.Server. net/http writes a
// line for every client whose TLS handshake fails ("http: TLS handshake
// error from ADDR: REASON"), and one for a panic in a handler ("http:
// panic serving ADDR: ..."), each with the client's address — an identity
// sluice keeps out of its logs. Through this logger a failed handshake is
// counted (failed, when not nil, is called for each: a metric) and logged
// at most once a minute, at Warn, with its reason and how many failed
// since the last line, never the address; every other line is logged at
// Warn with any client address cut out. Safe for concurrent use.
func HTTPErrorLog(logger *slog.Logger, listener string, failed func()) *log.Logger {
	return log.New(&errorLog{log: logger, listener: listener, failed: failed}, "", 0)
}

type errorLog struct {
	log      *slog.Logger
	listener string
	failed   func()

	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (e *errorLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		e.handshake(afterAddr(rest))
		return len(p), nil
	}
	if rest, ok := strings.CutPrefix(line, "http: panic serving "); ok {
		line = "http: panic serving a client: " + afterAddr(rest)
	}
	e.log.LogAttrs(context.Background(), slog.LevelWarn, line, slog.String("listener", e.listener))
	return len(p), nil
}

// afterAddr is what follows "ADDR: " in a net/http log line.
func afterAddr(s string) string {
	if _, reason, ok := strings.Cut(s, ": "); ok {
		return reason
	}
	return ""
}

func (e *errorLog) handshake(reason string) {
	if e.failed != nil {
		e.failed()
	}
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < handshakeLogEvery {
		e.skipped++
		e.mu.Unlock()
		return
	}
	skipped := e.skipped
	e.last, e.skipped = now, 0
	e.mu.Unlock()
	e.log.LogAttrs(context.Background(), slog.LevelWarn, "TLS handshake refused", slog.String("listener", e.listener),
		slog.String("reason", reason), slog.Int("more_since_last_line", skipped))
}
