package tlsconfig

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"
)

// handshakeLogEvery is how often at most a listener's failed TLS
// handshakes are logged: a scanner or a client without a certificate
// under mTLS fails them by the thousand.
const handshakeLogEvery = time.Minute

// Handshakes counts and logs a listener's failed TLS handshakes, for its
// HTTP server (HTTPErrorLog) or its gRPC credentials: each is counted
// (the Options' Failed, a metric), and one a minute at most is logged, at
// Warn, with its reason and how many failed since the last line — never
// the client's address, an identity sluice keeps out of its logs. Safe
// for concurrent use.
type Handshakes struct {
	log      *slog.Logger
	listener string
	failed   func()
	// Now is the clock of the once-a-minute bound. Default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	last    time.Time
	skipped int
}

// NewHandshakes returns the Handshakes of listener, logging to logger and
// calling failed (when not nil) for each failure.
func NewHandshakes(logger *slog.Logger, listener string, failed func()) *Handshakes {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Handshakes{log: logger, listener: listener, failed: failed, Now: time.Now}
}

// Failed counts a failed handshake, and logs it unless one was logged
// within the minute.
func (h *Handshakes) Failed(err error) {
	if h.failed != nil {
		h.failed()
	}
	h.mu.Lock()
	now := h.Now()
	if !h.last.IsZero() && now.Sub(h.last) < handshakeLogEvery {
		h.skipped++
		h.mu.Unlock()
		return
	}
	skipped := h.skipped
	h.last, h.skipped = now, 0
	h.mu.Unlock()
	h.log.LogAttrs(context.Background(), slog.LevelWarn, "TLS handshake refused", slog.String("listener", h.listener),
		slog.String("reason", reasonOf(err)), slog.Int("more_since_last_line", skipped))
}

// reasonOf is a handshake's error without the connection's addresses: a
// net.OpError names both ends, and net/http logs it as text ("read tcp
// 10.0.0.1:443->203.0.113.7:51040: i/o timeout"), so what an address
// looks like is cut out of the text too.
func reasonOf(err error) string {
	var op *net.OpError
	for errors.As(err, &op) && op.Err != nil {
		if op.Op == "remote error" {
			return "remote error: " + op.Err.Error()
		}
		err = op.Err
	}
	reason := opPrefix.ReplaceAllString(err.Error(), "")
	return address.ReplaceAllString(reason, "<address>")
}

var (
	// opPrefix is a net.OpError's text before its cause: "read tcp
	// A->B: ", "write tcp6 A->B: ".
	opPrefix = regexp.MustCompile(`\b[a-z]+ (tcp|tcp4|tcp6|udp|unix)\S* \S+: `)
	// address is an IPv4 or bracketed IPv6 address, with or without a
	// port.
	address = regexp.MustCompile(`\[[0-9A-Fa-f:.%a-z]+\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b`)
)

// HTTPErrorLog returns the ErrorLog for an http.Server. net/http writes a
// line for every client whose TLS handshake fails ("http: TLS handshake
// error from ADDR: REASON"), and one for a panic in a handler ("http:
// panic serving ADDR: ..."), each with the client's address. Through this
// logger a failed handshake goes to hs (counted, logged once a minute at
// most, without the address; dropped when hs is nil); every other line is
// logged at Warn with any client address cut out.
func HTTPErrorLog(logger *slog.Logger, listener string, hs *Handshakes) *log.Logger {
	return log.New(&errorLog{log: logger, listener: listener, hs: hs}, "", 0)
}

type errorLog struct {
	log      *slog.Logger
	listener string
	hs       *Handshakes
}

func (e *errorLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		if e.hs != nil {
			e.hs.Failed(errors.New(afterAddr(rest)))
		}
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
