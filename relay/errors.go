package relay

import (
	"errors"
	"fmt"
)

// Errors of the relay. The HTTP API maps each to its status in one place.
var (
	// ErrInvalid: a request, a task ID or an argument is malformed (400).
	ErrInvalid = errors.New("relay: invalid input")
	// ErrForbidden: a request addresses something the relay does not send
	// to: another origin, a header that would smuggle (403).
	ErrForbidden = errors.New("relay: refused")
	// ErrTooLarge: a body or header is over its bound (413).
	ErrTooLarge = errors.New("relay: too large")
	// ErrNoQueue: no queue or target has that name (404).
	ErrNoQueue = errors.New("relay: no such queue")
	// ErrNotFound: no task has that ID, or it is past its retention (404).
	ErrNotFound = errors.New("relay: no such task")
	// ErrConflict: the task is not in a state the call needs (a replay of
	// a task that is not dead, a cancel of a finished one), or a key is
	// held by a task with another request (409).
	ErrConflict = errors.New("relay: conflict")
	// ErrUnavailable: the queue's backend cannot keep the work now (a full
	// disk, a NATS outage); nothing was accepted (503).
	ErrUnavailable = errors.New("relay: the queue cannot keep work now")
	// ErrClosed: the relay was closed.
	ErrClosed = errors.New("relay: closed")
)

// RequestError says which request of an Enqueue call is refused, which of
// its fields and why. A batch is accepted whole or refused whole.
type RequestError struct {
	// Index is the request's position in the call (0 for the first).
	Index int
	// Field is the Request field at fault ("url", "header", "body", ...).
	Field string
	// Reason says what is wrong, in words.
	Reason string
	// Kind is ErrInvalid, ErrForbidden, ErrTooLarge or ErrConflict.
	Kind error
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("relay: request %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Unwrap returns the error's kind, for errors.Is.
func (e *RequestError) Unwrap() error { return e.Kind }
