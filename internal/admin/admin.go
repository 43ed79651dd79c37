// Package admin is what sluice serve's and sluice gateway's admin
// listeners share: the bearer-token check in front of their /admin/
// routes (Handler), so that both commands answer and refuse with the same
// rules and the same words. The token is read by package secret
// (secret.AdminToken: one word of at least 16 characters).
//
// The check: without a configured token the admin API is off and every
// request is 403; with one, a request without "Authorization: Bearer
// <token>", or with another token, is 401 with WWW-Authenticate. Both
// bodies are JSON {"error": "..."} saying which, and every answer is
// Cache-Control: no-store.
package admin

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// Challenge is the WWW-Authenticate value of a 401.
const Challenge = `Bearer realm="sluice admin"`

// Options configures Handler.
type Options struct {
	// Token is the bearer token every request must carry. Empty: the admin
	// API is off, and every request is 403.
	Token string
	// Enable tells the operator, in the 403 body, how to turn the admin API
	// on: "start sluice serve with --admin-token-file". Default: "configure
	// an admin token".
	Enable string
}

// Handler returns next behind the admin token (see the package doc): next
// is called only for a request that carries the configured token. The
// token is compared in constant time for its length. The handler is safe
// for concurrent use.
func Handler(opts Options, next http.Handler) http.Handler {
	token := []byte(opts.Token)
	off := "admin endpoints are off: no admin token is configured (" + or(opts.Enable, "configure an admin token") + ")"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if len(token) == 0 {
			writeError(w, http.StatusForbidden, off)
			return
		}
		// The scheme's name is case-insensitive (RFC 9110, 11.1); the
		// token is compared whole, in constant time for its length.
		auth := r.Header.Get("Authorization")
		bearer := len(auth) > len("Bearer ") && strings.EqualFold(auth[:len("Bearer ")], "Bearer ")
		if !bearer || subtle.ConstantTimeCompare([]byte(auth[len("Bearer "):]), token) != 1 {
			w.Header().Set("WWW-Authenticate", Challenge)
			writeError(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer and the admin token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeError answers a refusal and closes the connection: net/http would
// otherwise read what is left of the request's body (up to 256 KiB) before
// answering, and a client without the token that sends a large
// Content-Length and then nothing would hold the connection, unanswered,
// for the server's whole read timeout.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func or(a, b string) string {
	if a == "" {
		return b
	}
	return a
}
