package relay_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
)

// fixedBudget always grants, with a fence, and counts what went stale.
type fixedBudget struct{ stale chan string }

func (b fixedBudget) Wait(context.Context, float64) (string, error) { return "7 0 g", nil }
func (b fixedBudget) Stale(f string)                                { b.stale <- f }
func (fixedBudget) Rate() float64                                   { return 1000 }

// A target that refuses a task's fence (409 stale, 400, 403, 428) gets
// the task again: it is never dead-lettered for it, whether or not the
// answer's body is kept; a 409 tells the Budget its share is stale.
func TestFenceRefusalsAreRetried(t *testing.T) {
	for _, status := range []int{http.StatusConflict, http.StatusBadRequest, http.StatusForbidden, http.StatusPreconditionRequired} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			tg := newTarget(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Sluice-Lease-Epoch") != "7 0 g" {
					w.WriteHeader(500)
					return
				}
				if n == 1 {
					w.WriteHeader(status)
					_, _ = io.WriteString(w, `{"error":"stale_lease_epoch","retryable":false}`)
					return
				}
				_, _ = io.WriteString(w, "ok")
			})
			b := fixedBudget{stale: make(chan string, 4)}
			r := start(t, oneTarget(tg.URL, func(tc *relay.Target) {
				tc.Budget = b
				tc.KeepBody = -1 // the marker is not in a kept body
			}))
			got, err := r.Enqueue(context.Background(), "jobs", relay.Request{URL: "/x"})
			if err != nil {
				t.Fatal(err)
			}
			info := waitFinished(t, r.Relay, got[0].ID, 10*time.Second)
			if info.State != queue.Succeeded || len(tg.got()) != 2 {
				t.Fatalf("task %s after %d arrivals (outcome %q), want succeeded on the second", info.State, len(tg.got()), info.Outcome)
			}
			select {
			case f := <-b.stale:
				if status != http.StatusConflict || f != "7 0 g" {
					t.Errorf("Stale(%q) after a %d", f, status)
				}
			default:
				if status == http.StatusConflict {
					t.Error("a 409 did not tell the Budget")
				}
			}
		})
	}
}
