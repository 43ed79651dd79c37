// Package configfile is what sluice's two configuration dialects share —
// the gateway's YAML (gateway/config) and envoyproxy/ratelimit's
// (rls/envoyconfig): the error of a refused file, written the same way by
// both ("file:line: reason"), and the line of a YAML decoder's error.
package configfile

import (
	"fmt"
	"strconv"
	"strings"
)

// Error is a refused configuration: the file, the line and the reason,
// written "FILE:LINE: REASON" ("FILE: REASON" about the whole file).
type Error struct {
	// File is the name the file was parsed under: its path, when loaded.
	File string
	// Line is 1-based; 0 when the reason is about the whole file.
	Line int
	// Reason says what is wrong and what would be right, in the file's
	// terms (its field names and values, never Go's types).
	Reason string
	// Err is the cause when there is one (a file that cannot be read, a
	// secret file a field names), for errors.Is and errors.As; nil
	// otherwise.
	Err error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Reason)
}

// Unwrap returns the cause, or nil.
func (e *Error) Unwrap() error { return e.Err }

// YAMLLine is the line a yaml.v3 error names ("yaml: line 3: ...", or the
// first line of its unmarshal errors), 0 when it names none.
func YAMLLine(err error) int {
	msg := err.Error()
	i := strings.Index(msg, "line ")
	if i < 0 {
		return 0
	}
	j := i + len("line ")
	k := j
	for k < len(msg) && '0' <= msg[k] && msg[k] <= '9' {
		k++
	}
	n, _ := strconv.Atoi(msg[j:k])
	return n
}
