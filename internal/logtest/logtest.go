// Package logtest captures what a component logs, for the tests that
// count its lines (a state change logged once, not once per request).
package logtest

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Buffer holds JSON log lines as a slog.JSONHandler writes them. Safe for
// concurrent use: the component writes while the test reads.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Logger is a logger writing JSON records to b, at every level from Info.
func (b *Buffer) Logger() *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }

// Write appends p (a slog.JSONHandler's line).
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Messages are the logged records' messages, in order; a line that is not
// a JSON record fails the test.
func (b *Buffer) Messages(t testing.TB) []string {
	t.Helper()
	var out []string
	for line := range strings.Lines(b.String()) {
		var rec struct{ Msg string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec.Msg)
	}
	return out
}

// Count is how many logged messages start with prefix.
func (b *Buffer) Count(t testing.TB, prefix string) int {
	t.Helper()
	n := 0
	for _, m := range b.Messages(t) {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}
