package jsqueue

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// The states a record stores. A waiting task is queued or scheduled, and a
// leased task is leased or (once its lease ended) queued: which one
// depends on the instant it is read, so the record keeps the instants and
// [record.state] decides.
const (
	stWaiting   = "waiting"
	stLeased    = "leased"
	stSucceeded = "succeeded"
	stDead      = "dead"
	stCancelled = "cancelled"
)

// record is a task's status: its entry in the status bucket while it is
// not finished, then in the bucket of its final state. It is JSON, so that
// `nats kv get` shows it to an operator. The payload is not in it: it is
// the task's message in the tasks stream.
type record struct {
	State       string    `json:"state"`
	Key         string    `json:"key,omitempty"`
	Priority    int       `json:"priority"`
	Cost        float64   `json:"cost"`
	MaxAttempts int       `json:"max_attempts"`
	Attempts    int       `json:"attempts"`
	Enqueued    time.Time `json:"enqueued"`
	NotBefore   time.Time `json:"not_before,omitzero"`
	// ReadyAt is when a waiting task is ready: its not-before (or its
	// enqueue) or its retry instant.
	ReadyAt  time.Time `json:"ready_at"`
	Deadline time.Time `json:"deadline,omitzero"`
	// Token and Until are the current lease's.
	Token string    `json:"token,omitempty"`
	Until time.Time `json:"until,omitzero"`
	// Seq is the task message's sequence in the tasks stream and Ack the
	// reply subject of its latest delivery to a Lease, both known once it
	// was leased.
	Seq      uint64    `json:"seq,omitempty"`
	Ack      string    `json:"ack,omitempty"`
	Finished time.Time `json:"finished,omitzero"`
	Outcome  string    `json:"outcome,omitempty"`
	Result   []byte    `json:"result,omitempty"`
	// DeadSeq is the sequence, in the dead-letter stream, of the letter
	// of the death the task was last revived from (0: never revived): a
	// revived task keeps its place in the order of deaths, as a ListDead
	// cursor.
	DeadSeq uint64 `json:"dead_seq,omitempty"`
	// DeadRev is the revision, in the dead bucket, of the record of that
	// death, which the revival removes (up to that revision: never the
	// record of a later death).
	DeadRev uint64 `json:"dead_rev,omitempty"`
	// Reviving is when Revive wrote this record, until it has removed the
	// dead record, published the task's message and deleted the dead
	// letter (zero then): Stats finishes a revival left half done.
	Reviving time.Time `json:"reviving,omitzero"`
}

// encode fails only on an instant JSON cannot write (a year past 9999).
func (r *record) encode() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("jsqueue: encode a status record: %w", err)
	}
	return b, nil
}

func decode(b []byte) (record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("jsqueue: a status record is not valid: %w", err)
	}
	return r, nil
}

// finished reports whether the record is in a final state.
func (r *record) finished() bool {
	return r.State == stSucceeded || r.State == stDead || r.State == stCancelled
}

// held reports whether the record's lease is current at now.
func (r *record) held(now time.Time) bool {
	return r.State == stLeased && now.Before(r.Until)
}

// readyAt is when the task is or was ready: a lease that ended put it
// back at its end.
func (r *record) readyAt() time.Time {
	if r.State == stLeased {
		return r.Until
	}
	return r.ReadyAt
}

// state is the task's state at now.
func (r *record) state(now time.Time) queue.State {
	switch r.State {
	case stSucceeded:
		return queue.Succeeded
	case stDead:
		return queue.Dead
	case stCancelled:
		return queue.Cancelled
	case stLeased:
		if r.held(now) {
			return queue.Leased
		}
		return queue.Queued
	}
	if r.ReadyAt.After(now) {
		return queue.Scheduled
	}
	return queue.Queued
}

// info is what Get says of the task at now.
func (r *record) info(id string, now time.Time) queue.Info {
	st := r.state(now)
	in := queue.Info{
		ID: id, Key: r.Key, State: st, Priority: r.Priority, Cost: r.Cost,
		Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, Enqueued: r.Enqueued,
		ReadyAt: r.readyAt(), Deadline: r.Deadline, Finished: r.Finished,
		Outcome: r.Outcome, Result: r.Result,
	}
	if st == queue.Leased {
		in.LeasedUntil = r.Until
	}
	return in
}

// task is the task as enqueued, with payload.
func (r *record) task(payload []byte) queue.Task {
	return queue.Task{
		Key: r.Key, Payload: payload, Cost: r.Cost, Priority: r.Priority,
		NotBefore: r.NotBefore, Deadline: r.Deadline, MaxAttempts: r.MaxAttempts,
	}
}
