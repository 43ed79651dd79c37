package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A body the gateway cannot read because it is malformed (a chunk size
// that is not hexadecimal, negative or too large, a chunk longer than its
// size, a trailer that is not a header) is the client's fault: 400 with a
// JSON reason, counted as refused (bad_body) and logged at debug level —
// never an empty 200 made up by net/http, never a 502.
func TestMalformedBodyIsRefused(t *testing.T) {
	var hits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if _, err := io.Copy(io.Discard, r.Body); err == nil {
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(up.Close)
	log := &records{}
	g, _ := runSlow(t, slowConfig(""), up.URL, slog.New(log))
	bodies := []string{
		"zz\r\nabc\r\n0\r\n\r\n",
		"-3\r\nabc\r\n0\r\n\r\n",
		"ffffffffffffffffff\r\nabc\r\n0\r\n\r\n",
		"3\r\nabcdef\r\n0\r\n\r\n",
		"3\r\nabc\r\n0\r\nbad trailer\r\n\r\n",
	}
	for _, body := range bodies {
		c := dial(t, g.Addr())
		io.WriteString(c, "POST /api/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"+body)
		got, _, closed := readToClose(c, time.Now().Add(5*time.Second))
		head, payload, _ := strings.Cut(string(got), "\r\n\r\n")
		var e struct{ Error, Reason string }
		if !strings.HasPrefix(head, "HTTP/1.1 400 ") || json.Unmarshal([]byte(payload), &e) != nil || e.Error != "bad_request" || !strings.Contains(e.Reason, "malformed") || !closed {
			t.Errorf("body %q: the gateway answered %q (closed %v), want 400 {\"error\":\"bad_request\",\"reason\":\"…malformed…\"}", body, got, closed)
		}
	}
	if series := `sluice_requests_refused_total{reason="bad_body"} 5`; !strings.Contains(scrape(t, g), series+"\n") {
		t.Errorf("the malformed bodies are not counted as refused: no %s in /metrics", series)
	}
	if level, ok := log.find("request body malformed"); !ok || level != slog.LevelDebug {
		t.Errorf("logged %q, want \"request body malformed\" at debug level", log.messages())
	}
	for _, msg := range log.messages() {
		if strings.Contains(msg, "went away") || strings.Contains(msg, "upstream") {
			t.Errorf("a malformed body was logged as %q", msg)
		}
	}
}

// A client that closes its side in the middle of its body has gone away:
// the gateway answers nothing and closes the connection (nginx's 499),
// rather than letting net/http make up an empty 200 for the upstream's
// answer that never came.
func TestClientGoneMidBodyGetsNoAnswer(t *testing.T) {
	up := slowUpstream(t)
	log := &records{}
	g, _ := runSlow(t, slowConfig(""), up.URL, slog.New(log))
	for _, req := range []string{
		"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
		"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab",
	} {
		c := dial(t, g.Addr())
		io.WriteString(c, req)
		c.(*net.TCPConn).CloseWrite() // gone, as far as the body is concerned
		got, _, closed := readToClose(c, time.Now().Add(5*time.Second))
		if len(got) != 0 || !closed {
			t.Errorf("%q, then the client's side closed: the gateway answered %q (closed %v), want nothing and a close", req, got, closed)
		}
	}
	if level, ok := log.find("client went away"); !ok || level >= slog.LevelWarn {
		t.Errorf("logged %q, want \"client went away\" below warning", log.messages())
	}
}

// A body slower than read_timeout is answered 408 even when write_timeout
// is no longer than read_timeout (their defaults are equal, 1 m): the
// write deadline, counted from the end of the headers, has then passed or
// is about to when the body's read fails, and the 408 gets a moment of its
// own to be written (a tenth of write_timeout, 1 s at most) rather than
// being lost with the connection.
func TestSlowBodyIs408WithEqualTimeouts(t *testing.T) {
	up := slowUpstream(t)
	cfg := strings.Replace(slowConfig(""), fmt.Sprintf("write_timeout: %v", writeBound), fmt.Sprintf("write_timeout: %v", readBound), 1)
	g, _ := runSlow(t, cfg, up.URL, nil)
	for _, c := range []struct{ header, trickle string }{
		{"Content-Length: 100", "b"},
		{"Transfer-Encoding: chunked", "1\r\nb\r\n"},
	} {
		start := time.Now()
		conn := dial(t, g.Addr())
		io.WriteString(conn, "POST /up HTTP/1.1\r\nHost: gw\r\n"+c.header+"\r\n\r\n")
		trickle(t, conn, []byte(c.trickle), 50*time.Millisecond)
		got, at, closed := readToClose(conn, start.Add(readBound+slack))
		checkBound(t, c.header, start, at, closed, readBound)
		if !strings.HasPrefix(string(got), "HTTP/1.1 408") {
			t.Errorf("%s, a body slower than read_timeout = write_timeout: the gateway answered %q, want 408", c.header, firstLine(got))
		}
	}
}

// earlyUpstream is an upstream that answers as soon as it has read a
// request's header, without reading its body, and closes (as an upstream
// refusing an upload does).
func earlyUpstream(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nearly")
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// When the upstream answers before the client's body has all arrived, the
// client gets that answer at once and the connection is closed: the
// gateway does not first wait for the rest of a body no one will read
// (until read_timeout, when, with write_timeout no longer, the answer
// could no longer be written at all).
func TestUpstreamAnswerBeforeTheBody(t *testing.T) {
	cfg := strings.Replace(slowConfig(""), fmt.Sprintf("write_timeout: %v", writeBound), fmt.Sprintf("write_timeout: %v", readBound), 1)
	g, _ := runSlow(t, cfg, earlyUpstream(t), nil)
	for _, c := range []struct{ header, trickle string }{
		{"Content-Length: 100", "b"},
		{"Transfer-Encoding: chunked", "1\r\nb\r\n"},
	} {
		start := time.Now()
		conn := dial(t, g.Addr())
		io.WriteString(conn, "POST /up HTTP/1.1\r\nHost: gw\r\n"+c.header+"\r\n\r\n")
		trickle(t, conn, []byte(c.trickle), 50*time.Millisecond)
		got, at, closed := readToClose(conn, start.Add(readBound+slack))
		if !strings.HasPrefix(string(got), "HTTP/1.1 200") || !strings.HasSuffix(string(got), "\r\n\r\nearly") || !closed {
			t.Errorf("%s: the gateway answered %q (closed %v), want the upstream's 200 early", c.header, got, closed)
		}
		if took := at.Sub(start); took >= readBound {
			t.Errorf("%s: the answer came after %v, not before read_timeout %v: the gateway waited for the body", c.header, took.Round(time.Millisecond), readBound)
		}
	}
}
