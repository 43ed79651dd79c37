// Package configfile is what sluice's two configuration dialects share —
// the gateway's YAML (gateway/config) and envoyproxy/ratelimit's
// (rls/envoyconfig): the error of a refused file, written the same way by
// both ("file:line: reason"), the line of a YAML decoder's error, and the
// error of a field of a section several files share (FieldError:
// redisconfig's, leaseconfig's).
package configfile

import (
	"time"

	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
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

// FieldError is a setting of a section that several files (or a file and
// flags) share refused: the path of its field under the section (["tls",
// "ca_file"], ["limits", "1", "ttl"]), and why (Err, which does not name
// the field). A caller names the field its own way: a line of its file, a
// flag.
type FieldError struct {
	Path []string
	Err  error
}

// Error is the field as YAML names it ("sentinel.addrs[1]"), and why.
func (e *FieldError) Error() string { return e.Field() + ": " + e.Err.Error() }

// Field is the field's path as YAML names it: "tls.ca_file",
// "sentinel.addrs[1]".
func (e *FieldError) Field() string {
	var b strings.Builder
	for _, p := range e.Path {
		if p != "" && p[0] >= '0' && p[0] <= '9' {
			b.WriteString("[" + p + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *FieldError) Unwrap() error { return e.Err }

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

// MaxFileSize is the largest configuration file either dialect reads, in
// bytes (1 MiB): a larger one is not a configuration, and is refused with
// TooLarge before it is parsed.
const MaxFileSize = 1 << 20

// TooLarge is the reason a file larger than MaxFileSize is refused.
const TooLarge = "larger than 1048576 bytes (1 MiB), the largest configuration file sluice reads"

// CheckAddr checks a host:port listener or server address, in a file or on
// a flag: a host (a name, an IPv4 address, an IPv6 address in brackets, or
// nothing: every interface) and a port number from 0 to 65535. A bare
// IPv6 address such as ::1 is refused with the bracketed form to use.
func CheckAddr(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil || port == "" {
		if strings.Count(a, ":") > 1 && !strings.HasPrefix(a, "[") {
			return errors.New("an IPv6 address goes in brackets with a port, e.g. [::1]:8080")
		}
		return errors.New("host:port, e.g. 127.0.0.1:8080 or [::1]:8080")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
		return errors.New("the port must be a number from 0 to 65535")
	}
	return nil
}

// Duration is a time.Duration written as Go writes one: "50ms", "1m30s",
// "2h" (units ns, us or µs, ms, s, m, h). The YAML files of sluice's
// commands share it.
type Duration time.Duration

// UnmarshalYAML reads a duration; anything else is an error that shows
// how to write one.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("a duration is expected, not a %s: %s", kindName[n.Kind], durationHelp)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("%q: not a duration; %s", n.Value, DurationHint(n.Value))
	}
	*d = Duration(v)
	return nil
}

var kindName = map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list", yaml.AliasNode: "alias", yaml.DocumentNode: "document"}

// durationHelp is how to write a duration.
const durationHelp = "write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h)"

// DurationHint is how to write a duration, with what a common mistake in
// v meant ("1d": a day is 24h; "30": a number needs its unit).
func DurationHint(v string) string {
	v = strings.TrimSpace(v)
	if n, ok := strings.CutSuffix(v, "d"); ok {
		if _, err := strconv.ParseUint(n, 10, 16); err == nil {
			return durationHelp + "; a day is 24h"
		}
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return durationHelp + "; a number needs its unit"
	}
	return durationHelp
}
