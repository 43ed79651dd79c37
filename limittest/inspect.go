package limittest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// inspect runs the Inspector conformance, for every algorithm: Peek on a
// key never seen reports the capacity and no reset; after spends it
// reports what Allow reported, and spends nothing itself (twice the same
// answer, then Allow agrees); Reset makes the key full again; bad input is
// refused.
func (s *suite) inspect(t *testing.T) {
	t.Parallel()
	l, clock := s.store(t)
	in, ok := l.(sluice.Inspector)
	if !ok {
		t.Skip("the store is not a sluice.Inspector")
	}
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.LeakyBucket, sluice.Concurrency} {
		limit := lim("inspect-"+alg.String(), alg, 5, time.Minute, 0)
		key := s.key(t, alg.String())
		if st, err := in.Peek(ctx, key, limit); err != nil || st.Remaining != 5 || st.ResetAfter != 0 {
			t.Errorf("%v: Peek of a fresh key = %+v, %v; want 5 left, no reset", alg, st, err)
		}
		var last sluice.Decision
		for range 3 {
			d, err := l.Allow(ctx, key, limit, 1)
			if err != nil || !d.Allowed {
				t.Fatalf("%v: Allow = %+v, %v", alg, d, err)
			}
			last = d
		}
		for i := range 2 {
			st, err := in.Peek(ctx, key, limit)
			if err != nil || st.Remaining != last.Remaining || st.ResetAfter != last.ResetAfter {
				t.Errorf("%v: Peek %d after 3 spends = %+v, %v; want what the last Allow said (%v left, reset %v)", alg, i, st, err, last.Remaining, last.ResetAfter)
			}
		}
		if d, _ := l.Allow(ctx, key, limit, 2); !d.Allowed || d.Remaining != 0 {
			t.Errorf("%v: after the Peeks, 2 more = %+v; want allowed, 0 left (Peek spent nothing)", alg, d)
		}
		if err := in.Reset(ctx, key, limit); err != nil {
			t.Fatalf("%v: Reset: %v", alg, err)
		}
		if st, err := in.Peek(ctx, key, limit); err != nil || st.Remaining != 5 || st.ResetAfter != 0 {
			t.Errorf("%v: Peek after Reset = %+v, %v; want full", alg, st, err)
		}
		if d, _ := l.Allow(ctx, key, limit, 5); !d.Allowed {
			t.Errorf("%v: after Reset, the whole capacity = %+v; want allowed", alg, d)
		}
	}
	clock.Add(time.Second)
	good := lim("inspect-bad", sluice.TokenBucket, 5, time.Second, 0)
	if _, err := in.Peek(ctx, "", good); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("Peek of an empty key: %v, want ErrInvalidKey", err)
	}
	if err := in.Reset(ctx, s.key(t, "k"), sluice.Limit{Name: "inspect-bad", Quota: -1, Window: time.Second}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("Reset under an invalid limit: %v, want ErrInvalidLimit", err)
	}
}
