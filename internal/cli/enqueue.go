package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/secret"
	"github.com/sluicehq/sluice/relay/config"
	"github.com/sluicehq/sluice/relay/httpapi"
)

// This file is sluice enqueue: it loads a file of tasks, one JSON object
// a line, into a relay queue through the relay's HTTP API, in batches,
// resumably. docs/enqueue.md is its manual.

// Defaults and bounds of sluice enqueue's flags.
const (
	defaultEnqueueBatch      = 500
	defaultEnqueueBatchBytes = 8 << 20
	defaultEnqueueRetries    = 10
	maxEnqueueRetries        = 1000
	// minEnqueueBatchBytes is the smallest --batch-bytes: room for a task.
	minEnqueueBatchBytes = 1 << 10
	// maxEnqueueKeyPrefix leaves room in the relay's 256-byte key for
	// ":" and any line number.
	maxEnqueueKeyPrefix = 200
)

// Timing of sluice enqueue's requests.
const (
	// enqueueTimeout bounds one POST, from dial to the last byte of the
	// answer: a batch whose answer is lost is sent again, harmlessly.
	enqueueTimeout = time.Minute
	// enqueueBackoff and enqueueMaxBackoff shape the wait before retry n
	// (from 0): a random duration in [d/2, d], d = min(max, base×2ⁿ).
	enqueueBackoff    = 250 * time.Millisecond
	enqueueMaxBackoff = 30 * time.Second
	// enqueueMaxRetryAfter caps the wait a Retry-After imposes.
	enqueueMaxRetryAfter = time.Minute
)

// enqueueFlags are sluice enqueue's flags.
type enqueueFlags struct {
	relay, queue, tokenFile, keyPrefix string
	batch, batchBytes, retries         int
	from                               int
	quiet                              bool
}

func newEnqueueCmd() *cobra.Command {
	var f enqueueFlags
	cmd := &cobra.Command{
		Use:   "enqueue --queue Q [flags] FILE|-",
		Short: "load a file of tasks (JSON lines) into a relay queue, resumably",
		Long: `Loads a file of tasks, one JSON object a line (the relay API's task: method, url or path,
headers, body, body_base64 or json, key, cost, priority, not_before or delay, deadline or
timeout, max_attempts), into a queue of a running sluice relay through its HTTP API: --batch
lines per POST, as NDJSON, streamed (the file is never held in memory). A bar on stderr shows
the lines done of the total, the rate and the time left; when stderr is not a terminal, a
plain line every 5 s instead; nothing with --quiet. The total comes from a first pass that
counts the file's lines (and hashes it).

Resumable: a line without "key" is given one from the file's content and its line number,
enq:<the first 16 hex digits of the file's SHA-256>:<line> (with --key-prefix P: P:<line>),
so that running the same file again, after a kill or a failure, adds nothing twice within
the relay's dedup window (24 h): what is in already comes back "already there". Renaming or
moving the file keeps its keys; editing it makes a new job. A line's own "key" is kept.
FILE - reads stdin, which cannot be hashed ahead: give --key-prefix, or a key in every line.

A line the relay refuses, or that is not a JSON object, is printed to stdout as
FILE:LINE: reason (field) and left out: the rest of its batch still goes in. Overload (5xx,
429) and network errors are retried with backoff, --retries times, then the load stops,
naming the line to resume from. Last comes "N accepted, D already there, R refused".
Exits 0 when every line is in (already there counts as in), 1 when some were refused or the
load stopped, 2 for a usage error. The token: --token-file or $` + relayTokenEnv + `, never the
command line. docs/enqueue.md is the manual.`,
		GroupID: groupTools,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("one FILE of tasks (JSON lines) is needed, or - for stdin; got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			endpoint, err := f.check(c)
			if err != nil {
				return err
			}
			token, err := enqueueToken(f.tokenFile)
			if err != nil {
				return err
			}
			return runEnqueue(c.Context(), f, endpoint, token, args[0], c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.relay, "relay", "http://"+config.DefaultListen, "the relay API's base `URL`")
	fs.StringVar(&f.queue, "queue", "", "the relay queue `Q` to load the tasks into (required)")
	fs.StringVar(&f.tokenFile, "token-file", "", "a `FILE` holding the relay's API token (default: $"+relayTokenEnv+")")
	fs.IntVar(&f.batch, "batch", defaultEnqueueBatch, fmt.Sprintf("`N` lines per POST at most, from 1 to %d", httpapi.DefaultMaxBatch))
	fs.IntVar(&f.batchBytes, "batch-bytes", defaultEnqueueBatchBytes, fmt.Sprintf("`BYTES` per POST at most, from %d to %d (the relay's default bound); a longer line is refused without being sent", minEnqueueBatchBytes, httpapi.DefaultMaxBatchBytes))
	fs.StringVar(&f.keyPrefix, "key-prefix", "", "derive the keys of lines without one as `P`:LINE (default: enq:<the file's SHA-256, 16 hex digits>; required for stdin unless every line has a key)")
	fs.IntVar(&f.retries, "retries", defaultEnqueueRetries, fmt.Sprintf("`N` retries of a batch the relay cannot take now (5xx, 429, network errors), from 0 to %d, with backoff, before stopping", maxEnqueueRetries))
	fs.IntVar(&f.from, "from", 1, "start at this `LINE`, skipping those before it (their keys are unchanged: a resumed load is the same job)")
	fs.BoolVar(&f.quiet, "quiet", false, "show no progress and no retry notices; refusals and the summary are still printed (default false: a bar on a terminal, else a line every 5 s)")
	// The flag that would take the token itself exists only to refuse it.
	fs.String("token", "", "refused: the token is never given on the command line")
	_ = fs.MarkHidden("token")
	_ = cmd.MarkFlagFilename("token-file")
	return cmd
}

// check validates the flags and returns the URL tasks are posted to.
// Every error is a usage error.
func (f *enqueueFlags) check(c *cobra.Command) (string, error) {
	if c.Flags().Changed("token") {
		return "", usagef("--token: the token is never given on the command line, where every user of the machine can read it (ps, /proc/PID/cmdline) and the shell keeps it in its history; give --token-file FILE or $%s", relayTokenEnv)
	}
	switch {
	case f.queue == "":
		return "", usagef("--queue is required: the relay queue to load the tasks into")
	case f.batch < 1 || f.batch > httpapi.DefaultMaxBatch:
		return "", usagef("--batch %d: from 1 to %d lines", f.batch, httpapi.DefaultMaxBatch)
	case f.batchBytes < minEnqueueBatchBytes || f.batchBytes > httpapi.DefaultMaxBatchBytes:
		return "", usagef("--batch-bytes %d: from %d to %d", f.batchBytes, minEnqueueBatchBytes, httpapi.DefaultMaxBatchBytes)
	case f.retries < 0 || f.retries > maxEnqueueRetries:
		return "", usagef("--retries %d: from 0 to %d", f.retries, maxEnqueueRetries)
	case f.from < 1:
		return "", usagef("--from %d: a line number, from 1", f.from)
	case len(f.keyPrefix) > maxEnqueueKeyPrefix || strings.ContainsFunc(f.keyPrefix, func(r rune) bool { return r <= 0x20 || r >= 0x7f }):
		return "", usagef("--key-prefix: at most %d characters of visible ASCII without spaces (keys travel as Idempotency-Key)", maxEnqueueKeyPrefix)
	}
	u, err := url.Parse(f.relay)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return "", usagef("--relay %q: an http:// or https:// URL with a host (the relay API's listen address: %s)", f.relay, "http://"+config.DefaultListen)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", usagef("--relay %q: the API's base URL, without credentials, query or fragment (the token goes in --token-file)", f.relay)
	}
	return u.JoinPath("v1", "queues", f.queue, "tasks").String(), nil
}

// enqueueToken reads the relay's API token from file, or from
// $SLUICE_RELAY_TOKEN when file is empty: secret.AdminToken's rule.
func enqueueToken(file string) (string, error) {
	src := secret.Source{File: file}
	if src.File == "" {
		if _, ok := os.LookupEnv(relayTokenEnv); ok {
			src.Env = relayTokenEnv
		}
	}
	if src.IsZero() {
		return "", usagef("the relay's API token is needed: --token-file FILE or $%s (a relay started without one made one and keeps it in its data directory, in relay-token)", relayTokenEnv)
	}
	return secret.Read(src, secret.AdminToken)
}

// runEnqueue loads the tasks of path (stdin for "-") into the queue at
// endpoint: refusals, then the summary, on stdout; progress on stderr.
func runEnqueue(ctx context.Context, f enqueueFlags, endpoint, token, path string, stdin io.Reader, stdout, stderr io.Writer) error {
	src, err := openTaskFile(path, f.keyPrefix, stdin)
	if err != nil {
		return err
	}
	defer src.Close()
	client := newRelayClient(endpoint, token)
	defer client.close()
	total := int64(-1)
	if src.lines >= 0 {
		total = max(0, src.lines-int64(f.from-1))
	}
	prog := newProgress(stderr, src.name, total, f.quiet, time.Now)
	l := &loader{src: src, client: client, prog: prog, out: stdout, from: f.from,
		maxLines: f.batch, maxBytes: f.batchBytes, lineBound: f.batchBytes, retries: f.retries}
	err = l.load(ctx)
	prog.finish(err == nil)
	if err == nil {
		err = src.unchanged()
	}
	fmt.Fprintf(stdout, "%s: %d accepted, %d already there, %d refused\n", src.name, l.accepted, l.already, l.refused)
	switch {
	case err != nil:
		return err
	case l.refused > 0:
		return errReported
	}
	return nil
}

// taskFile is where the lines come from, and how their keys are derived.
type taskFile struct {
	// name names the file in messages: its path, or "stdin".
	name string
	r    io.Reader
	// lines is the file's number of lines, counted by a first pass; -1
	// when unknown (stdin, a pipe).
	lines int64
	// prefix is the prefix of derived keys (prefix:LINE); "" when none
	// can be derived (stdin without --key-prefix).
	prefix string
	file   *os.File    // nil for stdin
	info   os.FileInfo // file's, at the first pass
}

// openTaskFile opens path ("-": stdin) and, for a regular file, makes the
// first pass: it counts the lines, for the total, and hashes the content,
// for the keys (unless prefix is given).
func openTaskFile(path, prefix string, stdin io.Reader) (*taskFile, error) {
	if path == "-" {
		return &taskFile{name: "stdin", r: stdin, lines: -1, prefix: prefix}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	t := &taskFile{name: path, r: f, lines: -1, prefix: prefix, file: f}
	if t.info, err = f.Stat(); err != nil {
		f.Close()
		return nil, err
	}
	if t.info.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s is a directory: give a file of tasks, one JSON object a line", path)
	}
	if !t.info.Mode().IsRegular() { // a pipe: read once, like stdin
		return t, nil
	}
	lines, sum, err := survey(f, prefix == "")
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	t.lines = lines
	if prefix == "" {
		t.prefix = "enq:" + hex.EncodeToString(sum[:8])
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return t, nil
}

// survey reads r to its end and returns its number of lines (a last line
// without a newline counts) and, if hash is set, its SHA-256.
func survey(r io.Reader, hash bool) (int64, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	c := &lineCounter{}
	w := io.Writer(c)
	h := sha256.New()
	if hash {
		w = io.MultiWriter(c, h)
	}
	if _, err := io.CopyBuffer(w, r, make([]byte, 1<<20)); err != nil {
		return 0, sum, err
	}
	if hash {
		h.Sum(sum[:0])
	}
	n := c.newlines
	if c.last != '\n' && c.any {
		n++
	}
	return n, sum, nil
}

// lineCounter counts the newlines written to it.
type lineCounter struct {
	newlines int64
	last     byte
	any      bool
}

func (c *lineCounter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		c.newlines += int64(bytes.Count(p, []byte{'\n'}))
		c.last, c.any = p[len(p)-1], true
	}
	return len(p), nil
}

// key is the key derived for line no, "" when none can be.
func (t *taskFile) key(no int) string {
	if t.prefix == "" {
		return ""
	}
	return t.prefix + ":" + strconv.Itoa(no)
}

// unchanged reports a file that changed while it was loaded: its lines'
// keys come from the content of the first pass.
func (t *taskFile) unchanged() error {
	if t.info == nil || !t.info.Mode().IsRegular() {
		return nil
	}
	now, err := os.Stat(t.name)
	if err != nil || now.Size() != t.info.Size() || !now.ModTime().Equal(t.info.ModTime()) {
		return fmt.Errorf("%s changed while it was loaded: the keys of its lines come from the content it had when the load began; once it stops changing, load it again (as a new file: its lines get new keys)", t.name)
	}
	return nil
}

// Close closes the file (not stdin).
func (t *taskFile) Close() error {
	if t.file == nil {
		return nil
	}
	return t.file.Close()
}

// lineError is a line refused before it is sent.
type lineError struct {
	field, reason string
}

func (e *lineError) Error() string { return e.reason }

// errNoKey is a line without a key when none can be derived (stdin
// without --key-prefix).
var errNoKey = errors.New("no key")

// withKey returns line, a JSON object, as it is sent: as it is when it
// has a "key" (matched as the relay matches it, ignoring case), else with
// "key": derived inserted first, every other byte kept. A line that is not
// one JSON object, or whose key is not a string of at least one
// character, is a *lineError; a line without a key when derived is "" is
// errNoKey.
func withKey(line []byte, derived string) ([]byte, error) {
	if len(line) == 0 || line[0] != '{' {
		if json.Valid(line) {
			return nil, &lineError{reason: "not a JSON object: a task is an object, {\"url\": …}"}
		}
		return nil, &lineError{reason: "not a JSON object: " + jsonSyntax(line)}
	}
	var probe struct {
		Key json.RawMessage `json:"key"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return nil, &lineError{reason: "not a JSON object: " + jsonSyntax(line)}
	}
	if len(probe.Key) > 0 {
		var k string
		switch {
		case json.Unmarshal(probe.Key, &k) != nil:
			return nil, &lineError{field: "key", reason: "not a string: " + string(probe.Key)}
		case k == "":
			return nil, &lineError{field: "key", reason: "an empty key: give one, or leave the field out for one derived from the file and the line"}
		}
		return line, nil
	}
	if derived == "" {
		return nil, errNoKey
	}
	k, _ := json.Marshal(derived)
	rest := line[1:]
	out := make([]byte, 0, len(line)+len(k)+8)
	out = append(out, `{"key":`...)
	out = append(out, k...)
	if body := bytes.TrimLeft(rest, " \t\r\n"); len(body) > 0 && body[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), nil
}

// jsonSyntax says why data is not JSON, with the byte offset.
func jsonSyntax(data []byte) string {
	var v any
	err := json.Unmarshal(data, &v)
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	if err == nil {
		return "a JSON value but not an object"
	}
	return err.Error()
}

// taskLine is one line of the file as it is sent.
type taskLine struct {
	no   int
	data []byte
}

// refusal is a line left out, and why.
type refusal struct {
	no            int
	field, reason string
}

// batch is the lines of one POST, and the refusals among them.
type batch struct {
	lines    []taskLine
	bytes    int
	span     int // lines read into it: sent, refused and blank
	refusals []refusal
}

func (b *batch) reset() {
	clear(b.lines)
	b.lines, b.bytes, b.span, b.refusals = b.lines[:0], 0, 0, b.refusals[:0]
}

// loader sends a taskFile's lines to the relay a batch at a time, and
// counts what became of them.
type loader struct {
	src    *taskFile
	client *relayClient
	prog   *progress
	out    io.Writer // refusals
	from   int
	// maxLines and maxBytes bound a batch; both shrink when the relay
	// answers that a batch is too large. lineBound is the longest line.
	maxLines, maxBytes, lineBound int
	retries                       int

	accepted, already, refused int
	body                       bytes.Buffer
}

// load reads the lines and sends them in batches. A returned error
// stopped the load (a *stoppedError, or a usage error).
func (l *loader) load(ctx context.Context) error {
	lr := newLineReader(l.src.r, l.lineBound)
	var b batch
	for {
		raw, no, err := lr.next()
		if errors.Is(err, io.EOF) {
			return l.flush(ctx, &b)
		}
		if err != nil {
			_ = l.flush(ctx, &b)
			return fmt.Errorf("read %s at line %d: %w", l.src.name, no, err)
		}
		if no < l.from {
			continue
		}
		data, lerr := l.prepare(raw, no)
		if errors.Is(lerr, errNoKey) {
			if err := l.flush(ctx, &b); err != nil {
				return err
			}
			return usagef("%s:%d: the line has no \"key\", and none can be derived: %s is read once (stdin, a pipe), so its content is not hashed ahead; give --key-prefix P (keys P:LINE) or a key in every line (the lines before it are in; add --from %d)", l.src.name, no, l.src.name, no)
		}
		if data != nil && len(b.lines) > 0 && (len(b.lines) == l.maxLines || b.bytes+len(data)+1 > l.maxBytes) {
			if err := l.flush(ctx, &b); err != nil {
				return err
			}
		}
		b.span++
		switch le := (*lineError)(nil); {
		case errors.As(lerr, &le):
			b.refusals = append(b.refusals, refusal{no: no, field: le.field, reason: le.reason})
		case data != nil:
			b.lines = append(b.lines, taskLine{no: no, data: data})
			b.bytes += len(data) + 1
		}
	}
}

// prepare returns line no as it is sent: nil for a blank line, a
// *lineError for one refused here, errNoKey for one without a key.
func (l *loader) prepare(raw []byte, no int) ([]byte, error) {
	if raw == nil {
		return nil, &lineError{reason: fmt.Sprintf("longer than --batch-bytes (%d bytes): not sent", l.lineBound)}
	}
	if no == 1 {
		raw = bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf")) // a byte order mark
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	data, err := withKey(raw, l.src.key(no))
	if err != nil {
		return nil, err
	}
	if &data[0] == &raw[0] { // the line as read: the reader reuses its buffer
		data = bytes.Clone(data)
	}
	return data, nil
}

// flush sends b, prints its refusals in line order and counts its lines
// as done; then empties it.
func (l *loader) flush(ctx context.Context, b *batch) error {
	if b.span == 0 {
		return nil
	}
	err := l.send(ctx, b, b.lines)
	slices.SortFunc(b.refusals, func(x, y refusal) int { return x.no - y.no })
	for _, r := range b.refusals {
		msg := fmt.Sprintf("%s:%d: %s", l.src.name, r.no, r.reason)
		if r.field != "" {
			msg += " (" + r.field + ")"
		}
		l.prog.print(l.out, msg)
	}
	l.refused += len(b.refusals)
	if err == nil {
		l.prog.add(int64(b.span))
	}
	b.reset()
	return err
}

// send posts lines until each is in or refused (added to b.refusals):
// a refused line is left out and the rest sent again; a batch the relay
// finds too large is split in two. An error stopped the load.
func (l *loader) send(ctx context.Context, b *batch, lines []taskLine) error {
	for len(lines) > 0 {
		ans, err := l.post(ctx, lines)
		if err != nil {
			return &stoppedError{name: l.src.name, line: lines[0].no, err: err}
		}
		switch ans.verdict(len(lines)) {
		case verdictAccepted:
			for _, t := range ans.Tasks {
				if t.Duplicate {
					l.already++
				} else {
					l.accepted++
				}
			}
			return nil
		case verdictRefused:
			i := ans.Line - 1
			b.refusals = append(b.refusals, refusal{no: lines[i].no, field: ans.Field, reason: ans.Error})
			lines = slices.Delete(lines, i, i+1)
		case verdictTooLarge:
			if len(lines) == 1 {
				b.refusals = append(b.refusals, refusal{no: lines[0].no, field: ans.Field, reason: ans.Error})
				return nil
			}
			half := len(lines) / 2
			l.maxLines = min(l.maxLines, half)
			l.maxBytes = max(minEnqueueBatchBytes, min(l.maxBytes, l.bodySize(lines)/2))
			if err := l.send(ctx, b, lines[:half]); err != nil {
				return err
			}
			lines = lines[half:]
		default:
			return &stoppedError{name: l.src.name, line: lines[0].no, err: ans.failure()}
		}
	}
	return nil
}

// bodySize is the size of lines as one NDJSON body.
func (l *loader) bodySize(lines []taskLine) int {
	n := 0
	for _, t := range lines {
		n += len(t.data) + 1
	}
	return n
}

// post sends lines as one NDJSON body and returns the relay's answer,
// retrying what may pass later (network errors, 5xx, 429) with backoff
// up to l.retries times: the keys make a repeated batch harmless.
func (l *loader) post(ctx context.Context, lines []taskLine) (relayAnswer, error) {
	l.body.Reset()
	for _, t := range lines {
		l.body.Write(t.data)
		l.body.WriteByte('\n')
	}
	for retry := 0; ; retry++ {
		ans, err := l.client.post(ctx, l.body.Bytes())
		if err == nil && !ans.retryable() {
			return ans, nil
		}
		if ctx.Err() != nil {
			return ans, errors.New("interrupted")
		}
		if err == nil {
			err = ans.failure()
		}
		if retry == l.retries {
			return ans, fmt.Errorf("%w (after %s)", err, plural(l.retries, "retry", "retries"))
		}
		wait := backoff(retry, ans.retryAfter)
		if !l.prog.quiet() {
			l.prog.print(l.prog.stderr, fmt.Sprintf("sluice enqueue: %s:%d: %v: retry %d of %d in %v", l.src.name, lines[0].no, err, retry+1, l.retries, wait.Round(time.Millisecond)))
		}
		select {
		case <-ctx.Done():
			return ans, errors.New("interrupted")
		case <-time.After(wait):
		}
	}
}

// backoff is the wait before retry n (from 0): what the relay asked for
// in Retry-After (at most enqueueMaxRetryAfter), else a random duration
// in [d/2, d], d = min(enqueueMaxBackoff, enqueueBackoff×2ⁿ).
func backoff(n int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, enqueueMaxRetryAfter)
	}
	d := enqueueMaxBackoff
	if n < 20 {
		d = min(d, enqueueBackoff<<n)
	}
	return d/2 + rand.N(d/2+1)
}

// plural is n and the noun for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// stoppedError is a load that stopped at a line: every line before it is
// in, or was printed as refused.
type stoppedError struct {
	name string
	line int
	err  error
}

func (e *stoppedError) Error() string {
	return fmt.Sprintf("stopped at %s line %d: %v; the lines before it are in or listed as refused: run the same command again to finish (nothing goes in twice), or add --from %d", e.name, e.line, e.err, e.line)
}

func (e *stoppedError) Unwrap() error { return e.err }

// relayClient posts batches to one relay queue.
type relayClient struct {
	url, token string
	http       *http.Client
}

func newRelayClient(endpoint, token string) *relayClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &relayClient{url: endpoint, token: token, http: &http.Client{Transport: tr, Timeout: enqueueTimeout}}
}

func (c *relayClient) close() { c.http.CloseIdleConnections() }

// acceptedTask is one task of a 202's {"tasks": […]}.
type acceptedTask struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// relayAnswer is the relay's answer to a POST of tasks: 202 with the
// tasks, or an error naming the refused line (from 1) and field.
type relayAnswer struct {
	status     int
	retryAfter time.Duration
	Tasks      []acceptedTask `json:"tasks"`
	Error      string         `json:"error"`
	Line       int            `json:"line"`
	Field      string         `json:"field"`
}

// post sends body, NDJSON, and reads the answer. An error is the
// request's (the relay could not be reached, or its answer not read).
func (c *relayClient) post(ctx context.Context, body []byte) (relayAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return relayAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := c.http.Do(req)
	if err != nil {
		return relayAnswer{}, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return relayAnswer{}, fmt.Errorf("read the relay's answer: %w", err)
	}
	ans := relayAnswer{status: res.StatusCode, retryAfter: retryAfter(res.Header.Get("Retry-After"))}
	if jerr := json.Unmarshal(data, &ans); jerr != nil || res.StatusCode != http.StatusAccepted && ans.Error == "" {
		ans.Tasks, ans.Line, ans.Field = nil, 0, ""
		ans.Error = strings.TrimSpace(string(data[:min(len(data), 200)])) // a proxy's page
	}
	return ans, nil
}

// retryAfter reads a Retry-After field: seconds, or an HTTP date; 0 when
// absent or not understood.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// What an answer means for the lines posted.
type verdict int

const (
	verdictAccepted verdict = iota // every line is in
	verdictRefused                 // Line is refused; the others are not in
	verdictTooLarge                // the batch is over the relay's bounds
	verdictFailed                  // the load cannot go on
)

// verdict says what the answer to a batch of n lines means. A 413 without
// a field is about the batch (its bytes or its count), not about a task.
func (a relayAnswer) verdict(n int) verdict {
	switch {
	case a.status == http.StatusAccepted && len(a.Tasks) == n:
		return verdictAccepted
	case a.status == http.StatusRequestEntityTooLarge && a.Field == "":
		return verdictTooLarge
	case a.status >= 400 && a.status < 500 && a.Line >= 1 && a.Line <= n:
		return verdictRefused
	}
	return verdictFailed
}

// retryable reports an answer that may be different later: overload or
// a failure of the relay or of a proxy before it.
func (a relayAnswer) retryable() bool {
	switch a.status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	}
	return a.status >= 500
}

// failure says what went wrong with an answer that is no verdict on the
// lines.
func (a relayAnswer) failure() error {
	msg := fmt.Sprintf("%d %s", a.status, http.StatusText(a.status))
	if a.Error != "" {
		msg += ": " + a.Error
	}
	switch a.status {
	case http.StatusAccepted:
		return fmt.Errorf("the relay accepted %d tasks of the batch, not every one: %s", len(a.Tasks), msg)
	case http.StatusUnauthorized:
		return fmt.Errorf("the relay refused the token (%s): check --token-file or $%s", msg, relayTokenEnv)
	case http.StatusNotFound:
		return fmt.Errorf("%s (check --queue, and that --relay is the relay API's address)", msg)
	}
	return errors.New(msg)
}

// lineReader reads lines of at most max bytes, with their numbers (from
// 1), holding no more than one line in memory.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
	no  int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its newline, valid until the next
// call, and its number; a nil line for one longer than max (read to its
// end and dropped). io.EOF after the last line.
func (lr *lineReader) next() ([]byte, int, error) {
	lr.buf = lr.buf[:0]
	long := false
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if !long {
			if len(lr.buf)+len(chunk) > lr.max+1 { // +1: the newline
				long, lr.buf = true, lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == nil, errors.Is(err, io.EOF) && (long || len(lr.buf) > 0):
			lr.no++
			if long {
				return nil, lr.no, nil
			}
			return bytes.TrimSuffix(lr.buf, []byte{'\n'}), lr.no, nil
		default:
			return nil, lr.no + 1, err
		}
	}
}
