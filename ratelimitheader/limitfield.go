package ratelimitheader

import "github.com/sluicehq/sluice"

// LimitField writes the RateLimit field (draft -11) about a fixed list of
// policies — the limits of a middleware's rule — straight from their
// decisions, on every response: the names are checked and quoted once, by
// NewLimitField, and Append allocates nothing but what dst needs to grow.
// The zero LimitField has no policies. It is safe for concurrent use.
type LimitField struct {
	// members start each member: its quoted name, after ", " but for the
	// first (`"per-ip"`, `, "daily"`).
	members []string
}

// NewLimitField is the LimitField of the policies names, in order. The
// error, wrapping ErrInvalidValue, is AppendLimits': a name that is not
// printable ASCII, or used twice.
func NewLimitField(names []string) (LimitField, error) {
	ls := make([]Limit, len(names))
	for i, name := range names {
		ls[i].Name = name
		if err := checkLimit(ls, i); err != nil {
			return LimitField{}, err
		}
	}
	f := LimitField{members: make([]string, len(names))}
	for i, name := range names {
		var b []byte
		if i > 0 {
			b = append(b, ", "...)
		}
		f.members[i] = string(appendString(b, name))
	}
	return f, nil
}

// Len is the number of policies.
func (f LimitField) Len() int { return len(f.members) }

// Append appends the RateLimit value about ds to dst and returns the
// extended buffer: ds[i] is the decision of the i-th policy, written as
// LimitOf(names[i], ds[i]) — byte for byte what AppendLimits writes of
// those Limits. Decisions beyond the list of policies are not written.
func (f LimitField) Append(dst []byte, ds []sluice.Decision) []byte {
	for i := range min(len(ds), len(f.members)) {
		d := &ds[i]
		dst = append(dst, f.members[i]...)
		dst = appendAvailable(dst, remainingOf(d), decisionReset(d))
	}
	return dst
}
