// Package upstream is the gateway's fast way to its upstream: a request
// without a body that may be sent again (GET, HEAD, OPTIONS, TRACE) goes
// over a pool of HTTP/1.1 keep-alive connections on the handler's own
// goroutine, its answer read by net/http's own parser (http.ReadResponse)
// and streamed back to the client.
//
// httputil.ReverseProxy over an http.Transport hands every request to two
// goroutines per upstream connection (one writing, one reading) and back,
// through channels, and allocates a 32 KiB buffer per answer: on two cores
// that is half of what a proxied request costs (docs/BENCHMARKS.md, "The
// gateway's proxy path against nginx"). Here the request is written and its answer read
// by the goroutine that serves the client, and nothing else runs.
//
// What reaches the upstream is what httputil.ReverseProxy with the same
// Rewrite sends (the differential test holds the two to it): the path and
// query joined to the target's as ProxyRequest.SetURL joins them, the
// query cleaned as ReverseProxy cleans it, the inbound header less the
// hop-by-hop fields (those Connection names too; "TE: trailers" is kept)
// and the forwarding ones, which Rewrite sets again; the target's host as
// Host; no User-Agent when the client sent none. One difference, on
// purpose: the client's Accept-Encoding passes as it is (http.Transport
// asks for gzip itself and decompresses, which a proxy has no reason to
// do). Answers come back as ReverseProxy returns them: hop-by-hop fields
// removed, the header appended to what the ResponseWriter already holds,
// 1xx answers forwarded, trailers announced and sent, a body of
// unknown length or an event stream flushed as it arrives.
//
// Requests with a body, upgrades and anything else Handles declines stay
// with httputil.ReverseProxy, which streams a body both ways at once.
package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Options configures a Client.
type Options struct {
	// Target is the upstream: an http:// URL with a host; its path and
	// query are joined to each request's. Required.
	Target *url.URL
	// Rewrite sets the forwarding fields of the outbound request, as
	// httputil.ReverseProxy's Rewrite does (the gateway's: SetURL to
	// Target, a trusted X-Forwarded-For chain kept, SetXForwarded). The
	// Out it is given holds a copy of the inbound URL and an empty Header:
	// what it sets in that Header is sent besides the inbound fields, and
	// Out.URL is where the request goes. Required.
	Rewrite func(*httputil.ProxyRequest)
	// Wait is how long the upstream has, from when the request is sent,
	// to start its answer (its status line and header); past it Forward
	// fails with a timeout. Required.
	Wait time.Duration
	// DialTimeout bounds a connection's opening. Default 30 s.
	DialTimeout time.Duration
	// MaxIdle is how many idle connections are kept. Default 1024.
	MaxIdle int
	// IdleTimeout is how long an idle connection is kept. Default 90 s
	// (http.DefaultTransport's).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds an answer's status line and header. Default
	// 1 MiB.
	MaxHeaderBytes int64
	// AnswerTimeout bounds the whole answer, its body included, from
	// when Forward starts: an upstream that stalls mid-body is cut there
	// (and so is the client's connection). 0: no bound but the client's.
	// The gateway sets write_timeout, the bound of its answer.
	AnswerTimeout time.Duration
}

// Client forwards requests to one upstream. Safe for concurrent use. It
// starts no goroutine: a connection is used by one request at a time, on
// that request's goroutine, and otherwise sits in the pool.
type Client struct {
	target    *url.URL
	rewrite   func(*httputil.ProxyRequest)
	wait      time.Duration
	dialer    net.Dialer
	maxIdle   int
	idleFor   time.Duration
	maxHead   int64
	answerFor time.Duration
	// unchecked: idle connections are reused without the peek (set by
	// the tests' negative control only).
	unchecked bool

	mu     sync.Mutex
	idle   []*conn // the most recently used last
	sweep  *time.Timer
	closed bool
}

// New checks opts and returns a Client.
func New(opts Options) (*Client, error) {
	t := opts.Target
	if t == nil || t.Scheme != "http" || t.Host == "" {
		return nil, errors.New("upstream: Target must be an http:// URL with a host")
	}
	if opts.Rewrite == nil {
		return nil, errors.New("upstream: Rewrite is required")
	}
	if opts.Wait <= 0 {
		return nil, fmt.Errorf("upstream: Wait must be positive (got %v)", opts.Wait)
	}
	c := &Client{
		target: t, rewrite: opts.Rewrite, wait: opts.Wait,
		dialer:  net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second},
		maxIdle: opts.MaxIdle, idleFor: opts.IdleTimeout, maxHead: opts.MaxHeaderBytes, answerFor: opts.AnswerTimeout,
	}
	if c.dialer.Timeout <= 0 {
		c.dialer.Timeout = 30 * time.Second
	}
	if c.maxIdle <= 0 {
		c.maxIdle = 1024
	}
	if c.idleFor <= 0 {
		c.idleFor = 90 * time.Second
	}
	if c.maxHead <= 0 {
		c.maxHead = 1 << 20
	}
	return c, nil
}

// Handles reports whether Forward takes r: a request without a body whose
// method may be sent again (on a connection the upstream closed while it
// was idle, Forward sends it again on a new one, as http.Transport does),
// asking for no upgrade and no 100-continue.
func (c *Client) Handles(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false
	}
	h := r.Header
	return (r.Body == nil || r.Body == http.NoBody) && r.ContentLength == 0 && len(r.TransferEncoding) == 0 &&
		h["Upgrade"] == nil && h["Expect"] == nil
}

// Forward sends r (one Handles takes) to the upstream and writes its
// answer to w. An error is returned only before the answer's status was
// written to w (1xx answers may have been forwarded): the caller answers
// (the error is a *net.OpError with Op "dial" when the upstream could not
// be reached, a timeout net.Error when it did not answer within Wait). Once the answer's header is written, a failure to
// read the rest from the upstream or to write it to the client aborts the
// client's connection (panic(http.ErrAbortHandler), as
// httputil.ReverseProxy does). The request's context ending (the client
// gone) interrupts the exchange and closes its upstream connection.
func (c *Client) Forward(w http.ResponseWriter, r *http.Request) error {
	out := c.outbound(r)
	ctx := r.Context()
	var answerBy time.Time // zero: no bound
	if c.answerFor > 0 {
		answerBy = time.Now().Add(c.answerFor)
	}
	got1xx := func(res *http.Response) {
		// As ReverseProxy's Got1xxResponse, but the fields already set for
		// the final answer (RateLimit) are kept for it, not sent now.
		h := w.Header()
		kept := h.Clone()
		clear(h)
		maps.Copy(h, res.Header)
		w.WriteHeader(res.StatusCode)
		clear(h) // WriteHeader does not clear it for a 1xx
		maps.Copy(h, kept)
	}
	for attempt := 0; ; attempt++ {
		cn, err := c.get(ctx)
		if err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, cn.interrupt)
		res, err := cn.exchange(r, out, c.maxHead, answerBy, got1xx)
		if err != nil {
			stop()
			cn.close()
			// The upstream closed a connection the pool still held (as it
			// may once its own idle timeout passes): nothing was answered,
			// so the request goes again, once, on a new connection.
			var ne net.Error
			if cn.reused && cn.read == 0 && attempt == 0 && ctx.Err() == nil && !(errors.As(err, &ne) && ne.Timeout()) {
				continue
			}
			return err
		}
		c.answer(w, cn, res, stop)
		return nil
	}
}

// answer writes res to w (its body streamed from cn) and gives cn back to
// the pool when the exchange left it reusable.
func (c *Client) answer(w http.ResponseWriter, cn *conn, res *http.Response, stop func() bool) {
	removeHopByHop(res.Header)
	h := w.Header()
	for k, vv := range res.Header {
		if h[k] == nil {
			h[k] = vv
		} else {
			h[k] = append(h[k], vv...)
		}
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)
	if err := copyBody(w, res); err != nil {
		stop()
		cn.close()
		panic(http.ErrAbortHandler) // the answer cannot be finished: the client's connection is cut
	}
	_ = res.Body.Close() // at its end: the trailers are in res.Trailer
	if !stop() || res.Close || cn.broken || cn.br.Buffered() > 0 || res.Request.Method == http.MethodHead {
		// Interrupted (the client went away), not to be used again, or
		// holding bytes no request asked for. After a HEAD too: the
		// commonest of those is a body an upstream writes to a HEAD, later
		// than its header, which would be read as the next answer.
		cn.close()
	} else {
		c.put(cn)
	}
	if len(res.Trailer) > 0 {
		// Chunked, so that the trailers can follow (net/http would
		// otherwise count a short body and send a Content-Length).
		_ = http.NewResponseController(w).Flush()
	}
	if len(res.Trailer) == announced {
		for k, vv := range res.Trailer {
			h[k] = append(h[k], vv...)
		}
		return
	}
	for k, vv := range res.Trailer {
		for _, v := range vv {
			h.Add(http.TrailerPrefix+k, v)
		}
	}
}

// bufs holds the buffers bodies are copied through.
var bufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Buffers is the same pool of 32 KiB buffers as an
// httputil.ReverseProxy's BufferPool, for the requests Forward does not
// take (ReverseProxy would otherwise allocate one per answer).
var Buffers httputil.BufferPool = buffers{}

type buffers struct{}

func (buffers) Get() []byte  { return *bufs.Get().(*[]byte) }
func (buffers) Put(b []byte) { bufs.Put(&b) }

// copyBody copies res's body to w, flushing after each piece when the
// body's length is not known or it is an event stream (as ReverseProxy
// does: such a body is read by its client as it comes).
func copyBody(w http.ResponseWriter, res *http.Response) error {
	if res.Body == http.NoBody {
		return nil
	}
	var flush *http.ResponseController
	if res.ContentLength == -1 || isEventStream(res.Header) {
		// The header goes at once, before the first piece arrives (and
		// so with no Content-Type sniffed from it, as ReverseProxy's).
		flush = http.NewResponseController(w)
		if err := flush.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
	}
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := *bp
	for {
		n, err := res.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if flush != nil {
				if ferr := flush.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
					return ferr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if !strings.HasPrefix(ct, "text/event-stream") {
		return false
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "text/event-stream"
}

// outbound is the request as it goes: a copy of r's URL and an empty
// header, through cleanQueryParams and Rewrite.
func (c *Client) outbound(r *http.Request) *http.Request {
	u := *r.URL
	u.RawQuery = cleanQueryParams(u.RawQuery)
	out := &http.Request{Method: r.Method, URL: &u, Header: make(http.Header, 4), Host: r.Host}
	c.rewrite(&httputil.ProxyRequest{In: r, Out: out})
	return out
}

// CloseIdle closes the idle connections, and those given back later: the
// gateway calls it as it stops.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	if c.sweep != nil {
		c.sweep.Stop()
		c.sweep = nil
	}
	c.mu.Unlock()
	for _, cn := range idle {
		cn.close()
	}
}

// get takes the most recently used idle connection on which nothing
// arrived while it was idle, or opens one, and gives it Wait from now for
// the exchange's head. It closes the connections idle for longer than
// IdleTimeout, and those on which the upstream wrote while they were idle
// (a close, a "408 Request Timeout" before one, bytes past an answer's
// end): what came then answers no request, and read as the next answer it
// would shift every answer after it to the wrong request.
func (c *Client) get(ctx context.Context) (*conn, error) {
	for {
		var stale []*conn
		var cn *conn
		now := time.Now()
		c.mu.Lock()
		old := 0 // idle is in the order the connections were given back
		for old < len(c.idle) && now.Sub(c.idle[old].idleSince) >= c.idleFor {
			old++
		}
		if old > 0 {
			stale = slices.Clone(c.idle[:old])
			c.idle = slices.Delete(c.idle, 0, old)
		}
		if n := len(c.idle); n > 0 {
			cn, c.idle = c.idle[n-1], c.idle[:n-1]
		}
		c.mu.Unlock()
		for _, s := range stale {
			s.close()
		}
		if cn == nil {
			break
		}
		// The deadline first: a past one (the last exchange's) would fail
		// the peek before it looks.
		if cn.setDeadline(now.Add(c.wait), false) == nil && (c.unchecked || quiet(cn.nc)) {
			cn.reused = true
			return cn, nil
		}
		cn.close()
	}
	nc, err := c.dialer.DialContext(ctx, "tcp", c.target.Host)
	if err != nil {
		return nil, err
	}
	cn := &conn{nc: nc}
	cn.br = bufio.NewReaderSize(cn, 4<<10)
	cn.bw = bufio.NewWriterSize(nc, 4<<10)
	if err := cn.setDeadline(time.Now().Add(c.wait), false); err != nil {
		cn.close()
		return nil, err
	}
	return cn, nil
}

// put gives cn back to the pool, or closes it when the pool is full or
// closed.
func (c *Client) put(cn *conn) {
	cn.idleSince = time.Now()
	c.mu.Lock()
	if c.closed || len(c.idle) >= c.maxIdle {
		c.mu.Unlock()
		cn.close()
		return
	}
	c.idle = append(c.idle, cn)
	if c.sweep == nil {
		c.sweep = time.AfterFunc(c.idleFor, c.sweepIdle)
	}
	c.mu.Unlock()
}

// sweepIdle closes the connections idle for IdleTimeout, and runs again
// when the oldest left will be, while any is left: without traffic, idle
// connections are closed too.
func (c *Client) sweepIdle() {
	now := time.Now()
	c.mu.Lock()
	old := 0
	for old < len(c.idle) && now.Sub(c.idle[old].idleSince) >= c.idleFor {
		old++
	}
	stale := slices.Clone(c.idle[:old])
	c.idle = slices.Delete(c.idle, 0, old)
	if len(c.idle) > 0 && !c.closed && c.sweep != nil {
		c.sweep.Reset(c.idleFor - now.Sub(c.idle[0].idleSince))
	} else {
		c.sweep = nil
	}
	c.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
}

// conn is an upstream connection. Its reader counts the bytes an exchange
// read, and bounds those of an answer's head.
type conn struct {
	nc        net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	reused    bool // taken from the pool
	// interrupted: the request's context ended (interrupt ran).
	interrupted atomic.Bool
	read        int64 // bytes read in this exchange
	headLeft    int64 // bytes the answer's head may still take; -1 once it is read
	broken      bool  // a Read failed, or the head was too large
	err         error // what the failed Read returned
}

// errHeadTooLarge is the read error of an answer whose status line and
// header exceed MaxHeaderBytes.
var errHeadTooLarge = errors.New("upstream: the answer's header is too large")

func (cn *conn) Read(p []byte) (int, error) {
	if cn.headLeft == 0 {
		cn.broken = true
		return 0, errHeadTooLarge
	}
	if cn.headLeft > 0 && int64(len(p)) > cn.headLeft {
		p = p[:cn.headLeft]
	}
	n, err := cn.nc.Read(p)
	cn.read += int64(n)
	if cn.headLeft > 0 {
		cn.headLeft -= int64(n)
	}
	if err != nil {
		cn.broken, cn.err = true, err
	}
	return n, err
}

// interrupt ends what the connection is doing (the request's context
// ended): its Read or Write returns a timeout, and so does any after it
// (setDeadline keeps it so).
func (cn *conn) interrupt() {
	cn.interrupted.Store(true)
	_ = cn.nc.SetDeadline(time.Unix(1, 0))
}

// setDeadline sets the connection's deadlines (the read deadline alone
// with readOnly), unless interrupt has run: the deadline it set in the
// past stays. (interrupt marks before it sets, and this sets before it
// looks: whichever runs second, the past deadline is the one left.)
func (cn *conn) setDeadline(t time.Time, readOnly bool) error {
	var err error
	if readOnly {
		err = cn.nc.SetReadDeadline(t)
	} else {
		err = cn.nc.SetDeadline(t)
	}
	if cn.interrupted.Load() {
		return cn.nc.SetDeadline(time.Unix(1, 0))
	}
	return err
}

func (cn *conn) close() { _ = cn.nc.Close() }

// exchange writes the request's head and reads the answer's, forwarding
// any 1xx through got1xx (RFC 9110 15.2: a proxy forwards them), within
// the deadline get set; the answer's body, unless it is already all read,
// must then arrive by answerBy (zero: no bound; the client leaving
// interrupts it anyway).
func (cn *conn) exchange(in, out *http.Request, maxHead int64, answerBy time.Time, got1xx func(*http.Response)) (*http.Response, error) {
	cn.read, cn.broken, cn.err = 0, false, nil
	if err := writeHead(cn.bw, in, out); err != nil {
		return nil, err
	}
	if err := cn.bw.Flush(); err != nil {
		return nil, err
	}
	cn.headLeft = maxHead
	for informational := 0; ; informational++ {
		res, err := http.ReadResponse(cn.br, in)
		if err != nil {
			switch {
			case cn.headLeft == 0:
				err = errHeadTooLarge
			case cn.err != nil && err != cn.err:
				// The read's own failure (the deadline, a reset), not the
				// parser's view of the partial line it left.
				err = cn.err
			}
			return nil, err
		}
		code := res.StatusCode
		if code < 100 {
			cn.broken = true
			return nil, fmt.Errorf("upstream: status %d is not a status (100 to 999)", code)
		}
		if code >= 200 {
			cn.headLeft = -1
			buffered := res.Body == http.NoBody || res.ContentLength >= 0 && int64(cn.br.Buffered()) >= res.ContentLength
			if !buffered {
				if err := cn.setDeadline(answerBy, true); err != nil {
					return nil, err
				}
			}
			return res, nil
		}
		if code == http.StatusSwitchingProtocols || informational == 5 {
			cn.broken = true
			return nil, fmt.Errorf("upstream: unexpected %d answer to a request that asked for no upgrade, or more than 5 informational answers", code)
		}
		got1xx(res)
		cn.headLeft = maxHead // each informational answer has its own bound
	}
}

// writeHead writes the request line and header of the request whose
// inbound side is in and outbound side out.
func writeHead(bw *bufio.Writer, in, out *http.Request) error {
	host := out.Host
	if host == "" {
		host = out.URL.Host
	}
	uri := out.URL.RequestURI()
	if !httpguts.ValidHostHeader(host) || strings.ContainsAny(uri, " \r\n") {
		return fmt.Errorf("upstream: the outbound request's host or target is not valid in a request line")
	}
	bw.WriteString(in.Method)
	bw.WriteByte(' ')
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	listed := in.Header["Connection"]
	for k, vv := range in.Header {
		if skipped(k) || len(listed) > 0 && httpguts.HeaderValuesContainsToken(listed, k) {
			continue
		}
		if k == "Te" {
			if httpguts.HeaderValuesContainsToken(vv, "trailers") {
				bw.WriteString("Te: trailers\r\n")
			}
			continue
		}
		if err := writeField(bw, k, vv); err != nil {
			return err
		}
	}
	for k, vv := range out.Header {
		if err := writeField(bw, k, vv); err != nil {
			return err
		}
	}
	_, err := bw.WriteString("\r\n")
	return err
}

func writeField(bw *bufio.Writer, k string, vv []string) error {
	if !httpguts.ValidHeaderFieldName(k) {
		return fmt.Errorf("upstream: invalid header field name %q", k)
	}
	for _, v := range vv {
		if !httpguts.ValidHeaderFieldValue(v) {
			return fmt.Errorf("upstream: invalid header field value for %q", k)
		}
		bw.WriteString(k)
		bw.WriteString(": ")
		bw.WriteString(v)
		bw.WriteString("\r\n")
	}
	return nil
}

// skipped: an inbound field not sent as it is — hop-by-hop (RFC 9110
// 7.6.1; TE is written apart), the framing and Host that writeHead writes
// itself, and the forwarding fields Rewrite sets.
func skipped(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Host",
		"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

// hopByHop are the answer's fields removed before it is forwarded, as
// httputil.ReverseProxy removes them.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = strings.TrimSpace(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
}

// cleanQueryParams is httputil.ReverseProxy's (not exported): a query
// holding a ";" or a "%" that is not an escape is re-encoded, dropping the
// parameters that cannot be parsed.
func cleanQueryParams(s string) string {
	reencode := func(s string) string {
		v, _ := url.ParseQuery(s)
		return v.Encode()
	}
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			return reencode(s)
		case '%':
			if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
				return reencode(s)
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
