package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/metrics"
)

// What the gateway bounds, and how: a slow or idle client meets the public
// http.Server's timeouts (server.read_header_timeout, read_timeout,
// write_timeout, idle_timeout) and the listener's cap (max_connections);
// a request body meets limitBody (max_body_bytes); an upstream slow to
// answer meets the transport's response-header timeout, a little shorter
// than write_timeout so that its 504 can still be written.

// upstreamWait is how long the upstream has to start its answer: the
// write timeout less a tenth of it (at most 1 s), the time left to write
// the 504 before the connection's write deadline.
func upstreamWait(write time.Duration) time.Duration {
	return write - answerTime(write)
}

// answerTime is how long the gateway's own answer to a failed request has
// to be written: a tenth of the write timeout, at most 1 s.
func answerTime(write time.Duration) time.Duration {
	return min(write/10, time.Second)
}

// extendWrite gives the answer to a client's failure (a body too slow,
// too large or malformed, found when the body's read failed, which may be
// as late as read_timeout: at or past the connection's write deadline when
// write_timeout is no longer) answerTime to be written, rather than
// losing it with the connection.
func extendWrite(w http.ResponseWriter, write time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerTime(write))) // unsupported: the deadline stays
}

// limitBody refuses with 413 a request whose Content-Length is over limit,
// before next (the upstream) sees it, and bounds any other body to limit
// bytes: reading past it fails, and proxyError answers 413. It records
// what failed reading the client's body, for proxyError to tell a client's
// failure from the upstream's.
func limitBody(limit int64, refused *metrics.Refused, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			refused.Inc(reasonBodyTooLarge)
			tooLarge(w, limit)
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &clientBody{rc: http.MaxBytesReader(w, r.Body, limit)}
		b.idle.L = &b.mu
		r = r.WithContext(context.WithValue(r.Context(), clientBodyKey{}, b))
		r.Body = b
		next.ServeHTTP(w, r)
		b.stop(w)
	})
}

// clientBody is a request's body as the proxy reads it, keeping the first
// error of a read (the bound crossed, the read timeout, the client gone,
// a malformed body) and whether it was read to its end. Safe for
// concurrent use (the transport reads it from its own goroutine).
type clientBody struct {
	rc      io.ReadCloser
	mu      sync.Mutex
	err     error
	eof     bool
	reading int       // Reads running
	idle    sync.Cond // on mu: reading fell to 0
}

type clientBodyKey struct{}

func (b *clientBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.reading++
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	b.mu.Lock()
	if b.reading--; b.reading == 0 {
		b.idle.Broadcast()
	}
	if err == io.EOF {
		b.eof = true
	} else if err != nil && b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	return n, err
}

// stop ends the reading of a body the request's handler (the proxy) has
// returned without reading to its end — its upstream answered first, or
// it failed: the connection's read deadline is put in the past, which
// ends a Read the transport still has running and any later one, and
// stop waits for the running one to return. Otherwise net/http, which
// interrupts such a Read itself when the handler returns, would clear the
// deadline to do so, then read what is left of the body to keep the
// connection, with no bound: a client trickling a long body would hold
// it after its answer. The connection is then closed after the answer.
func (b *clientBody) stop(w http.ResponseWriter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.eof {
		return
	}
	if err := http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0)); err != nil {
		return // not an HTTP/1 connection: nothing to interrupt, and a Read still running is not waited for
	}
	for b.reading > 0 {
		b.idle.Wait()
	}
}

// closeIfBodyUnread is the proxy's ModifyResponse: an answer of the
// upstream that comes before the client's body was read to its end (an
// upstream refusing an upload) is sent at once with Connection: close.
// Otherwise net/http would first read what is left of the body, until
// read_timeout for a slow one, to keep the connection, and the answer
// would wait for it, or be lost when write_timeout has passed by then.
func closeIfBodyUnread(res *http.Response) error {
	b, _ := res.Request.Context().Value(clientBodyKey{}).(*clientBody)
	if b == nil {
		return nil
	}
	b.mu.Lock()
	unread := !b.eof
	b.mu.Unlock()
	if unread {
		res.Header.Set("Connection", "close")
	}
	return nil
}

func (b *clientBody) Close() error { return b.rc.Close() }

// bodyError is what failed reading the client's body of the request of
// ctx, or nil.
func bodyError(ctx context.Context) error {
	b, _ := ctx.Value(clientBodyKey{}).(*clientBody)
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// reasonBodyTooLarge is a 413's reason in the refused requests' metric.
const reasonBodyTooLarge = "body_too_large"

func tooLarge(w http.ResponseWriter, limit int64) {
	w.Header().Set("Connection", "close") // what is left of the body is not read
	writeError(w, http.StatusRequestEntityTooLarge,
		fmt.Sprintf(`{"error":"body_too_large","reason":"a request body is at most %d bytes (server.max_body_bytes)","retryable":false}`, limit))
}

func writeError(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body+"\n")
}

// proxyError answers a request the upstream did not answer, saying whose
// failure it was: the client's (a body over the bound: 413; a body slower
// than read_timeout: 408; a body net/http cannot read, such as a bad
// chunk size or trailer: 400 bad_body, counted as refused; a client whose
// connection closed or whose request was canceled: nothing to answer and
// the connection is closed, all logged at debug level), or the upstream's
// (slower than its wait: 504; unreachable or failing: 502, both logged as
// warnings). A client's failure is answered within answerTime of being
// found, even past the write timeout. It never returns without an answer: a handler that writes
// nothing would have net/http send an empty 200.
func (g *Gateway) proxyError(limit int64, write time.Duration, refused *metrics.Refused) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		var big *http.MaxBytesError
		body := bodyError(r.Context())
		switch {
		case errors.As(err, &big) || errors.As(body, &big):
			g.log.Debug("request body too large", "max_body_bytes", limit)
			refused.Inc(reasonBodyTooLarge)
			extendWrite(w, write)
			tooLarge(w, limit)
		case body != nil && isTimeout(body):
			g.log.Debug("request body too slow", "err", body)
			extendWrite(w, write)
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestTimeout, `{"error":"request_timeout","reason":"the request body did not arrive within server.read_timeout","retryable":true}`)
		case body != nil && !connectionEnded(body):
			g.log.Debug("request body malformed", "err", body)
			refused.Inc(refuseBadBody.code)
			extendWrite(w, write)
			w.Header().Set("Connection", "close") // the rest of the body cannot be read
			refuse(w, refuseBadBody)
		case body != nil || errors.Is(r.Context().Err(), context.Canceled):
			// No one is left to read an answer (nginx logs a 499): the
			// connection is closed rather than answered.
			g.log.Debug("client went away", "err", err)
			panic(http.ErrAbortHandler)
		case isTimeout(err) && !isDial(err):
			g.log.Warn("upstream timed out", "err", err)
			writeError(w, http.StatusGatewayTimeout, `{"error":"upstream_timeout","retryable":true}`)
		default:
			g.log.Warn("upstream unreachable", "err", err)
			writeError(w, http.StatusBadGateway, `{"error":"upstream_unavailable","retryable":true}`)
		}
	}
}

// refuseBadBody is a request whose body net/http cannot read (a chunk size
// that is not hexadecimal or too large, a chunk longer than its size, a
// trailer that is not a header): what it holds is not known, so it is not
// forwarded.
var refuseBadBody = &refusal{"bad_body", "the request body is malformed (its chunked encoding or its trailer cannot be read), so it cannot be forwarded"}

// connectionEnded reports whether err, a failed read of a client's body,
// is its connection ending (closed before the body's end, reset or
// otherwise failing) rather than bytes that are not a body: the client
// went away. net/http does not export its errors for a malformed body,
// so they are what is left.
func connectionEnded(err error) bool {
	var op *net.OpError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.As(err, &op)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isDial: the error is the upstream's connect failing (unreachable, even
// when it was a timeout).
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
