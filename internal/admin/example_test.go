package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/internal/admin"
)

// The admin routes go behind the token; health and metrics stay open.
func ExampleHandler() {
	routes := http.NewServeMux()
	routes.HandleFunc("GET /admin/config", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, `{"version":"v1"}`) })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/admin/", admin.Handler(admin.Options{Token: "an-admin-token-of-some-length", Enable: "set admin.token_file"}, routes))

	for _, auth := range []string{"", "Bearer an-admin-token-of-some-length"} {
		req := httptest.NewRequest("GET", "/admin/config", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	// Output:
	// 401 {"error":"unauthorized: send Authorization: Bearer and the admin token"}
	// 200 {"version":"v1"}
}
