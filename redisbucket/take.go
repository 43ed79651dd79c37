package redisbucket

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/redisscript"
)

// takeScript takes a slice from the shared bucket in one atomic call,
// reading Redis TIME; its header documents KEYS, ARGV and the reply.
//
//go:embed take.lua
var takeScript string

// takeSHA is the SHA1 EVALSHA names takeScript by.
var takeSHA = func() string {
	sum := sha1.Sum([]byte(takeScript))
	return hex.EncodeToString(sum[:])
}()

// scriptProtocol is the version of the script's ARGV and reply layout; it
// must match PROTOCOL in take.lua.
const scriptProtocol = "1"

// view is the bucket as the last answer left it: its level (scaled
// units) from the instant it refills on, by this process's clock. Other
// processes only ever take from the bucket, so it holds an amount no
// earlier than the view says.
type view struct {
	level int64
	from  time.Time
}

// holds returns when v's bucket holds atoms, by refill alone.
func (b *Budget) holds(v view, atoms int64) time.Time {
	missing := atoms*b.cfg.rate.PerAtom - v.level // atoms ≤ burst: no overflow
	if missing <= 0 {
		return v.from
	}
	return v.from.Add(time.Duration(b.cfg.rate.Micros(missing)) * time.Microsecond)
}

// take makes one round trip: the script takes between need and want
// atoms from the shared bucket, or nothing. It sends the script by its
// SHA1, and its source only when Redis answers NOSCRIPT; it never repeats
// a call whose outcome is unknown (a lost reply may have granted tokens,
// which are then lost: the fleet admits less, never more). The call ends
// after Timeout, when ctx ends, or when the Budget closes.
func (b *Budget) take(ctx context.Context, want, need int64) (granted int64, v view, err error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.cfg.timeout)
	defer cancel()
	stop := context.AfterFunc(b.life, cancel)
	defer stop()

	args := append(append(make([]string, 0, 6), scriptProtocol), b.cfg.rateArgs...)
	args = append(args, itoa(want), itoa(need))
	// The level is Redis's at a moment after start: dating it start makes
	// the next call a little early (it may find a slice short by a round
	// trip's refill), never late (a full bucket would lose refill).
	start := b.cfg.now()
	b.stats.roundTrips.Add(1)
	reply, err := b.cfg.client.EvalSHA(ctx, takeSHA, b.keys, args)
	if re := (*redisscript.ReplyError)(nil); errors.As(err, &re) && re.NoScript() {
		start = b.cfg.now()
		b.stats.roundTrips.Add(1)
		reply, err = b.cfg.client.Eval(ctx, takeScript, b.keys, args)
	}
	if err == nil {
		err = b.checkReply(reply, want, need)
	}
	if err != nil {
		b.stats.failures.Add(1)
		return 0, view{}, b.failure(parent, ctx, err)
	}
	return reply[0], view{level: reply[1], from: start.Add(time.Duration(reply[2]) * time.Microsecond)}, nil
}

// checkReply checks the shape the script always answers: granted, level,
// lag.
func (b *Budget) checkReply(reply []int64, want, need int64) error {
	if len(reply) != 3 {
		return fmt.Errorf("%w: %d values, want 3", redisscript.ErrBadReply, len(reply))
	}
	if g := reply[0]; g != 0 && (g < need || g > want) || reply[1] < 0 || reply[1] > b.cfg.capScaled || reply[2] < 0 {
		return fmt.Errorf("%w: %v for want %d, need %d", redisscript.ErrBadReply, reply, want, need)
	}
	return nil
}

// failure words a failed call's error: the Budget closed, the caller's
// context ended, Redis did not answer within Timeout (call is the call's
// context), or the cause as the Client returned it.
func (b *Budget) failure(parent, call context.Context, err error) error {
	switch {
	case b.life.Err() != nil:
		return fmt.Errorf("%w (a call to Redis was in flight: %w)", ErrClosed, err)
	case parent.Err() != nil:
		return fmt.Errorf("redisbucket: take a slice of %q: the context ended before Redis answered: %w", b.name, parent.Err())
	case errors.Is(call.Err(), context.DeadlineExceeded):
		return fmt.Errorf("redisbucket: take a slice of %q: no answer from Redis within %v: %w", b.name, b.cfg.timeout, err)
	}
	return fmt.Errorf("redisbucket: take a slice of %q: %w", b.name, err)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
