package pace_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memlease"
	"github.com/sluicehq/sluice/pace"
)

// A Transport with a Share spends from the partitions a lease.Holder holds:
// every try carries its partition's fence, which a target checking fences
// (lease.Fences, as httplimit.Fence does) takes; when the target has seen a
// newer epoch of that partition it answers 409, the Holder drops the
// partition, and the request goes again under another fence, spending no
// attempt.
func TestShareFencesEveryTry(t *testing.T) {
	fences, err := lease.NewFences(lease.FenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []lease.Spend
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := lease.ParseFence(r.Header.Get(lease.FenceHeader))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
		if ok, _ := fences.Check(s); !ok {
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error":"stale_lease_epoch","retryable":false}`)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer target.Close()

	h, err := lease.New(lease.Options{Coordinator: memlease.New(nil),
		Limit: sluice.Limit{Name: "fleet", Quota: 200, Window: time.Second, Burst: 20}, Partitions: 2, TTL: 300 * time.Millisecond, Member: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = h.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	tr, err := pace.NewTransport(pace.TransportOptions{Share: lease.SpendFrom(h), Retry: pace.RetryOptions{Deadline: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	get := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, target.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", resp.Status, body)
		}
		if req.Header.Get(lease.FenceHeader) != "" {
			t.Fatal("the caller's request was changed: it carries the fence")
		}
	}
	for range 5 {
		get()
	}
	mu.Lock()
	last := seen[len(seen)-1]
	mu.Unlock()
	if last.Group != "fleet" || last.Epoch == 0 {
		t.Fatalf("fence %+v: want group fleet with an epoch", last)
	}
	// A newer holder of the last partition reached the target.
	newer := last
	newer.Epoch++
	fences.Check(newer)
	for range 5 {
		get()
	}
	st, hs := tr.Stats(), h.Stats()
	if st.Fenced < 1 || st.Failures != 0 || hs.Fenced != st.Fenced {
		t.Errorf("transport fenced %d, failures %d; holder fenced %d: want the 409 counted once on each side, no attempt spent", st.Fenced, st.Failures, hs.Fenced)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen[len(seen)-5:] {
		if s.Partition == last.Partition && s.Epoch <= newer.Epoch {
			t.Errorf("sent %+v after the target saw epoch %d of partition %d: the Holder kept spending a fenced partition", s, newer.Epoch, last.Partition)
		}
	}
}

// share is a Share that grants at once with fence f, or fails with err.
type share struct {
	f     string
	err   error
	mu    sync.Mutex
	stale []string
}

func (s *share) Wait(context.Context, float64) (string, error) { return s.f, s.err }
func (s *share) Stale(f string) {
	s.mu.Lock()
	s.stale = append(s.stale, f)
	s.mu.Unlock()
}

// What a fenced try's answer does: a 409 is retried when the request may
// go twice and returned when it may not, telling the Share each time; the
// target's other fence refusals come back as they are; the Share's error
// ends the request with the body closed.
func TestShareAnswers(t *testing.T) {
	cases := []struct {
		name     string
		method   string
		first    int  // the first try's status; later tries get 200
		own      bool // a 409 of the target's own (not a fence refusal)
		want     int
		tries    uint64
		stale    int
		shareErr error
	}{
		{name: "409 retried", method: http.MethodGet, first: 409, want: 200, tries: 2, stale: 1},
		{name: "409 on a POST returned", method: http.MethodPost, first: 409, want: 409, tries: 1, stale: 1},
		{name: "the target's own 409 returned", method: http.MethodGet, first: 409, own: true, want: 409, tries: 1},
		{name: "403 returned", method: http.MethodGet, first: 403, want: 403, tries: 1},
		{name: "428 returned", method: http.MethodGet, first: 428, want: 428, tries: 1},
		{name: "200", method: http.MethodGet, first: 200, want: 200, tries: 1},
		{name: "share fails", method: http.MethodGet, shareErr: errors.New("lease: closed")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			n := 0
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n++
				first := n == 1
				mu.Unlock()
				if r.Header.Get("Sluice-Lease-Epoch") != "9 1 g" {
					w.WriteHeader(500)
					return
				}
				if first && c.first != 200 {
					w.WriteHeader(c.first)
					if c.first == http.StatusConflict && !c.own {
						_, _ = io.WriteString(w, `{"error":"stale_lease_epoch","retryable":false}`)
					} else {
						_, _ = io.WriteString(w, `{"error":"version_conflict"}`)
					}
				}
			}))
			defer target.Close()
			sh := &share{f: "9 1 g", err: c.shareErr}
			tr, err := pace.NewTransport(pace.TransportOptions{Share: sh})
			if err != nil {
				t.Fatal(err)
			}
			body := &closeCounter{Reader: strings.NewReader("x")}
			req, _ := http.NewRequest(c.method, target.URL, nil)
			if c.method == http.MethodPost || c.shareErr != nil {
				req.Body = body // not readable again: a POST's 409 cannot be retried anyway
			}
			resp, err := tr.RoundTrip(req)
			if c.shareErr != nil {
				if !errors.Is(err, c.shareErr) || body.closed.Load() == 0 {
					t.Fatalf("err %v, body closed %v: want the Share's error and the body closed", err, body.closed.Load())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if c.first != 200 && c.want == c.first && !strings.Contains(string(got), "error") {
				t.Errorf("the answer's body %q: want the target's, whole", got)
			}
			st := tr.Stats()
			if resp.StatusCode != c.want || st.Tries != c.tries || st.Failures != 0 || len(sh.stale) != c.stale {
				t.Errorf("status %d after %d tries (%d failures), Stale called %d times; want %d after %d, %d", resp.StatusCode, st.Tries, st.Failures, len(sh.stale), c.want, c.tries, c.stale)
			}
			for _, f := range sh.stale {
				if f != "9 1 g" {
					t.Errorf("Stale(%q), want the try's fence", f)
				}
			}
		})
	}
}
