package redisscript

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/algo"
)

// Each rule of the reply's validation, one case that breaks it and one
// just inside it: what a script may answer to each op.
func TestReplyProblems(t *testing.T) {
	const capacity = 10_000_000 // atoms: a capacity of 10
	fits := &request{c: &compiled{ints: algo.Integers{Cap: capacity}}, cost: 1_000_000}
	never := &request{c: &compiled{ints: algo.Integers{Cap: capacity}}, cost: capacity + 1}
	const (
		granted   = flagAllowed
		unspent   = flagUnspent
		fitUnused = flagAllowed | flagUnspent // fit, in a call another part rejected
	)
	for _, c := range []struct {
		o    op
		r    *request
		x    result
		want string // "" when the answer is possible
	}{
		// Any op: values in range.
		{opDecide, fits, result{flags: 8}, "unknown flags"},
		{opDecide, fits, result{flags: -1}, "unknown flags"},
		{opDecide, fits, result{flags: granted, remaining: capacity + 1}, "remaining outside the capacity"},
		{opDecide, fits, result{flags: granted, remaining: -1}, "remaining outside the capacity"},
		{opDecide, fits, result{flags: granted, remaining: capacity}, ""},
		{opDecide, fits, result{flags: granted, wait: -2}, "a negative duration"},
		{opDecide, fits, result{flags: granted, reset: -1}, "a negative duration"},
		{opDecide, fits, result{flags: granted | flagClamped, wait: 5, reset: 5}, ""},
		// A report: the state as it is.
		{opPeek, fits, result{flags: unspent}, ""},
		{opReset, fits, result{flags: unspent | flagClamped}, ""},
		{opUndo, fits, result{flags: unspent, remaining: 3}, ""},
		{opPeek, fits, result{flags: fitUnused}, "a report that grants"},
		{opUndo, fits, result{flags: unspent, wait: 1}, "a report that waits"},
		{opReset, fits, result{flags: 0}, "a report that spent"},
		// A grant.
		{opDecide, fits, result{flags: granted, wait: 7}, ""},
		{opDecide, fits, result{flags: fitUnused}, ""},
		{opDecide, fits, result{flags: granted, wait: waitNever}, "allowed, and never fits"},
		{opCharge, fits, result{flags: granted}, ""},
		{opCharge, fits, result{flags: fitUnused}, "a charge that spent nothing"},
		// A rejection.
		{opDecide, fits, result{wait: 9}, ""},
		{opDecide, never, result{wait: waitNever}, ""},
		{opCharge, fits, result{wait: 9}, "a charge rejected"},
		{opDecide, fits, result{flags: unspent, wait: 9}, "a rejection reported unspent"},
		{opDecide, fits, result{wait: 0}, "a rejection without a wait"},
		{opDecide, fits, result{wait: waitNever}, "a rejection whose never does not match the cost"},
		{opDecide, never, result{wait: 9}, "a rejection whose never does not match the cost"},
	} {
		if got := c.x.problem(c.o, c.r); got != c.want {
			t.Errorf("op %q, cost %d of %d, %+v: problem %q, want %q", c.o, c.r.cost, capacity, c.x, got, c.want)
		}
	}
}

// parseReply: the reply's shape, then each part, then the parts together.
func TestParseReply(t *testing.T) {
	r := request{c: &compiled{ints: algo.Integers{Cap: 10_000_000}}, cost: 1_000_000}
	rs := []request{r, r}
	part := func(flags, wait int64) []int64 { return []int64{flags, 0, wait, 0, 0} }
	reply := func(parts ...[]int64) []int64 {
		v := []int64{scriptProtocol, 0}
		for _, p := range parts {
			v = append(v, p...)
		}
		return v
	}
	for _, c := range []struct {
		o     op
		reply []int64
		says  string // "" for a valid reply
	}{
		{opDecide, reply(part(flagAllowed, 0), part(flagAllowed, 0)), ""},
		{opDecide, reply(part(flagAllowed|flagUnspent, 0), part(0, 5)), ""},
		{opDecide, reply(part(flagAllowed, 0)), "7 values for 2 keys"},
		{opDecide, append([]int64{9}, reply(part(flagAllowed, 0), part(flagAllowed, 0))[1:]...), "script protocol 9, want 3"},
		{opDecide, reply(part(flagAllowed, 0), part(flagAllowed, waitNever)), "key 1: allowed, and never fits"},
		{opDecide, reply(part(flagAllowed|flagUnspent, 0), part(flagAllowed, 0)), "a part left unspent in a call allowed whole"},
		{opPeek, reply(part(flagUnspent, 0), part(flagUnspent, 0)), ""},
	} {
		res := make([]result, len(rs))
		err := parseReply(c.o, c.reply, rs, res)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("op %q, reply %v: %v; want it valid", c.o, c.reply, err)
		case c.says != "" && (!errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), c.says)):
			t.Errorf("op %q, reply %v: %v; want ErrBadReply saying %q", c.o, c.reply, err, c.says)
		}
	}
}
