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
	return write - min(write/10, time.Second)
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
		r = r.WithContext(context.WithValue(r.Context(), clientBodyKey{}, b))
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// clientBody is a request's body as the proxy reads it, keeping the first
// error of a read (the bound crossed, the read timeout, the client gone).
// Safe for concurrent use (the transport reads it from its own goroutine).
type clientBody struct {
	rc  io.ReadCloser
	mu  sync.Mutex
	err error
}

type clientBodyKey struct{}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
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
// than read_timeout: 408; a client gone: nothing to answer, logged at
// debug level), or the upstream's (slower than its wait: 504; unreachable
// or failing: 502, both logged as warnings).
func (g *Gateway) proxyError(limit int64, refused *metrics.Refused) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		var big *http.MaxBytesError
		body := bodyError(r.Context())
		switch {
		case errors.As(err, &big) || errors.As(body, &big):
			g.log.Debug("request body too large", "max_body_bytes", limit)
			refused.Inc(reasonBodyTooLarge)
			tooLarge(w, limit)
		case body != nil && isTimeout(body):
			g.log.Debug("request body too slow", "err", body)
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestTimeout, `{"error":"request_timeout","reason":"the request body did not arrive within server.read_timeout","retryable":true}`)
		case body != nil || errors.Is(r.Context().Err(), context.Canceled):
			// No one is left to read an answer (nginx logs a 499).
			g.log.Debug("client went away", "err", err)
		case isTimeout(err) && !isDial(err):
			g.log.Warn("upstream timed out", "err", err)
			writeError(w, http.StatusGatewayTimeout, `{"error":"upstream_timeout","retryable":true}`)
		default:
			g.log.Warn("upstream unreachable", "err", err)
			writeError(w, http.StatusBadGateway, `{"error":"upstream_unavailable","retryable":true}`)
		}
	}
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
