package console

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// tallyEvery is the span a tally sums up in one log line.
const tallyEvery = time.Minute

// tally counts an event that anyone can cause (a failed login, a refused
// cross-origin POST) and logs at most one line a minute about it —
// "relay console: 300 failed logins in the last minute" —, never a line
// an event, so that a flood of them cannot fill the log. The first event
// after a quiet spell starts a minute, on a timer (time.AfterFunc, the
// runtime's clock rather than Options.Now); the minute's end logs its
// count, the last client's address and, when given, the last reason. Events of a minute that has not
// ended when the process exits are not logged.
//
// It is safe for concurrent use.
type tally struct {
	what string // the events, plural: "failed logins"
	log  *slog.Logger

	mu   sync.Mutex
	n    int    // events in the running minute; guarded by mu
	last string // the last event's remote address; guarded by mu
	why  string // the last event's reason, if any; guarded by mu
}

// add counts one event from the client at remote, for the reason why
// ("" for none).
func (t *tally) add(remote, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
	t.last, t.why = remote, why
	if t.n == 1 {
		time.AfterFunc(tallyEvery, t.flush)
	}
}

// flush logs the minute's count and starts counting afresh.
func (t *tally) flush() {
	t.mu.Lock()
	n, last, why := t.n, t.last, t.why
	t.n, t.last, t.why = 0, "", ""
	t.mu.Unlock()
	attrs := []any{"count", n, "last_remote", last}
	if why != "" {
		attrs = append(attrs, "last_reason", why)
	}
	t.log.Warn(fmt.Sprintf("relay console: %d %s in the last minute", n, t.what), attrs...)
}
