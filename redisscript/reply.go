package redisscript

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/units"
)

// result is one key's part of a script reply.
type result struct {
	flags     int64
	remaining int64 // atoms
	wait      int64 // µs, waitNever never
	reset     int64 // µs
	at        int64 // µs: the instant decided
	now       int64 // µs: the instant of the call (Redis TIME), for tests
}

// The flags of a result (ALLOWED, CLAMPED and UNSPENT in lua/head.lua).
const (
	flagAllowed = 1
	flagClamped = 2 // Redis's clock was behind the state: no refill
	flagUnspent = 4 // the state as it is: nothing was spent (a rejected call's part that fit, an undo, a peek)
	knownFlags  = flagAllowed | flagClamped | flagUnspent
)

// waitNever is the wait of a cost that can never fit.
const waitNever = -1

func (r result) allowed() bool { return r.flags&flagAllowed != 0 }
func (r result) unspent() bool { return r.flags&flagUnspent != 0 }

// parseReply checks a script reply to o against the protocol and the
// limits asked about, and fills res. Every value the script cannot have
// sent is an error that says which rule it breaks, never an allow. The
// checks, in order: the reply's shape (its length, the protocol), each
// key's part on its own (problem), then the parts together (a decision
// leaves a part unspent only when another part rejects the call).
func parseReply(o op, reply []int64, rs []request, res []result) error {
	if len(reply) != 2+replyValues*len(rs) {
		return badReply(reply, fmt.Sprintf("%d values for %d keys", len(reply), len(rs)))
	}
	if reply[0] != scriptProtocol {
		return badReply(reply, fmt.Sprintf("script protocol %d, want %d: an old or foreign script answered", reply[0], scriptProtocol))
	}
	return parseParts(o, reply, reply[2:], rs, res)
}

// parseParts checks the parts of one call's reply, parts (replyValues per
// key of rs; reply is the whole, for the error), and fills res.
func parseParts(o op, reply, parts []int64, rs []request, res []result) error {
	for i := range rs {
		v := parts[replyValues*i : replyValues*(i+1)]
		x := result{flags: v[0], remaining: v[1], wait: v[2], reset: v[3], at: v[4], now: reply[1]}
		if why := x.problem(o, &rs[i]); why != "" {
			return badReply(reply, fmt.Sprintf("key %d: %s: flags %d, remaining %d, wait %d, reset %d", i, why, x.flags, x.remaining, x.wait, x.reset))
		}
		res[i] = x
	}
	if o == opDecide && unspentInAllowedCall(res[:len(rs)]) {
		return badReply(reply, "a part left unspent in a call allowed whole")
	}
	return nil
}

// problem says why x cannot be the script's answer to o on r's limit, or
// "" when it can be. Whatever the op, the values are in range; then a
// report (peek, reset, undo) grants nothing and waits for nothing, a grant
// has a finite wait, and a rejection says how long to wait.
func (x result) problem(o op, r *request) string {
	switch {
	case x.flags&^knownFlags != 0:
		return "unknown flags"
	case x.remaining < 0 || x.remaining > r.c.ints.Cap:
		return "remaining outside the capacity"
	case x.wait < waitNever || x.reset < 0:
		return "a negative duration"
	case !o.decides():
		return x.reportProblem()
	case x.allowed():
		return x.grantProblem(o)
	default:
		return x.rejectionProblem(o, r.cost > r.c.ints.Cap)
	}
}

// reportProblem checks the answer to an op that decides nothing: the
// state as it is, spent by nothing.
func (x result) reportProblem() string {
	switch {
	case x.allowed():
		return "a report that grants"
	case x.wait != 0:
		return "a report that waits"
	case !x.unspent():
		return "a report that spent"
	}
	return ""
}

// grantProblem checks an allowed part: it can wait (a leaky bucket's
// delay), never forever; a charge always spends. (A decision's allowed
// part may be unspent, when another part rejects the call.)
func (x result) grantProblem(o op) string {
	switch {
	case x.wait == waitNever:
		return "allowed, and never fits"
	case o == opCharge && x.unspent():
		return "a charge that spent nothing"
	}
	return ""
}

// rejectionProblem checks a rejected part: a charge is never rejected; a
// rejection leaves the state as the decision found it (it is not a
// report), says when to retry, and says "never" exactly when the cost is
// above the capacity (neverFits).
func (x result) rejectionProblem(o op, neverFits bool) string {
	switch {
	case o == opCharge:
		return "a charge rejected"
	case x.unspent():
		return "a rejection reported unspent"
	case x.wait == 0:
		return "a rejection without a wait"
	case (x.wait == waitNever) != neverFits:
		return "a rejection whose never does not match the cost"
	}
	return ""
}

// unspentInAllowedCall reports a decision's parts of which one is left
// unspent while none rejects: the call was allowed whole, so every part
// must have been spent.
func unspentInAllowedCall(res []result) bool {
	rejected, unspent := false, false
	for _, x := range res {
		rejected = rejected || !x.allowed()
		unspent = unspent || x.unspent()
	}
	return unspent && !rejected
}

// badReply is the error of a reply that breaks the protocol, saying why.
func badReply(reply []int64, why string) error {
	if len(reply) > 12 {
		reply = reply[:12]
	}
	return fmt.Errorf("%w: %s (reply %v)", ErrBadReply, why, reply)
}

// decision turns a result into the sluice.Decision about r's limit.
func (s *Store) decision(r *request, x result) (sluice.Decision, error) {
	if x.flags&flagClamped != 0 {
		s.clockBackwards.Add(1)
	}
	d := sluice.Decision{
		Allowed:    x.allowed(),
		Limit:      r.c.params.Limit,
		Remaining:  units.ToCost(x.remaining),
		ResetAfter: time.Duration(x.reset) * time.Microsecond,
	}
	switch {
	case d.Allowed:
		d.Delay = time.Duration(x.wait) * time.Microsecond
		if r.c.ints.Algorithm == sluice.Concurrency && !x.unspent() {
			d.Ticket = r.ticket
		}
	case x.wait == waitNever:
		d.RetryAfter = sluice.Never
		return d, r.c.params.NeverError(r.cost)
	default:
		d.RetryAfter = time.Duration(x.wait) * time.Microsecond
	}
	return d, nil
}
