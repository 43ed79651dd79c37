// Package admin is what sluice serve's and sluice gateway's admin
// listeners share: the bearer-token check in front of their /admin/
// routes (Handler) and the reader of the token (ReadToken), so that both
// commands answer and refuse with the same rules and the same words.
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
	"fmt"
	"net/http"
	"os"
	"strings"
)

// MinTokenLength is the fewest characters an admin token may have.
const MinTokenLength = 16

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
		got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !bearer || subtle.ConstantTimeCompare([]byte(got), token) != 1 {
			w.Header().Set("WWW-Authenticate", Challenge)
			writeError(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer and the admin token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeError(w http.ResponseWriter, code int, msg string) {
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

// A Source says where a secret is kept. The zero Source is no secret.
// Today a secret is read from a file; an environment variable is the
// next source this type is meant to take.
type Source struct {
	// File is the path of a file holding the secret.
	File string
}

// ErrShortToken is returned, wrapped with the source, for a token that is
// not one word of at least MinTokenLength characters.
var ErrShortToken = fmt.Errorf("one word of at least %d characters", MinTokenLength)

// ReadToken reads an admin token from src: the file's content trimmed of
// surrounding white space, which must be one word (no white space inside)
// of at least MinTokenLength (16) characters, else ErrShortToken. The zero
// Source gives "" and no error: no token, the admin API off. An error
// names the source, never the token.
func ReadToken(src Source) (string, error) {
	if src.File == "" {
		return "", nil
	}
	b, err := os.ReadFile(src.File)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < MinTokenLength || strings.ContainsAny(t, " \t\r\n") {
		return "", fmt.Errorf("admin token %s: %w", src.File, ErrShortToken)
	}
	return t, nil
}
