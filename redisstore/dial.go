package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/redisscript"
)

// DialOptions configures Dial.
type DialOptions struct {
	// Addrs is the Redis address, or several seed addresses of a Cluster.
	// Required.
	Addrs []string
	// MaxBackoff caps the wait between two connection attempts: the first
	// retry comes after 50 ms, each next one waits twice as long, up to
	// MaxBackoff. Default 1 s.
	MaxBackoff time.Duration
}

// DefaultMaxBackoff is the default DialOptions.MaxBackoff.
const DefaultMaxBackoff = time.Second

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
	addrs      []string
	maxBackoff time.Duration
	ctx        context.Context
	cancel     context.CancelFunc
	done       chan struct{}
	client     atomic.Pointer[rueidisClient] // nil until connected
	closeOnce  sync.Once

	mu       sync.Mutex
	lastErr  error // the last attempt's failure; nil once connected
	watchers map[int]func(error)
	nextID   int
}

var _ redisscript.ConnectionWatcher = (*Conn)(nil)

// Dial returns a Conn connecting to Redis at opts.Addrs. It makes the
// first attempt before returning (at once when the connection is refused;
// about a second per address that does not answer at all), so that a
// Redis already up is used from the first call; when that attempt fails,
// it keeps trying in the background. It fails only on bad options (no
// address, a negative backoff).
func Dial(opts DialOptions) (*Conn, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("redisstore: Dial: DialOptions.Addrs is required")
	}
	for _, a := range opts.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("redisstore: Dial: address %q: %w", a, err)
		}
	}
	if opts.MaxBackoff < 0 {
		return nil, fmt.Errorf("redisstore: Dial: MaxBackoff %v: must not be negative (0 means the default)", opts.MaxBackoff)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		addrs: append([]string(nil), opts.Addrs...), maxBackoff: cmp.Or(opts.MaxBackoff, DefaultMaxBackoff),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), watchers: map[int]func(error){},
	}
	first := make(chan struct{})
	go c.connect(first)
	<-first
	return c, nil
}

// connect tries until it connects or the Conn is closed, and closes
// first after the first attempt.
func (c *Conn) connect(first chan struct{}) {
	defer close(c.done)
	firstDone := sync.OnceFunc(func() { close(first) })
	defer firstDone()
	wait := 50 * time.Millisecond
	for {
		client, err := c.attempt()
		if err == nil {
			if c.ctx.Err() != nil { // closed meanwhile
				client.Close()
				return
			}
			c.client.Store(&rueidisClient{client})
			c.report(nil)
			return
		}
		c.report(err)
		firstDone()
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

// attempt makes one rueidis client, once a Redis answers. rueidis is
// asked only then: a rueidis client that fails to connect leaves a
// goroutine behind for up to a second after its Close (a Cluster refresh
// it scheduled), so a Redis down for long would leave one per attempt.
func (c *Conn) attempt() (rueidis.Client, error) {
	if err := c.answers(); err != nil {
		return nil, err
	}
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: c.addrs, DisableCache: true, DialCtxFn: c.dial})
}

// answers is nil when one of the addresses answers a PING (any reply: a
// Redis that wants AUTH answers too), within a second each.
func (c *Conn) answers() error {
	var errs []error
	for _, a := range c.addrs {
		err := func() error {
			ctx, cancel := context.WithTimeout(c.ctx, time.Second)
			defer cancel()
			nc, err := c.dial(ctx, a, &net.Dialer{}, nil)
			if err != nil {
				return err
			}
			defer nc.Close()
			stop := context.AfterFunc(ctx, func() { nc.Close() })
			defer stop()
			if _, err := nc.Write([]byte("PING\r\n")); err != nil {
				return err
			}
			var b [1]byte
			if _, err := io.ReadFull(nc, b[:]); err != nil {
				return fmt.Errorf("PING %s: %w", a, err)
			}
			if b[0] != '+' && b[0] != '-' {
				return fmt.Errorf("PING %s: a reply starting %q: not Redis", a, b[0])
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dial is rueidis's dialer, cancelled by Close (a connection attempt to a
// host that does not answer would otherwise hold Close for the dial
// timeout) and bounded by the dialer's timeout — not by the context of the
// call that happened to need the connection: rueidis dials a pipe lazily,
// for whichever call comes first, and every call waiting for that pipe
// gets the dial's error, so one caller's cancelled context would fail them
// all.
func (c *Conn) dial(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	return d.DialContext(ctx, "tcp", dst)
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
