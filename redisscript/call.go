package redisscript

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/units"
)

// op is what one script call does to the states of its keys. Its value is
// the script's ARGV[3] (OP_* in lua/head.lua).
type op string

const (
	// opDecide decides the call's limits: each part that fits is spent,
	// unless the mode says the call as a whole is rejected.
	opDecide op = "d"
	// opCharge spends one key's cost whatever its state holds, into a debt.
	opCharge op = "c"
	// opUndo gives back a spend (the compensation of a call across hash
	// slots), or a Concurrency ticket (a release: the script undoes the
	// ticket's grant), and reports the state as it is then.
	opUndo op = "u"
	// opPeek reports the states as they are, spending nothing.
	opPeek op = "p"
	// opReset forgets the states: each key starts full.
	opReset op = "x"
	// opBatch decides several calls, one after the other (coalesced
	// decisions; see coalesce.go).
	opBatch op = "b"
)

// decides reports whether o's reply is a decision (allowed or rejected)
// rather than a report of the states as they are.
func (o op) decides() bool { return o == opDecide || o == opCharge }

// run makes one script call for rs (which must share a hash slot on a
// Cluster) and parses its reply into res, in four steps: ask the breaker,
// build the arguments, call Redis within the timeout, and account for the
// outcome (counters, breaker, Redis unreachable or back). An error is an
// outage (see isOutage), the caller's own context, or a reply that makes
// no sense.
func (s *Store) run(ctx context.Context, o op, mode sluice.Mode, rs []request, res []result) error {
	ok, probe := s.breaker.allow()
	if !ok {
		return errBreakerOpen
	}
	keys, args := s.scriptArgs(o, mode, rs)
	parent, budget := ctx, s.timeout // budget: the time Redis is given
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.timeout {
		budget = time.Until(d)
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	reply, err := s.call(ctx, scriptFor(rs), keys, args)
	if err != nil {
		return s.failed(parent, budget, probe, err)
	}
	s.markUp()
	s.breaker.success(probe)
	return parseReply(o, reply, rs, res)
}

// scriptArgs lays out KEYS and ARGV as lua/head.lua reads them: the
// protocol, the test clock ("" for Redis TIME), the op, the mode, then
// scriptParams values per key.
func (s *Store) scriptArgs(o op, mode sluice.Mode, rs []request) (keys, args []string) {
	keys = make([]string, len(rs))
	args = make([]string, 4, 4+scriptParams*len(rs))
	args[0] = scriptProtocolArg
	if s.testNow != nil {
		args[1] = strconv.FormatInt(s.testNow().UnixMicro(), 10)
	}
	args[2] = string(o)
	args[3] = modeArg(mode)
	for i, r := range rs {
		keys[i] = r.key
	}
	return keys, appendParams(args, rs)
}

// modeArg is a call's mode as the script reads it.
func modeArg(mode sluice.Mode) string {
	if mode == sluice.RejectionsCount {
		return "1"
	}
	return "0"
}

// appendParams appends the scriptParams values of each of rs to args.
func appendParams(args []string, rs []request) []string {
	for _, r := range rs {
		args = append(args, r.c.argv[:]...)
		args = append(args, costArg(r.cost), uintArg(r.ticket), intArg(r.at), intArg(r.stamp))
	}
	return args
}

// call sends the script by its SHA1, and its source only when Redis
// answers NOSCRIPT (never to replay a call whose outcome is unknown).
func (s *Store) call(ctx context.Context, sc luaScript, keys, args []string) ([]int64, error) {
	s.calls.Add(1)
	reply, err := s.client.EvalSHA(ctx, sc.sha, keys, args)
	if re := (*ReplyError)(nil); errors.As(err, &re) && re.NoScript() {
		s.noScript.Add(1)
		reply, err = s.client.Eval(ctx, sc.src, keys, args)
	}
	return reply, err
}

// failed accounts for a call that got no usable reply and returns its
// error. A caller's context that ended first (parent) is the caller's: a
// cancel says nothing about Redis; a deadline that gave Redis at least
// half of Timeout (budget) is Redis's failure too, for the breaker (else
// callers that pass short deadlines would never open it). Otherwise an
// outage counts and marks Redis down; an answer that is an error (a
// script error, a key of another type) is Redis up.
func (s *Store) failed(parent context.Context, budget time.Duration, probe bool, err error) error {
	if callerDone(parent) {
		if !errors.Is(parent.Err(), context.Canceled) && budget >= s.timeout/2 {
			s.failures.Add(1)
			s.timeouts.Add(1)
			s.breaker.failure(probe)
		} else {
			s.breaker.release(probe)
		}
		return fmt.Errorf("%w: %w", errCallerDone, cmp.Or(parent.Err(), context.DeadlineExceeded))
	}
	if isOutage(err) {
		s.failures.Add(1)
		if errors.Is(err, context.DeadlineExceeded) {
			s.timeouts.Add(1)
		}
		s.markDown(err)
		s.breaker.failure(probe)
	} else {
		s.markUp()
		s.breaker.success(probe) // Redis answered
	}
	return fmt.Errorf("redisscript: %w", err)
}

// costArg and the others format script arguments, sparing the allocation
// of the usual values (a cost of one unit, no ticket, no instant).
func costArg(atoms int64) string {
	if atoms == units.PerCost {
		return "1000000"
	}
	return strconv.FormatInt(atoms, 10)
}

func uintArg(v uint64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatUint(v, 10)
}

func intArg(v int64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatInt(v, 10)
}

// callerDone reports whether ctx has ended, or its deadline has passed (a
// client may time a call out on its own timer, a moment before ctx's
// fires).
func callerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// errCallerDone: the caller's context ended before Redis answered. The
// error goes back to the caller; no policy applies.
var errCallerDone = errors.New("redisscript: the call's context ended before Redis answered")

// errBreakerOpen: the breaker is open; no call was made.
var errBreakerOpen = errors.New("redisscript: breaker open after repeated failures")

// isOutage reports an error that means Redis could not answer (as opposed
// to answering something wrong): the failure policy applies.
func isOutage(err error) bool {
	if errors.Is(err, errCallerDone) {
		return false
	}
	if errors.Is(err, errBreakerOpen) {
		return true
	}
	var re *ReplyError
	if errors.As(err, &re) {
		return re.Unavailable()
	}
	return !errors.Is(err, ErrBadReply)
}
