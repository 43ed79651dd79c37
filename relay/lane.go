package relay

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// maxTaskAttempts is the most attempts a task may ask for: the backends'
// bound.
const maxTaskAttempts = 1000

// A lane is one relay queue: its backend, its share of the target, and
// the tasks the dispatcher has taken out of it.
type lane struct {
	name   string
	target *target
	q      queue.Queue

	maxBody     int
	maxAttempts int
	paused      atomic.Bool

	shareMu  sync.Mutex
	weight   float64
	reserved float64

	// The tasks taken out and not yet sent, in order: filled by the
	// queue's feeder, emptied by the dispatcher.
	bufMu sync.Mutex
	buf   []queue.Lease
	fed   chan struct{} // pokes the feeder: the buffer ran low, or work arrived
	// The dispatcher's own: the weighted fair queueing clock, and whether
	// the queue had nothing at its last look.
	vtime float64
	idle  bool

	meter *meter

	// Counters since the start, for Stats.
	delivered, succeeded, throttled, failed, dead atomic.Uint64
	waitSum                                       atomic.Int64 // ns from ready to first send, summed
	waitN                                         atomic.Uint64

	// The backend's state as last read, and the history of the rates.
	statsMu   sync.Mutex
	stats     queue.Stats
	statsAt   time.Time
	statsErr  error
	history   []Sample
	backendOK atomic.Bool // false after a failed Lease, until one succeeds
	downSince atomic.Int64
}

// capBody bounds a request's body so that the stored request fits the
// backend's payload bound: the body travels in base64 (4 bytes for 3),
// beside the path and the headers.
func (l *lane) capBody(maxPayload int) {
	room := max(0, (maxPayload-MaxHeaderBytes-MaxRefBytes)*3/4)
	if l.maxBody == 0 || l.maxBody > room {
		l.maxBody = room
	}
}

func (l *lane) share() (weight, reserved float64) {
	l.shareMu.Lock()
	defer l.shareMu.Unlock()
	return l.weight, l.reserved
}

func (l *lane) reconfigure(q Queue) {
	l.shareMu.Lock()
	defer l.shareMu.Unlock()
	l.weight, l.reserved = q.Weight, q.Reserved
}

func (l *lane) buffered() int {
	l.bufMu.Lock()
	defer l.bufMu.Unlock()
	return len(l.buf)
}

func (l *lane) push(leases []queue.Lease) {
	l.bufMu.Lock()
	defer l.bufMu.Unlock()
	l.buf = append(l.buf, leases...)
}

func (l *lane) shift() (queue.Lease, bool) {
	l.bufMu.Lock()
	defer l.bufMu.Unlock()
	if len(l.buf) == 0 {
		return queue.Lease{}, false
	}
	lease := l.buf[0]
	l.buf[0] = queue.Lease{}
	l.buf = l.buf[1:]
	return lease, true
}

// unshift puts a task back at the head: it was not sent.
func (l *lane) unshift(lease queue.Lease) {
	l.bufMu.Lock()
	defer l.bufMu.Unlock()
	l.buf = append([]queue.Lease{lease}, l.buf...)
}

func (l *lane) takeAll() []queue.Lease {
	l.bufMu.Lock()
	defer l.bufMu.Unlock()
	all := l.buf
	l.buf = nil
	return all
}

// poke wakes the queue's feeder.
func (l *lane) poke() {
	select {
	case l.fed <- struct{}{}:
	default:
	}
}

// sleep waits for a poke, d, or ctx's end.
func (l *lane) sleep(ctx context.Context, timer *time.Timer, d time.Duration) {
	timer.Reset(d)
	select {
	case <-ctx.Done():
	case <-l.fed:
	case <-timer.C:
	}
	timer.Stop()
}

// activate sets the virtual time of a queue that had nothing to the
// smallest of the busy ones: idleness earns no credit.
func (l *lane) activate(all []*lane) {
	least := math.Inf(1)
	for _, o := range all {
		if o != l && !o.idle && o.vtime < least {
			least = o.vtime
		}
	}
	if !math.IsInf(least, 1) && l.vtime < least {
		l.vtime = least
	}
}

// charge advances the queue's virtual time and rate by one release.
func (l *lane) charge(cost float64) {
	weight, _ := l.share()
	l.vtime += cost / weight
	l.meter.add(time.Now(), cost)
}

// leaseFailed logs once per change of state: the backend stopped answering.
func (l *lane) leaseFailed(log *slog.Logger, err error) {
	if l.backendOK.Swap(false) {
		l.downSince.Store(time.Now().UnixNano())
		log.Error("relay: the queue's backend does not answer; deliveries wait", "queue", l.name, "err", err)
	}
}

func (l *lane) leaseOK(log *slog.Logger) {
	if !l.backendOK.Swap(true) {
		log.Info("relay: the queue's backend answers again", "queue", l.name, "down_for", time.Since(time.Unix(0, l.downSince.Load())).Round(time.Millisecond).String())
	}
}

// A meter measures a rate over the last meterSpan, in buckets of
// meterBucket.
type meter struct {
	mu      sync.Mutex
	buckets [meterBuckets]float64
	head    int64 // the bucket index of the newest
}

const (
	meterBucket  = 100 * time.Millisecond
	meterBuckets = 50
	meterSpan    = meterBuckets * meterBucket
)

func newMeter() *meter { return &meter{} }

func (m *meter) advance(now time.Time) int64 {
	i := now.UnixNano() / int64(meterBucket)
	if i-m.head >= meterBuckets {
		m.buckets = [meterBuckets]float64{}
	} else {
		for j := m.head + 1; j <= i; j++ {
			m.buckets[j%meterBuckets] = 0
		}
	}
	if i > m.head {
		m.head = i
	}
	return i
}

func (m *meter) add(now time.Time, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.advance(now)
	m.buckets[i%meterBuckets] += v
}

// rate is the cost per second over the last second.
func (m *meter) rate(now time.Time) float64 { return m.over(now, 10) }

// over is the cost per second over the last n buckets (the current one
// counted in proportion to its elapsed part).
func (m *meter) over(now time.Time, n int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.advance(now)
	sum := 0.0
	for j := 0; j < n && j < meterBuckets; j++ {
		sum += m.buckets[(i-int64(j))%meterBuckets]
	}
	elapsed := float64(n-1)*meterBucket.Seconds() + float64(now.UnixNano()%int64(meterBucket))/1e9
	if elapsed <= 0 {
		return 0
	}
	return sum / elapsed
}
