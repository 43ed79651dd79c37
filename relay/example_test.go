package relay_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
)

// The relay in process: a queue on a bbolt file, a target that allows 10
// requests per second, three requests enqueued, their answers read back.
func Example() {
	crm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"created":%q}`, r.URL.Path)
	}))
	defer crm.Close()
	dir, err := os.MkdirTemp("", "relay-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx, stop := context.WithCancel(context.Background())
	r, err := relay.New(ctx, relay.Options{
		Targets: []relay.Target{{
			Name:   "crm",
			Origin: crm.URL,
			Limits: []sluice.Limit{{Name: "per_second", Quota: 10, Window: time.Second}},
			Allow:  []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, // the example's target is on loopback
		}},
		Queues: []relay.Queue{{Name: "contacts", Target: "crm"}},
		Open: func(_ context.Context, name string) (queue.Queue, error) {
			return boltqueue.Open(filepath.Join(dir, name+".db"), boltqueue.Options{})
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()

	var reqs []relay.Request
	for i := range 3 {
		reqs = append(reqs, relay.Request{Method: "POST", URL: fmt.Sprintf("/v2/contacts/%d", i), Key: fmt.Sprintf("contact-%d", i)})
	}
	accepted, err := r.Enqueue(ctx, "contacts", reqs...)
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range accepted {
		for {
			info, err := r.Task(ctx, a.ID)
			if err != nil {
				log.Fatal(err)
			}
			if info.State.Finished() {
				fmt.Println(info.State, info.Answer.Status, string(info.Answer.Body))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop()
	<-done
	_ = r.Close()
	// Output:
	// succeeded 201 {"created":"/v2/contacts/0"}
	// succeeded 201 {"created":"/v2/contacts/1"}
	// succeeded 201 {"created":"/v2/contacts/2"}
}
