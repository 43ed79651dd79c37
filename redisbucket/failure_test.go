package redisbucket_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisbucket"
	"github.com/sluicehq/sluice/redisstore"
)

// A Redis that does not answer: Wait returns an error wrapping the
// deadline after Timeout, and works again once Redis answers.
func TestOutageReturnsAfterTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	const timeout = 100 * time.Millisecond
	b := newBudget(t, redisbucket.Options{Client: dial(t, proxy.Addr()), Limit: limit(fresh(t), 1000, 10), Slice: 1, Timeout: timeout})
	ctx := context.Background()
	if err := b.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}

	proxy.Blackhole(true)
	start := time.Now()
	err := b.Wait(ctx, 1)
	took := time.Since(start)
	t.Logf("Wait during the outage: %v after %v", err, took)
	if !errors.Is(err, context.DeadlineExceeded) || took < timeout || took > timeout+200*time.Millisecond {
		t.Fatalf("Wait during an outage: %v after %v; want a deadline error after Timeout (%v)", err, took, timeout)
	}
	if st := b.Stats(); st.Failures != 1 || st.Admitted != 1 {
		t.Fatalf("%+v: want 1 failure, 1 admitted", st)
	}

	proxy.Blackhole(false)
	if err := b.Wait(ctx, 1); err != nil {
		t.Fatalf("Wait after the outage: %v", err)
	}
}

// A Redis that is not there at all: Wait fails at once with the cause.
func TestNoRedisFailsAtOnce(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	b := newBudget(t, redisbucket.Options{Client: dial(t, addr), Limit: limit("nowhere", 100, 10)})
	start := time.Now()
	err = b.Wait(context.Background(), 1)
	if took := time.Since(start); !errors.Is(err, redisstore.ErrNotConnected) || took > redisbucket.DefaultTimeout {
		t.Fatalf("Wait without Redis: %v after %v; want ErrNotConnected at once", err, took)
	}
}

// A call whose reply is lost is not sent again: its outcome is unknown,
// and it may have granted tokens.
func TestLostReplyIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	b := newBudget(t, redisbucket.Options{Client: dial(t, proxy.Addr()), Limit: limit(fresh(t), 1000, 10), Slice: 1})
	ctx := context.Background()
	if err := b.Wait(ctx, 1); err != nil { // loads the script, opens the connection
		t.Fatal(err)
	}
	before := scriptCalls(t, srv)
	proxy.CutNextReply()
	if err := b.Wait(ctx, 1); err == nil {
		t.Fatal("Wait succeeded without a reply")
	}
	if n := scriptCalls(t, srv) - before; n != 1 {
		t.Fatalf("Redis ran the script %d times for one Wait whose reply was lost; want once", n)
	}
	if st := b.Stats(); st.RoundTrips != 3 || st.Failures != 1 {
		t.Fatalf("%+v: want 3 round trips (EVALSHA, EVAL, the lost EVALSHA), 1 failure", st)
	}
}

// Redis lost its scripts (a restart, SCRIPT FLUSH): the next call sends
// the source once, and then the SHA1 again.
func TestNoScriptSendsTheSourceOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	b := newBudget(t, redisbucket.Options{Client: dial(t, srv.Addr()), Limit: limit(fresh(t), 1000, 10), Slice: 1})
	ctx := context.Background()
	for i := range 3 {
		if out, err := srv.CLI("SCRIPT", "FLUSH"); err != nil && i == 1 {
			t.Fatalf("SCRIPT FLUSH: %v: %s", err, out)
		}
		before := b.Stats().RoundTrips
		if err := b.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if n := b.Stats().RoundTrips - before; n != 2 {
			t.Fatalf("Wait %d after SCRIPT FLUSH: %d round trips, want 2 (EVALSHA, EVAL)", i, n)
		}
		before = b.Stats().RoundTrips
		if err := b.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if n := b.Stats().RoundTrips - before; n != 1 {
			t.Fatalf("the Wait after: %d round trips, want 1", n)
		}
	}
}

// Close ends a Wait that sleeps for the bucket and one queued behind it,
// and every later Wait; it is idempotent.
func TestCloseEndsWaits(t *testing.T) {
	t.Parallel()
	b, err := redisbucket.New(redisbucket.Options{Client: dial(t, redistest.Addr(t)), Limit: limit(fresh(t), 0.1, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- b.Wait(ctx, 1) }()
	}
	for deadline := time.Now().Add(5 * time.Second); b.Stats().Waits == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no Wait sleeps for the bucket after 5 s: %+v", b.Stats())
		}
	}
	b.Close()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, redisbucket.ErrClosed) {
				t.Errorf("a pending Wait returned %v, want ErrClosed", err)
			}
		case <-time.After(time.Second): // the bucket refills in 10 s
			t.Fatal("a pending Wait still waits 1 s after Close")
		}
	}
	b.Close()
	if err := b.Wait(ctx, 1); !errors.Is(err, redisbucket.ErrClosed) {
		t.Fatalf("Wait after Close: %v, want ErrClosed", err)
	}
}
