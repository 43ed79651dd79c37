package console_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/boltqueue"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/relay/console"
)

// The console goes at "/" of the relay's admin listener, beside
// /healthz: a browser logs in once with ?token= and keeps a cookie.
func Example() {
	dir, err := os.MkdirTemp("", "console-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	r, err := relay.New(context.Background(), relay.Options{
		Targets: []relay.Target{{Name: "api", Origin: "https://api.example.com"}},
		Queues:  []relay.Queue{{Name: "jobs", Target: "api"}},
		Open: func(_ context.Context, name string) (queue.Queue, error) {
			return boltqueue.Open(filepath.Join(dir, name+".db"), boltqueue.Options{Logger: quiet})
		},
		Logger: quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	admin := http.NewServeMux()
	admin.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	admin.Handle("/", console.New(r, console.Options{Token: "a-relay-token-of-some-length", Logger: quiet}))

	show := func(path string, cookies ...*http.Cookie) *http.Response {
		req := httptest.NewRequest("GET", path, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, req)
		resp := rec.Result()
		if to := resp.Header.Get("Location"); to != "" {
			fmt.Println("GET", path, "→", resp.StatusCode, "to", to)
		} else {
			fmt.Println("GET", path, "→", resp.StatusCode)
		}
		return resp
	}
	show("/")
	login := show("/?token=a-relay-token-of-some-length")
	show("/", login.Cookies()...)
	show("/console/fragment", login.Cookies()...)
	show("/nothing-here", login.Cookies()...)
	// Output:
	// GET / → 401
	// GET /?token=a-relay-token-of-some-length → 303 to /
	// GET / → 200
	// GET /console/fragment → 200
	// GET /nothing-here → 404
}
