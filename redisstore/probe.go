package redisstore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// ErrMisconfigured is wrapped by the errors of a Redis that answers but
// refuses the connection's configuration: credentials it does not take
// (WRONGPASS, NOAUTH, NOPERM), a certificate the TLS configuration does
// not trust, a server that does not speak TLS when TLS is asked, a
// database it does not have, a Sentinel master it does not know. Waiting
// does not heal these, unlike a Redis that is not up yet: Dial returns
// them, and a Conn that meets one later keeps reporting it (the store's
// failure policy decides meanwhile).
var ErrMisconfigured = errors.New("configuration refused by Redis")

// misconfigured wraps a refusal with ErrMisconfigured, a hint and where it
// happened.
func misconfigured(addr, what string, err error, systemRoots bool) error {
	return fmt.Errorf("%w: %s at %s: %s", ErrMisconfigured, what, addr, hint(err, systemRoots))
}

// probe opens one connection to addr and checks, before rueidis is asked
// to connect, that the server takes the options: the TLS handshake when
// TLS is on, a first PING (see greet), AUTH with the credentials, SELECT
// of the database, then PING as the user. A server that is not reachable,
// or not ready (LOADING), is a plain error (the caller retries); a refusal
// wraps ErrMisconfigured.
func (c *Conn) probe(ctx context.Context, addr string, user, password string, db int) error {
	nc, err := c.dialProbe(ctx, addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 512)
	if err := c.greet(ctx, nc, r, "Redis", addr, password != ""); err != nil {
		return err
	}
	if password != "" {
		if err := c.authenticate(nc, r, "Redis", addr, user, password); err != nil {
			return c.readFailure(addr, err)
		}
	}
	if db != 0 {
		reply, err := command(nc, r, "SELECT", strconv.Itoa(db))
		if err != nil {
			return c.readFailure(addr, fmt.Errorf("SELECT at %s: %w", addr, err))
		}
		if msg, isErr := reply.(replyError); isErr {
			if strings.Contains(string(msg), "cluster mode") {
				return fmt.Errorf("%w: database %d at %s: a Redis Cluster has only database 0 (%s)", ErrMisconfigured, db, addr, msg)
			}
			return refusal("Redis", addr, fmt.Sprintf("SELECT %d (the database)", db), msg, password != "")
		}
	}
	if password == "" {
		return nil // greet's PING was as this client
	}
	reply, err := command(nc, r, "PING")
	if err != nil {
		return c.readFailure(addr, fmt.Errorf("PING %s: %w", addr, err))
	}
	if msg, isErr := reply.(replyError); isErr {
		return refusal("Redis", addr, "PING", msg, true)
	}
	return nil
}

// greet sends a PING before anything else, before any password: a
// server that does not answer it in RESP never gets one. Without TLS, a
// server that closes the connection instead is asked whether it speaks
// TLS (a Redis tls-port spoken to in clear text closes at once): then it
// is a refusal of the configuration, never a password sent in clear text
// at each retry. NOAUTH is the answer a server that wants a password gives
// before AUTH; with none to give, a refusal.
func (c *Conn) greet(ctx context.Context, nc net.Conn, r *bufio.Reader, who, addr string, password bool) error {
	reply, err := command(nc, r, "PING")
	if err != nil {
		if c.opts.TLS == nil && c.speaksTLS(ctx, addr) {
			return fmt.Errorf("%w: %s at %s speaks TLS, and the connection is configured in clear text: configure TLS (its CA file, or the system's roots)", ErrMisconfigured, who, addr)
		}
		return c.readFailure(addr, fmt.Errorf("PING %s: %w", addr, err))
	}
	if msg, isErr := reply.(replyError); isErr {
		if code, _, _ := strings.Cut(string(msg), " "); code == "NOAUTH" && password {
			return nil // AUTH comes next
		}
		return refusal(who, addr, "PING", msg, password)
	}
	return nil
}

// speaksTLS reports whether the server at addr answers a TLS handshake:
// detection only — nothing is sent after it, and no certificate is
// trusted for anything (hence no verification here).
func (c *Conn) speaksTLS(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	nc, err := c.dial(ctx, addr, &net.Dialer{Timeout: c.connectTimeout}, nil)
	if err != nil {
		return false
	}
	defer nc.Close()
	host, _, _ := net.SplitHostPort(addr)
	tc := tls.Client(nc, &tls.Config{ServerName: host, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) // detection: no data is sent
	err = tc.HandshakeContext(ctx)
	var op *net.OpError
	return err == nil || errors.As(err, &op) && op.Op == "remote error" // a TLS server that wants a client certificate
}

// readFailure says what a failed exchange with a server means: with TLS,
// a handshake the server refused after the client's part (TLS 1.3 reports
// a refused client certificate on the first read) is a refusal of the
// configuration; without TLS, a server that closes the connection at
// once may be a TLS port, which the error says.
func (c *Conn) readFailure(addr string, err error) error {
	if c.opts.TLS != nil {
		if refused := tlsRefusal(addr, err, c.opts.TLS.RootCAs == nil); refused != nil {
			return refused
		}
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%w (the server closed the connection without answering: if it is a TLS port, configure TLS)", err)
	}
	return err
}

// probeSentinels asks the Sentinels, one after the other, for the
// master's address. An unknown master is a refusal only when every
// Sentinel configured says so: one that does not answer may know it.
func (c *Conn) probeSentinels(ctx context.Context) (string, error) {
	s := c.opts.Sentinel
	var errs []error
	unknown := 0
	for _, a := range s.Addrs {
		master, err := c.askSentinel(ctx, a)
		if err == nil {
			return master, nil
		}
		if errors.Is(err, errUnknownMaster) {
			unknown++
		} else if errors.Is(err, ErrMisconfigured) {
			return "", err
		}
		errs = append(errs, err)
	}
	if unknown > 0 && unknown == len(errs) {
		return "", fmt.Errorf("%w: no Sentinel at %s knows a master named %q (SENTINEL GET-MASTER-ADDR-BY-NAME)", ErrMisconfigured, strings.Join(s.Addrs, ", "), s.MasterName)
	}
	return "", errors.Join(errs...)
}

var errUnknownMaster = errors.New("unknown master")

func (c *Conn) askSentinel(ctx context.Context, addr string) (string, error) {
	s := c.opts.Sentinel
	nc, err := c.dialProbe(ctx, addr)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 512)
	if err := c.greet(ctx, nc, r, "the Sentinel", addr, s.Password != ""); err != nil {
		return "", err
	}
	if s.Password != "" {
		if err := c.authenticate(nc, r, "the Sentinel", addr, s.Username, s.Password); err != nil {
			return "", c.readFailure(addr, err)
		}
	}
	reply, err := command(nc, r, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
	if err != nil {
		return "", c.readFailure(addr, fmt.Errorf("Sentinel %s: %w", addr, err))
	}
	switch v := reply.(type) {
	case replyError:
		return "", refusal("the Sentinel", addr, "SENTINEL GET-MASTER-ADDR-BY-NAME", v, s.Password != "")
	case nil:
		return "", fmt.Errorf("Sentinel %s: %w %q", addr, errUnknownMaster, s.MasterName)
	case []any:
		if len(v) == 2 {
			host, okh := v[0].(string)
			port, okp := v[1].(string)
			if okh && okp {
				return net.JoinHostPort(host, port), nil
			}
		}
	}
	return "", fmt.Errorf("Sentinel %s: SENTINEL GET-MASTER-ADDR-BY-NAME answered %v: not a Sentinel", addr, reply)
}

// authenticate sends AUTH: with a user name (Redis 6 ACLs; "default"
// without one, as rueidis's HELLO does), or, to a Redis older than 6 that
// does not take one, the password alone.
func (c *Conn) authenticate(nc net.Conn, r *bufio.Reader, who, addr, user, password string) error {
	name := user
	if name == "" {
		name = "default"
	}
	reply, err := command(nc, r, "AUTH", name, password)
	if err != nil {
		return fmt.Errorf("AUTH at %s: %w", addr, err)
	}
	if msg, isErr := reply.(replyError); isErr && user == "" && strings.Contains(string(msg), "wrong number of arguments") {
		if reply, err = command(nc, r, "AUTH", password); err != nil {
			return fmt.Errorf("AUTH at %s: %w", addr, err)
		}
	}
	if msg, isErr := reply.(replyError); isErr {
		return refusal(who, addr, "AUTH as "+strconv.Quote(name), msg, true)
	}
	return nil
}

// refusal is an error reply of who (Redis, the Sentinel) at addr to
// what: a refusal of the configuration, or, for a reply that means "not
// now" (transient), a plain error to retry.
func refusal(who, addr, what string, msg replyError, authed bool) error {
	code, _, _ := strings.Cut(string(msg), " ")
	switch {
	case transient(code):
		return fmt.Errorf("%s at %s: %s", what, addr, msg)
	case code == "NOAUTH" && !authed:
		return fmt.Errorf("%w: %s at %s asks for a password (%s): give one", ErrMisconfigured, who, addr, msg)
	case code == "WRONGPASS":
		return fmt.Errorf("%w: %s at %s: the user name or the password is wrong (%s)", ErrMisconfigured, what, addr, msg)
	case code == "NOPERM":
		return fmt.Errorf("%w: %s at %s: the user may not run it (%s): see the least ACL in docs/production.md", ErrMisconfigured, what, addr, msg)
	}
	return fmt.Errorf("%w: %s at %s: %s", ErrMisconfigured, what, addr, msg)
}

// transient reports whether an error reply's code means "not now": a
// Redis loading its data, running a slow script, without its master, in
// a Cluster that is not ready. Every other error reply to the probe's
// commands refuses the configuration.
func transient(code string) bool {
	switch code {
	case "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN":
		return true
	}
	return false
}

// dialProbe connects to addr as rueidis will (the Conn's dialer, TLS
// when configured), bounded by the connect timeout, and bounds the whole
// exchange that follows by it too.
func (c *Conn) dialProbe(ctx context.Context, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	nc, err := c.dial(ctx, addr, &net.Dialer{Timeout: c.connectTimeout}, c.opts.TLS)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	return nc, nil
}

// tlsRefusal says what a failed TLS handshake means: a refusal of the
// configuration (a certificate not trusted or not for this name, a server
// that does not speak TLS, a server that refused this client's
// certificate) or a connection that failed on the way (nil). systemRoots:
// the server was verified against the system's roots, not a CA file.
func tlsRefusal(addr string, err error, systemRoots bool) error {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return misconfigured(addr, "the TLS handshake with Redis", err, systemRoots)
	case errors.As(err, &record):
		return fmt.Errorf("%w: Redis at %s does not speak TLS (%v): connect without TLS, or to its tls-port", ErrMisconfigured, addr, err)
	case errors.As(err, &op) && op.Op == "remote error":
		return misconfigured(addr, "the TLS handshake with Redis", err, systemRoots)
	}
	return nil
}

// hint adds what to check to a TLS refusal.
func hint(err error, systemRoots bool) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		op       *net.OpError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknown) && systemRoots:
		return msg + " (no CA of the system's roots signed Redis's certificate: give the CA file of the CA that did)"
	case errors.As(err, &unknown):
		return msg + " (the CA file does not hold the CA that signed Redis's certificate)"
	case errors.As(err, &hostname):
		return msg + " (set the TLS server name to a name the certificate holds)"
	case errors.As(err, &invalid):
		return msg + " (Redis's certificate is expired, not yet valid, or not for a server)"
	case errors.As(err, &op) && op.Op == "remote error":
		return msg + " (Redis refused this client: it may require a client certificate, or one another CA signed)"
	}
	return msg
}

// Replies, as command reads them: string, int64, replyError, nil (a null
// bulk string or array), []any.
type replyError string

// maxReply bounds a reply's strings and arrays, and maxReplyBytes the
// whole of it: the probe reads short answers only, and a server that is
// not Redis gets no more of the process's memory than that.
const (
	maxReply      = 4096
	maxReplyBytes = 64 << 10
)

// command writes a command in RESP and reads its reply.
func command(w io.Writer, r *bufio.Reader, args ...string) (any, error) {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		// A TLS server that refused this client's certificate sends its
		// alert and closes: the write may fail first, the alert is read.
		if _, rerr := r.Peek(1); rerr != nil && !errors.Is(rerr, io.EOF) {
			var op *net.OpError
			if errors.As(rerr, &op) && op.Op == "remote error" {
				return nil, rerr
			}
		}
		return nil, err
	}
	return readReply(r, 0)
}

// readReply reads one RESP2 reply, at most maxReplyBytes of it.
func readReply(r *bufio.Reader, depth int) (any, error) {
	budget := maxReplyBytes
	return readBounded(r, depth, &budget)
}

func readBounded(r *bufio.Reader, depth int, budget *int) (any, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("a reply line too long: not Redis")
		}
		return nil, err
	}
	if *budget -= len(line); *budget < 0 {
		return nil, errors.New("a reply too large: not Redis")
	}
	if len(line) < 3 || line[len(line)-2] != '\r' || bytes.IndexByte(line[:len(line)-2], '\r') >= 0 {
		return nil, fmt.Errorf("a reply %q: not Redis", line)
	}
	kind, body := line[0], string(line[1:len(line)-2])
	switch kind {
	case '+':
		return body, nil
	case '-':
		return replyError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$', '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxReply {
			return nil, fmt.Errorf("a reply %q: not Redis", line)
		}
		if n == -1 {
			return nil, nil
		}
		if kind == '$' {
			if *budget -= n + 2; *budget < 0 {
				return nil, errors.New("a reply too large: not Redis")
			}
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return nil, err
			}
			return string(buf[:n]), nil
		}
		if depth > 2 {
			return nil, errors.New("a reply nested too deep: not Redis")
		}
		items := make([]any, 0, min(n, 16))
		for range n {
			item, err := readBounded(r, depth+1, budget)
			if err != nil {
				return nil, err
			}
			items = append(items, item)
		}
		return items, nil
	}
	return nil, fmt.Errorf("a reply starting %q: not Redis", kind)
}
