package boltqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// record is a task's row in the tasks bucket: everything but its payload
// and result, which live in buckets of their own so that a change of state
// rewrites ~100 bytes, not the payload.
type record struct {
	state       queue.State
	priority    uint8
	cost        float64
	attempts    uint32
	maxAttempts uint32
	enqueued    int64 // unix nanoseconds; 0 = none
	readyAt     int64
	deadline    int64
	until       int64 // the current lease's end (state leased)
	finished    int64 // when it succeeded, died or was cancelled (0 while it is not finished)
	// died is the instant of the death it was last revived from (0: never
	// revived): a revived task keeps its place in the order of deaths, as
	// a ListDead cursor. While it is dead, its place is finished.
	died    int64
	token   uint64 // the current lease's token (0 = none)
	key     string
	outcome string
}

const recordVersion = 1

// fixed is the size of a record's fixed part: version, state, priority,
// cost, attempts, max attempts, six instants, token. The sixth instant,
// died, was reserved (always zero) before Revive: records written before
// it read as never revived, and a version before it ignores the field.
const fixed = 1 + 1 + 1 + 8 + 4 + 4 + 6*8 + 8

var errCorrupt = errors.New("boltqueue: corrupt record")

func (r *record) encode() []byte {
	b := make([]byte, fixed, fixed+2*binary.MaxVarintLen32+len(r.key)+len(r.outcome))
	b[0], b[1], b[2] = recordVersion, byte(r.state), r.priority
	binary.BigEndian.PutUint64(b[3:], math.Float64bits(r.cost))
	binary.BigEndian.PutUint32(b[11:], r.attempts)
	binary.BigEndian.PutUint32(b[15:], r.maxAttempts)
	for i, t := range [...]int64{r.enqueued, r.readyAt, r.deadline, r.until, r.finished, r.died} {
		binary.BigEndian.PutUint64(b[19+8*i:], uint64(t))
	}
	binary.BigEndian.PutUint64(b[67:], r.token)
	b = binary.AppendUvarint(b, uint64(len(r.key)))
	b = append(b, r.key...)
	b = binary.AppendUvarint(b, uint64(len(r.outcome)))
	return append(b, r.outcome...)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < fixed || b[0] != recordVersion {
		return r, fmt.Errorf("%w: %d bytes, version %v", errCorrupt, len(b), firstByte(b))
	}
	r.state, r.priority = queue.State(b[1]), b[2]
	if r.state < queue.Queued || r.state > queue.Cancelled || r.priority > queue.MaxPriority {
		return r, fmt.Errorf("%w: state %d, priority %d", errCorrupt, b[1], b[2])
	}
	r.cost = math.Float64frombits(binary.BigEndian.Uint64(b[3:]))
	if !(r.cost > 0) || math.IsInf(r.cost, 0) {
		return r, fmt.Errorf("%w: cost %v", errCorrupt, r.cost)
	}
	r.attempts = binary.BigEndian.Uint32(b[11:])
	r.maxAttempts = binary.BigEndian.Uint32(b[15:])
	ts := [...]*int64{&r.enqueued, &r.readyAt, &r.deadline, &r.until, &r.finished, &r.died}
	for i, t := range ts {
		*t = int64(binary.BigEndian.Uint64(b[19+8*i:]))
	}
	r.token = binary.BigEndian.Uint64(b[67:])
	rest := b[fixed:]
	var err error
	if r.key, rest, err = readString(rest); err != nil {
		return r, err
	}
	if r.outcome, rest, err = readString(rest); err != nil {
		return r, err
	}
	if len(rest) != 0 {
		return r, fmt.Errorf("%w: %d bytes after the end", errCorrupt, len(rest))
	}
	return r, nil
}

func firstByte(b []byte) any {
	if len(b) == 0 {
		return "none"
	}
	return b[0]
}

func readString(b []byte) (string, []byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return "", nil, fmt.Errorf("%w: a string's length", errCorrupt)
	}
	return string(b[w : w+int(n)]), b[w+int(n):], nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func instant(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Keys of the buckets. Every index key ends with the task's 8-byte ID so
// that entries are unique and point at their task.

// taskKey is a task's key in the tasks, payloads and results buckets: its
// sequence number, big-endian, so that the tasks bucket grows at its end.
func taskKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// readyKey orders the ready index: priority (highest first), ready time,
// then enqueue order.
func readyKey(priority uint8, readyAt int64, id []byte) []byte {
	k := make([]byte, 0, 17)
	k = append(k, queue.MaxPriority-priority)
	k = binary.BigEndian.AppendUint64(k, uint64(readyAt))
	return append(k, id...)
}

// timeKey orders the schedule and lease indexes and the expiry index: an
// instant, then the task.
func timeKey(at int64, id []byte) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(at))
	return append(k, id...)
}

func keyTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k)) }

// formatID and parseID turn a task's sequence into its public ID (16
// lowercase hexadecimal digits) and back.
func formatID(id []byte) string { return fmt.Sprintf("%016x", id) }

func parseID(s string) ([]byte, bool) {
	if len(s) != 16 {
		return nil, false
	}
	v, ok := parseHex(s)
	return taskKey(v), ok
}

func formatToken(t uint64) string { return fmt.Sprintf("%x", t) }

// parseToken reads a token as formatToken writes it: one spelling per
// token, so a leading zero is another (refused) token.
func parseToken(s string) (uint64, bool) {
	if s == "" || len(s) > 16 || s[0] == '0' {
		return 0, false
	}
	return parseHex(s)
}

// parseHex reads up to 16 lowercase hexadecimal digits.
func parseHex(s string) (uint64, bool) {
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
