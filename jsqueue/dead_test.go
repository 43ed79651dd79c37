package jsqueue_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/jsqueue"
	"github.com/sluicehq/sluice/queue"
)

// connect returns a JetStream context on url, closed with the test.
func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// killOne enqueues a task with payload, leases it and dead-letters it
// with reason, and returns its ID.
func killOne(t *testing.T, q *jsqueue.Queue, payload, reason string) string {
	t.Helper()
	id := mustEnqueue(t, q, queue.Task{Payload: []byte(payload)})[0].ID
	ls, err := q.Lease(t.Context(), 1, time.Minute)
	if err != nil || len(ls) != 1 || ls[0].ID != id {
		t.Fatalf("Lease = %v, %v; want %s", ls, err, id)
	}
	if err := q.DeadLetter(t.Context(), ls[0].Receipt, reason); err != nil {
		t.Fatal(err)
	}
	return id
}

// A queue whose dead letters were stored by a jsqueue before Revive (a
// letter's message ID is the task's, no Sluice-Died header; the stream
// keeps any number of letters per subject) opens with one letter per
// subject, lists those letters and revives their tasks.
func TestDeadLettersOfAnEarlierVersion(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	q := open(t, jsqueue.Options{URL: url})
	name := q.Name()
	id := killOne(t, q, "old", "400 Bad Request")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	js := connect(t, url)
	ctx := t.Context()
	letters, err := js.Stream(ctx, name+"_dead_letters")
	if err != nil {
		t.Fatal(err)
	}
	if err := letters.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: name + ".dead." + id, Data: []byte("old"), Header: nats.Header{}}
	m.Header.Set("Sluice-Reason", "400 Bad Request")
	if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
	cfg := letters.CachedInfo().Config
	cfg.MaxMsgsPerSubject = -1
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	o := jsqueue.Options{URL: url, Name: name, Logger: quiet}
	q, err = jsqueue.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	info, err := letters.Info(ctx)
	if err != nil || info.Config.MaxMsgsPerSubject != 1 {
		t.Errorf("the dead-letter stream after Open: MaxMsgsPerSubject %v, %v; want 1", info.Config.MaxMsgsPerSubject, err)
	}
	dead, err := q.ListDead(ctx, "", 10)
	if err != nil || len(dead) != 1 || dead[0].ID != id || string(dead[0].Payload) != "old" || dead[0].Outcome != "400 Bad Request" {
		t.Fatalf("ListDead = %+v, %v; want %s with its payload and reason", dead, err, id)
	}
	if err := q.Revive(ctx, id, time.Time{}); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Lease(ctx, 10, time.Minute)
	if err != nil || len(ls) != 1 || ls[0].ID != id || string(ls[0].Payload) != "old" || ls[0].Attempt != 1 {
		t.Fatalf("Lease after Revive = %+v, %v; want %s, attempt 1", ls, err, id)
	}
	// It dies again at once, well within the duplicates window of the
	// earlier letter's ID: the new letter is stored, and is the only one.
	if err := q.DeadLetter(ctx, ls[0].Receipt, "410 Gone"); err != nil {
		t.Fatal(err)
	}
	dead, err = q.ListDead(ctx, "", 10)
	if err != nil || len(dead) != 1 || dead[0].Outcome != "410 Gone" || string(dead[0].Payload) != "old" {
		t.Fatalf("ListDead after the second death = %+v, %v; want %s dead of 410 Gone", dead, err, id)
	}
	if info, err := letters.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("the dead-letter stream holds %d letters, %v; want 1", info.State.Msgs, err)
	}
}

// A revival whose process died right after it wrote the live record (the
// dead record, the dead letter still there, no message published) is
// finished by the first Stats after stale (10 s): the task is delivered,
// and is no longer counted or listed dead.
func TestStatsFinishesAHalfDoneRevival(t *testing.T) {
	t.Parallel()
	url := serverURL(t)
	q := open(t, jsqueue.Options{URL: url})
	ctx := t.Context()
	id := killOne(t, q, "half", "503 Service Unavailable")
	js := connect(t, url)
	deadKV, err := js.KeyValue(ctx, q.Name()+"_dead")
	if err != nil {
		t.Fatal(err)
	}
	status, err := js.KeyValue(ctx, q.Name()+"_status")
	if err != nil {
		t.Fatal(err)
	}
	letters, err := js.Stream(ctx, q.Name()+"_dead_letters")
	if err != nil {
		t.Fatal(err)
	}
	letter, err := letters.GetLastMsgForSubject(ctx, q.Name()+".dead."+id)
	if err != nil {
		t.Fatal(err)
	}
	// The live record as Revive writes it, eleven seconds ago.
	e, err := deadKV.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"finished", "token", "until", "seq", "ack", "result"} {
		delete(r, k)
	}
	revived := time.Now().Add(-11 * time.Second)
	r["state"], r["attempts"], r["ready_at"] = "waiting", 0, revived
	r["dead_seq"], r["dead_rev"], r["reviving"] = letter.Sequence, e.Revision(), revived
	live, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := status.Create(ctx, id, live); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Lease(ctx, 10, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("Lease before the repair = %+v, %v; want nothing (no message yet)", got, err)
	}

	s, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Dead != 0 || s.Ready != 1 {
		t.Errorf("Stats = %+v, want the revived task ready and none dead", s)
	}
	if dead, err := q.ListDead(ctx, "", 10); err != nil || len(dead) != 0 {
		t.Errorf("ListDead after the repair = %+v, %v; want none", dead, err)
	}
	if _, err := letters.GetMsg(ctx, letter.Sequence); err == nil {
		t.Errorf("the dead letter %d is still there", letter.Sequence)
	}
	ls, err := q.Lease(ctx, 10, time.Minute)
	if err != nil || len(ls) != 1 || ls[0].ID != id || string(ls[0].Payload) != "half" || ls[0].Attempt != 1 {
		t.Fatalf("Lease after the repair = %+v, %v; want %s, attempt 1", ls, err, id)
	}
	var after map[string]any
	if e, err := status.Get(ctx, id); err != nil || json.Unmarshal(e.Value(), &after) != nil || after["reviving"] != nil {
		t.Errorf("the live record after the repair: %v, %v; want the mark cleared", after, err)
	}
	// The revived task keeps its place as a cursor: the death's letter.
	later := killOne(t, q, "later", "x")
	if dead, err := q.ListDead(ctx, id, 10); err != nil || len(dead) != 1 || dead[0].ID != later {
		t.Errorf("ListDead after the revived %s = %+v, %v; want %s", id, dead, err, later)
	}
}
