package jsqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/queue"
)

// Bad input is refused with an error that names what is wrong.
func TestBadInput(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	q := open(t, jsqueue.Options{URL: url, MaxPayload: 1000})
	ctx := t.Context()
	id := mustEnqueue(t, q, queue.Task{Key: "order-7", Payload: []byte("first")})[0].ID
	l, err := q.Lease(ctx, 1, time.Minute)
	if err != nil || len(l) != 1 {
		t.Fatalf("Lease = %v, %v", l, err)
	}
	cases := []struct {
		name  string
		err   error
		is    error
		field string
	}{
		{"payload over MaxPayload", enqueueErr(q, queue.Task{Payload: make([]byte, 1001)}), queue.ErrInvalid, "payload"},
		{"key held by another payload", enqueueErr(q, queue.Task{Key: "order-7", Payload: []byte("second")}), queue.ErrKeyConflict, "key"},
		{"key twice in a call, two payloads", enqueueErr(q, queue.Task{Key: "k", Payload: []byte("a")}, queue.Task{Key: "k", Payload: []byte("b")}), queue.ErrKeyConflict, "key"},
		{"unknown token", q.Ack(ctx, queue.Receipt{ID: id, Token: "0123"}, nil), queue.ErrLeaseLost, "token"},
		{"empty token", q.Ack(ctx, queue.Receipt{ID: id}, nil), queue.ErrInvalid, "token"},
		{"result over MaxResult", q.Ack(ctx, l[0].Receipt, make([]byte, jsqueue.DefaultMaxResult+1)), queue.ErrInvalid, "result"},
		{"unknown task", q.Cancel(ctx, "nosuchtask"), queue.ErrNotFound, "nosuchtask"},
		{"malformed ID", q.Cancel(ctx, "a.b>*"), queue.ErrNotFound, "a.b>*"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.is) || !strings.Contains(c.err.Error(), c.field) || !strings.HasPrefix(c.err.Error(), "jsqueue: ") && !strings.HasPrefix(c.err.Error(), "queue: ") {
			t.Errorf("%s: error %v, want %v naming %q", c.name, c.err, c.is, c.field)
		}
	}
	var te *queue.TaskError
	if err := enqueueErr(q, queue.Task{}, queue.Task{Key: "order-7", Payload: []byte("x")}); !errors.As(err, &te) || te.Index != 1 || te.Field != "key" {
		t.Errorf("conflict in a batch = %v, want a TaskError on task 1's key", err)
	}
	// The holder still holds its lease after the forged receipts.
	if err := q.Ack(ctx, l[0].Receipt, []byte("ok")); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	for _, c := range []struct {
		name string
		o    jsqueue.Options
		want string
	}{
		{"no server", jsqueue.Options{}, "neither URL nor Conn"},
		{"bad name", jsqueue.Options{URL: url, Name: "a.b"}, "name"},
		{"payload over the server's max_payload", jsqueue.Options{URL: url, MaxPayload: 8 << 20}, "MaxPayload"},
		{"negative attempts", jsqueue.Options{URL: url, MaxAttempts: -1}, "MaxAttempts"},
		{"short ack wait", jsqueue.Options{URL: url, AckWait: time.Millisecond}, "AckWait"},
	} {
		c.o.Logger = quiet
		q, err := jsqueue.Open(t.Context(), c.o)
		if err == nil {
			_ = q.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "jsqueue: open: ") {
			t.Errorf("%s: Open = %v, want an error naming %q", c.name, err, c.want)
		}
	}
	q := open(t, jsqueue.Options{URL: url})
	if p, r := q.Limits(); p != 1<<20-4<<10 || r != jsqueue.DefaultMaxResult {
		t.Errorf("Limits = %d, %d; want 1 MiB less 4 KiB (the server's max_payload is 1 MiB) and 64 KiB", p, r)
	}
	s, err := q.Stats(t.Context())
	if err != nil || !strings.Contains(s.Durability, "nats-server") {
		t.Errorf("Stats = %+v, %v; want the durability of the server", s, err)
	}
}

// A queue made by the first layout (every task in one stream named after
// the queue, whose sequences its records name) is refused, not mixed
// with the stream per priority.
func TestEarlierLayoutRefused(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	name := newName()
	t.Cleanup(func() { drop(t, url, name) })
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{name + ".task.*.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	q, err := jsqueue.Open(t.Context(), jsqueue.Options{URL: url, Name: name, Logger: quiet})
	if err == nil {
		_ = q.Close()
		t.Fatal("Open succeeded over an earlier layout's stream")
	}
	if want := "was created by an earlier jsqueue"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "delete the stream "+name) {
		t.Errorf("Open = %v, want an error saying %q and what to delete", err, want)
	}
}

// A server that goes away makes Enqueue fail: nothing is accepted and
// dropped.
func TestOutage(t *testing.T) {
	t.Parallel()
	s := startServer(t, "outage", redistest.FreePort(t))
	q := open(t, jsqueue.Options{URL: s.url, Timeout: 500 * time.Millisecond})
	mustEnqueue(t, q, queue.Task{Payload: []byte("before")})
	s.kill()
	for i := range 3 {
		start := time.Now()
		got, err := q.Enqueue(t.Context(), queue.Task{Payload: []byte(fmt.Sprint("during ", i))})
		if err == nil {
			t.Fatalf("Enqueue with the server down = %v, nil; want an error", got)
		}
		if i == 0 {
			t.Logf("Enqueue with the server down: %v (after %v)", err, time.Since(start))
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Enqueue took %v to fail", took)
		}
		if errors.Is(err, queue.ErrClosed) || !strings.HasPrefix(err.Error(), "jsqueue: enqueue: ") {
			t.Errorf("Enqueue = %v, want a jsqueue: enqueue: error from the connection", err)
		}
	}
	if _, err := q.Lease(t.Context(), 1, time.Second); err == nil {
		t.Errorf("Lease with the server down succeeded")
	}
}

func mustEnqueue(t testing.TB, q queue.Queue, tasks ...queue.Task) []queue.Enqueued {
	t.Helper()
	got, err := q.Enqueue(t.Context(), tasks...)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return got
}

func enqueueErr(q queue.Queue, tasks ...queue.Task) error {
	_, err := q.Enqueue(context.Background(), tasks...)
	return err
}
