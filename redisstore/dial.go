package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/redisscript"
)

// DialOptions configures Dial: where Redis is, how to authenticate and
// how to encrypt. The zero value of each optional field means its
// documented default; fmt and log/slog print a DialOptions with its
// passwords redacted.
type DialOptions struct {
	// Addrs is the Redis address, or several seed addresses of a Cluster.
	// Required, unless Sentinel names a master (then it must be empty).
	Addrs []string
	// Username and Password are Redis's AUTH: an ACL user (Redis 6 and
	// later) and its password, or the password alone (requirepass, the
	// "default" user). Default: no AUTH.
	Username, Password string
	// DB is the database of a single node (SELECT). Default 0, the only
	// one a Cluster has.
	DB int
	// TLS, when set, encrypts every connection — to Redis, to a Cluster's
	// nodes, to the Sentinels — and verifies the server with it: its
	// RootCAs (nil: the system's), its ServerName (empty: the host of
	// each address dialled), its Certificates (a client certificate, for a
	// Redis with tls-auth-clients). Never a fallback to clear text.
	TLS *tls.Config
	// Sentinel, when its MasterName is set, finds the master through Redis
	// Sentinel and follows its failovers.
	Sentinel Sentinel
	// ConnectTimeout bounds one connection attempt: the dial, the TLS
	// handshake, AUTH. Default 1 s.
	ConnectTimeout time.Duration
	// MaxBackoff caps the wait between two connection attempts: the first
	// retry comes after 50 ms, each next one waits twice as long, up to
	// MaxBackoff. Default 1 s.
	MaxBackoff time.Duration
}

// Sentinel is a Redis Sentinel setup: the master's name and the
// Sentinels that know it.
type Sentinel struct {
	// MasterName is the name the Sentinels monitor the master under
	// (sentinel monitor NAME ...).
	MasterName string
	// Addrs are the Sentinels' addresses (port 26379 by default).
	Addrs []string
	// Username and Password are the Sentinels' own AUTH (their
	// requirepass), when they ask for one; Redis's are DialOptions'.
	Username, Password string
}

// String is o with its passwords redacted, for fmt.
func (o DialOptions) String() string {
	return fmt.Sprintf("{Addrs:%v Username:%q Password:%s DB:%d TLS:%v Sentinel:%v ConnectTimeout:%v MaxBackoff:%v}",
		o.Addrs, o.Username, redacted(o.Password), o.DB, o.TLS != nil, o.Sentinel, o.ConnectTimeout, o.MaxBackoff)
}

// GoString is o with its passwords redacted, for fmt's %#v.
func (o DialOptions) GoString() string { return "redisstore.DialOptions" + o.String() }

// LogValue is o with its passwords redacted, for log/slog.
func (o DialOptions) LogValue() slog.Value { return slog.StringValue(o.String()) }

// String is s with its password redacted.
func (s Sentinel) String() string {
	if s.MasterName == "" {
		return "none"
	}
	return fmt.Sprintf("{MasterName:%q Addrs:%v Username:%q Password:%s}", s.MasterName, s.Addrs, s.Username, redacted(s.Password))
}

func redacted(secret string) string {
	if secret == "" {
		return `""`
	}
	return "[redacted]"
}

// Defaults of DialOptions.
const (
	DefaultMaxBackoff     = time.Second
	DefaultConnectTimeout = time.Second
	// SentinelRefresh is how often the Sentinels are asked for the
	// master, besides following their +switch-master events: a missed
	// event costs at most this long.
	SentinelRefresh = 2 * time.Second
)

// ErrNotConnected: a Conn has not connected to Redis yet. The store treats
// it as an outage: the failure policy decides.
var ErrNotConnected = errors.New("not connected to Redis yet")

// Conn is a Client that makes and owns its rueidis client: Dial returns
// at once and connects in the background, retrying with capped backoff,
// so that a limiter can start before its Redis (a Kubernetes rollout).
// Until it is connected every call fails with ErrNotConnected, an outage
// for the store (its failure policy decides, its breaker counts); once
// connected, calls go to Redis and rueidis reconnects by itself after
// later failures. A Conn is a redisscript.ConnectionWatcher: a Store using
// it sees each connection attempt's outcome (Redis unreachable, Redis
// back) as it sees a call's. Safe for concurrent use; Close stops the
// connecting goroutine and closes the client.
type Conn struct {
	// opts is a pointer so that fmt, printing a Conn, prints its address
	// and not the passwords in it (an unexported field's String is not
	// called).
	opts           *DialOptions
	maxBackoff     time.Duration
	connectTimeout time.Duration
	ctx            context.Context
	cancel         context.CancelFunc
	done           chan struct{}
	client         atomic.Pointer[rueidisClient] // nil until connected
	closeOnce      sync.Once

	mu       sync.Mutex
	lastErr  error // the last attempt's failure; nil once connected
	watchers map[int]func(error)
	nextID   int
}

var _ redisscript.ConnectionWatcher = (*Conn)(nil)

// Dial returns a Conn connecting to Redis as opts say. It makes the first
// attempt before returning (at once when the connection is refused; up to
// ConnectTimeout per address that does not answer at all), so that a
// Redis already up is used from the first call; when that attempt finds
// no Redis, it keeps trying in the background. It fails on bad options,
// and when a Redis (or a Sentinel) that answered refuses the
// configuration — wrong credentials, a certificate not trusted, no TLS
// where TLS is asked: an error wrapping ErrMisconfigured that says which
// and where, never a password — since waiting does not heal that.
func Dial(opts DialOptions) (*Conn, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		opts: &opts, maxBackoff: cmp.Or(opts.MaxBackoff, DefaultMaxBackoff), connectTimeout: cmp.Or(opts.ConnectTimeout, DefaultConnectTimeout),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), watchers: map[int]func(error){},
	}
	c.opts.Addrs = append([]string(nil), opts.Addrs...)
	c.opts.Sentinel.Addrs = append([]string(nil), opts.Sentinel.Addrs...)
	first := make(chan error, 1)
	go c.connect(first)
	if err := <-first; err != nil {
		c.Close()
		return nil, fmt.Errorf("redisstore: Dial: %w", err)
	}
	return c, nil
}

// validate checks the options that need no server.
func (o DialOptions) validate() error {
	s := o.Sentinel
	switch {
	case s.MasterName == "" && len(o.Addrs) == 0:
		return errors.New("redisstore: Dial: DialOptions.Addrs is required")
	case s.MasterName != "" && len(o.Addrs) > 0:
		return errors.New("redisstore: Dial: DialOptions.Addrs and Sentinel: give one (with Sentinel, the Sentinels find the master)")
	case s.MasterName != "" && len(s.Addrs) == 0:
		return errors.New("redisstore: Dial: Sentinel.Addrs is required with Sentinel.MasterName")
	case s.MasterName == "" && (len(s.Addrs) > 0 || s.Username != "" || s.Password != ""):
		return errors.New("redisstore: Dial: Sentinel.MasterName is required with the other Sentinel options")
	case o.Username != "" && o.Password == "":
		return errors.New("redisstore: Dial: DialOptions.Username needs a Password (an ACL user without one is AUTH'd by nothing)")
	case s.Username != "" && s.Password == "":
		return errors.New("redisstore: Dial: Sentinel.Username needs a Password")
	case o.DB < 0:
		return fmt.Errorf("redisstore: Dial: DB %d: a database number is 0 or more", o.DB)
	case o.DB != 0 && len(o.Addrs) > 1:
		return fmt.Errorf("redisstore: Dial: DB %d with %d addresses (a Cluster): a Cluster has only database 0", o.DB, len(o.Addrs))
	case o.MaxBackoff < 0:
		return fmt.Errorf("redisstore: Dial: MaxBackoff %v: must not be negative (0 means the default)", o.MaxBackoff)
	case o.ConnectTimeout < 0:
		return fmt.Errorf("redisstore: Dial: ConnectTimeout %v: must not be negative (0 means the default)", o.ConnectTimeout)
	}
	for i, a := range append(append([]string(nil), o.Addrs...), s.Addrs...) {
		if strings.Contains(a, "@") || strings.Contains(a, "://") {
			return fmt.Errorf("redisstore: Dial: address %d: a URL or user information (not repeated here: it may hold a password); give host:port, and the password in DialOptions.Password", i+1)
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("redisstore: Dial: address %q: %w", a, err)
		}
	}
	if o.TLS != nil && o.TLS.InsecureSkipVerify {
		return errors.New("redisstore: Dial: TLS.InsecureSkipVerify: refused — a Redis whose certificate is not verified is anyone's who can reach its address")
	}
	return nil
}

// connect tries until it connects or the Conn is closed. It sends on
// first the outcome of the first attempt: nil, also when it found no
// Redis (the retries go on), or a refusal of the configuration, after
// which it stops.
func (c *Conn) connect(first chan<- error) {
	defer close(c.done)
	firstSent := false
	sendFirst := func() bool { // true the first time only
		was := firstSent
		firstSent = true
		return !was
	}
	wait := 50 * time.Millisecond
	for {
		client, err := c.attempt()
		if err == nil {
			if c.ctx.Err() != nil { // closed meanwhile
				client.Close()
				if sendFirst() {
					first <- nil
				}
				return
			}
			c.client.Store(&rueidisClient{client})
			c.report(nil)
			if sendFirst() {
				first <- nil
			}
			return
		}
		c.report(err)
		if sendFirst() {
			if errors.Is(err, ErrMisconfigured) {
				first <- err
				return
			}
			first <- nil
		}
		t := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, c.maxBackoff)
	}
}

// attempt makes one rueidis client, once a Redis answers and takes the
// configuration (probe). rueidis is asked only then: a rueidis client
// that fails to connect leaves a goroutine behind for up to a second
// after its Close (a Cluster refresh it scheduled), so a Redis down for
// long would leave one per attempt.
func (c *Conn) attempt() (rueidis.Client, error) {
	if err := c.answers(); err != nil {
		return nil, err
	}
	o := c.opts
	opt := rueidis.ClientOption{
		InitAddress: o.Addrs, DisableCache: true, DialCtxFn: c.dial,
		Username: o.Username, Password: o.Password, SelectDB: o.DB, TLSConfig: o.TLS,
		Dialer: net.Dialer{Timeout: c.connectTimeout},
	}
	if o.Sentinel.MasterName != "" {
		opt.InitAddress = o.Sentinel.Addrs
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet: o.Sentinel.MasterName, Username: o.Sentinel.Username, Password: o.Sentinel.Password,
			TLSConfig: o.TLS, Dialer: net.Dialer{Timeout: c.connectTimeout}, TopologyRefreshInterval: SentinelRefresh,
		}
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok {
			code, _, _ := strings.Cut(re.Error(), " ")
			if !transient(code) {
				target := strings.Join(o.Addrs, ", ")
				if o.Sentinel.MasterName != "" {
					target = fmt.Sprintf("the master %q of the Sentinels at %s", o.Sentinel.MasterName, strings.Join(o.Sentinel.Addrs, ", "))
				}
				hint := ""
				if code == "NOPERM" {
					hint = " (the user may not run a command the client needs: see the least ACL in docs/production.md)"
				}
				return nil, fmt.Errorf("%w: connecting to %s: %v%s", ErrMisconfigured, target, err, hint)
			}
		}
		return nil, err
	}
	return client, nil
}

// answers is nil when one of the addresses (the master the Sentinels
// name, with Sentinel) answers and takes the configuration (probe); an
// error wrapping ErrMisconfigured when one refuses it.
func (c *Conn) answers() error {
	ctx := c.ctx
	addrs := c.opts.Addrs
	if c.opts.Sentinel.MasterName != "" {
		master, err := c.probeSentinels(ctx)
		if err != nil {
			return err
		}
		addrs = []string{master}
	}
	var errs []error
	for _, a := range addrs {
		err := c.probe(ctx, a, c.opts.Username, c.opts.Password, c.opts.DB)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrMisconfigured) {
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dial is rueidis's dialer (and the probe's), TLS included when tlsCfg
// is set, cancelled by Close (a connection attempt to a host that does
// not answer would otherwise hold Close for the dial timeout) and bounded
// by the dialer's timeout — not by the context of the call that happened
// to need the connection: rueidis dials a pipe lazily, for whichever call
// comes first, and every call waiting for that pipe gets the dial's
// error, so one caller's cancelled context would fail them all. A TLS
// handshake that fails on a certificate, or on a server that does not
// speak TLS, wraps ErrMisconfigured.
func (c *Conn) dial(ctx context.Context, dst string, d *net.Dialer, tlsCfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	if d.Timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, d.Timeout)
		defer cancelT()
	}
	nc, err := d.DialContext(ctx, "tcp", dst)
	if err != nil || tlsCfg == nil {
		return nc, err
	}
	host, _, _ := net.SplitHostPort(dst)
	tc := tls.Client(nc, tlsconfigForHost(tlsCfg, host))
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		if refused := tlsRefusal(dst, err, tlsCfg.RootCAs == nil); refused != nil {
			return nil, refused
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// A clear-text Redis reads a ClientHello as the start of a
			// command, and waits for the rest.
			return nil, fmt.Errorf("TLS handshake with %s: no answer in %v (a clear-text port waits silently: is it Redis's tls-port?): %w", dst, d.Timeout, err)
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", dst, err)
	}
	return tc, nil
}

// tlsconfigForHost is cfg for a connection to host: cfg when it names its
// server, else a copy that verifies host.
func tlsconfigForHost(cfg *tls.Config, host string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	c := cfg.Clone()
	c.ServerName = host
	return c
}

// report records an attempt's outcome and tells the watchers.
func (c *Conn) report(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
	for _, w := range c.watchers {
		w(err)
	}
}

// WatchConnection calls f with each connection attempt's outcome (nil:
// connected), at once with the last one if there was one, until stop is
// called; see redisscript.ConnectionWatcher. A Store calls it in New and
// stops in Close. f must not block.
func (c *Conn) WatchConnection(f func(error)) (stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextID
	c.nextID++
	c.watchers[id] = f
	if c.lastErr != nil {
		f(c.lastErr)
	} else if c.client.Load() != nil {
		f(nil)
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.watchers, id)
	}
}

// Connected reports whether the Conn has connected to Redis (it stays
// connected: rueidis reconnects by itself after a later failure).
func (c *Conn) Connected() bool { return c.client.Load() != nil }

func (c *Conn) notConnected() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != nil {
		return fmt.Errorf("%w: %w", ErrNotConnected, c.lastErr)
	}
	return ErrNotConnected
}

// EvalSHA runs the script loaded under sha; see redisscript.Client.
func (c *Conn) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if r := c.client.Load(); r != nil {
		return r.EvalSHA(ctx, sha, keys, args)
	}
	return nil, c.notConnected()
}

// Eval runs the script; see redisscript.Client.
func (c *Conn) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	if r := c.client.Load(); r != nil {
		return r.Eval(ctx, script, keys, args)
	}
	return nil, c.notConnected()
}

// Cluster reports whether the Conn talks to a Redis Cluster. Before it is
// connected it does not know, and answers true: a call's keys are then
// grouped by hash slot, which is right on a Cluster and only slower on a
// single node.
func (c *Conn) Cluster() bool {
	if r := c.client.Load(); r != nil {
		return r.Cluster()
	}
	return true
}

// Close stops connecting, waits for the connecting goroutine to end and
// closes the client. Idempotent.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		<-c.done
		if r := c.client.Load(); r != nil {
			r.c.Close()
		}
	})
	return nil
}
