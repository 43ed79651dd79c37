package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/units"
)

// Budget is one process's share of a limit that a fleet shares through one
// token bucket in Redis: Wait spends tokens the process took from the
// bucket a slice at a time. Safe for concurrent use; Waits are served
// one at a time, in the order they arrive, and at most one call to Redis
// is in flight. It starts no goroutine.
type Budget struct {
	cfg  config
	name string   // the limit's
	keys []string // the bucket's key, the script's KEYS
	// life ends at Close; turn is held by the one Wait that spends or
	// asks Redis (a channel of capacity 1: blocked Waits queue in order).
	life  context.Context
	close context.CancelFunc
	turn  chan struct{}

	// bucket is the shared bucket as the last answer left it: the turn's
	// holder reads and writes it.
	bucket view
	stats  counters

	mu   sync.Mutex // guards rate
	rate ewma
}

// counters are Stats' atomics. granted and admitted are in atoms; only the
// turn's holder adds to them, so granted − admitted is what it holds.
type counters struct {
	roundTrips, slices, denials, failures, waits atomic.Int64
	granted, admitted                            atomic.Int64
}

// Errors of a Budget.
var (
	// ErrClosed is returned by Wait after Close, or when Close ends it.
	ErrClosed = errors.New("redisbucket: budget closed")
	// ErrCostTooLarge is returned for a cost above the burst, which the
	// bucket never holds.
	ErrCostTooLarge = errors.New("redisbucket: cost exceeds the burst")
)

// New returns a Budget on o's bucket, or an error wrapping ErrInvalid
// that names the option at fault. It makes no call to Redis: the first
// Wait does, and finds a full bucket if the fleet has not used it within
// the time it takes to refill.
func New(o Options) (*Budget, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	life, stop := context.WithCancel(context.Background())
	return &Budget{
		cfg: cfg, name: o.Limit.Name, keys: []string{cfg.key},
		life: life, close: stop, turn: make(chan struct{}, 1),
		rate: newEWMA(RateWindow, cfg.now()),
	}, nil
}

// Wait blocks until cost tokens are this process's to spend, and spends
// them. It spends from the slice the process holds; when that holds less
// than cost, it takes a new slice from the shared bucket in one round trip:
// what it misses for cost at least, topped up to Slice (or to cost if
// that is larger) if the bucket holds as much. From each answer it knows
// the bucket's level, and so when a slice will be there at the earliest:
// it sleeps until then before it asks, so that a process short of tokens
// asks about once per slice (more when other processes take the slice
// first: each asks again when the next one will be there).
//
// When ctx's deadline comes before that, Wait asks as soon as the bucket
// holds its cost alone; when it will not hold even that before the
// deadline, Wait fails at once (other processes only ever take from the
// bucket).
//
// It returns an error, having spent nothing:
//   - wrapping ErrInvalid for a cost that is not a positive finite
//     number, ErrCostTooLarge for one above the burst;
//   - wrapping ctx's error when ctx ends first, and wrapping
//     context.DeadlineExceeded at once when the bucket cannot refill the
//     cost before ctx's deadline;
//   - ErrClosed after Close;
//   - wrapping the cause when Redis fails or does not answer within
//     Timeout. Wait never retries a call (one whose reply was lost may
//     have granted tokens, which are then lost): the caller decides
//     whether to wait longer, to fail, or to admit on its own.
func (b *Budget) Wait(ctx context.Context, cost float64) error {
	atoms, err := b.atoms(cost)
	if err != nil {
		return err
	}
	if err := b.takeTurn(ctx); err != nil {
		return err
	}
	defer b.endTurn()
	for !b.spend(atoms) {
		want, need := b.missing(atoms)
		at, err := b.nextAsk(ctx, want, need)
		if err != nil {
			return err
		}
		if err := b.sleepUntil(ctx, at); err != nil {
			return err
		}
		if err := b.ask(ctx, want, need); err != nil {
			return err
		}
	}
	return nil
}

// atoms converts a Wait's cost.
func (b *Budget) atoms(cost float64) (int64, error) {
	atoms, ok := units.FromCost(cost) // false for NaN and ±Inf too
	if !ok {
		return 0, fmt.Errorf("%w: cost %v: must be a positive finite number of at least a millionth", ErrInvalid, cost)
	}
	if atoms > b.cfg.burst {
		return 0, fmt.Errorf("%w: cost %v, burst %v", ErrCostTooLarge, cost, units.ToCost(b.cfg.burst))
	}
	return atoms, nil
}

// takeTurn waits for the turn, behind the Waits that came first.
func (b *Budget) takeTurn(ctx context.Context) error {
	select {
	case b.turn <- struct{}{}:
	case <-ctx.Done():
		return b.ended(ctx)
	case <-b.life.Done():
		return ErrClosed
	}
	// Either could have ended as the turn came free.
	if b.life.Err() != nil || ctx.Err() != nil {
		b.endTurn()
		if b.life.Err() != nil {
			return ErrClosed
		}
		return b.ended(ctx)
	}
	return nil
}

func (b *Budget) endTurn() { <-b.turn }

// spend spends atoms from what the process holds, if it holds that much.
// The turn's holder calls it.
func (b *Budget) spend(atoms int64) bool {
	if b.held() < atoms {
		return false
	}
	b.stats.admitted.Add(atoms)
	return true
}

// held is what the process holds: granted and not spent. The turn's
// holder calls it.
func (b *Budget) held() int64 { return b.stats.granted.Load() - b.stats.admitted.Load() }

// missing returns what the process misses to spend atoms: the most and
// the least to take. The most tops what it holds up to a slice (up to
// atoms, if that is more), so that it never holds more than that. The
// turn's holder calls it.
func (b *Budget) missing(atoms int64) (want, need int64) {
	held := b.held()
	need = atoms - held
	return max(b.cfg.slice-held, need), need
}

// nextAsk returns when to ask for want, or for need alone when ctx's
// deadline comes first; it fails when the bucket does not hold even need
// before the deadline.
func (b *Budget) nextAsk(ctx context.Context, want, need int64) (time.Time, error) {
	at := b.holds(b.bucket, want)
	deadline, ok := ctx.Deadline()
	if !ok || !deadline.Before(at) {
		return at, nil
	}
	if at = b.holds(b.bucket, need); !deadline.Before(at) {
		return at, nil
	}
	return time.Time{}, fmt.Errorf("redisbucket: wait for %q: the bucket does not refill the cost before the context's deadline: %w", b.name, context.DeadlineExceeded)
}

// sleepUntil sleeps until at by the Budget's clock, or until ctx ends or
// the Budget closes.
func (b *Budget) sleepUntil(ctx context.Context, at time.Time) error {
	d := at.Sub(b.cfg.now())
	if d <= 0 {
		return nil
	}
	b.stats.waits.Add(1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return b.ended(ctx)
	case <-b.life.Done():
		return ErrClosed
	}
}

// ask takes between need and want atoms from the bucket, and records
// the answer. The turn's holder calls it.
func (b *Budget) ask(ctx context.Context, want, need int64) error {
	granted, v, err := b.take(ctx, want, need)
	if err != nil {
		return err
	}
	b.bucket = v
	if granted == 0 {
		b.stats.denials.Add(1)
		return nil
	}
	b.stats.slices.Add(1)
	b.stats.granted.Add(granted)
	b.mu.Lock()
	b.rate.add(b.cfg.now(), units.ToCost(granted))
	b.mu.Unlock()
	return nil
}

func (b *Budget) ended(ctx context.Context) error {
	return fmt.Errorf("redisbucket: wait for %q: %w", b.name, ctx.Err())
}

// Rate estimates the tokens per second the shared bucket grants this
// process: a moving average over RateWindow (2 s) of the slices taken,
// which reads a steady rate from RateWindow after New on. Over a fleet
// whose processes are all short of tokens, the Rates add up to about L.
// Safe for concurrent use.
func (b *Budget) Rate() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rate.at(b.cfg.now())
}

// Close ends the Budget: pending and later Waits return ErrClosed (one
// whose call to Redis is in flight cancels it). The tokens the process
// holds are dropped, not given back: the fleet admits less, never more.
// It does not close the Client. Idempotent; safe for concurrent use.
func (b *Budget) Close() { b.close() }
