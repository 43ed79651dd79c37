// Package console is the relay's web page: one server-rendered page, on
// the relay's admin listener, that shows each target and queue — depth,
// effective rate against the limit over the last ten minutes (an inline
// SVG chart), 429s, ETA, dead letters with a replay button — and
// refreshes itself every two seconds. Its figures are the API's:
// every number is rendered from httpapi.ViewQueue, the view GET
// /v1/queues/{queue} serves. Templates, style sheet and script are
// embedded; there is no build step. docs/relay-console.md is the manual.
//
// # Routes
//
//	GET  /                          the page (?token= logs in, see below)
//	GET  /console/fragment          the page's live part, fetched every 2 s
//	GET  /console/queues/{q}/dead   a queue's dead letters, 100 a page (?after=)
//	POST /console/login             the login form (token=…)
//	POST /console/logout            ends the browser's session
//	POST /console/replay            replays one dead task (id=…)
//	POST /console/replay-all        replays a queue's dead tasks (queue=…)
//	POST /console/pause, /resume    pauses or resumes a queue (queue=…)
//	GET  /console/static/{file}     the embedded style sheet and script
//
// Every other path is 404.
//
// # Authentication
//
// Every route but the static files and the login needs the relay's token:
// either "Authorization: Bearer <token>" (checked by package admin, as
// the API and /metrics check it), or the console's session cookie. A
// browser gets the cookie by opening /?token=<token> once, or by posting
// the token in the login form: the console answers with an HttpOnly,
// SameSite=Strict cookie (Secure under TLS) for Path / and a redirect to
// / that leaves the token out of the address bar. The cookie holds not
// the token but a random session ID (32 bytes of crypto/rand, base64url),
// so it is worthless against the API. The sessions are the console's, in
// memory: logging out ends the browser's session at once (its cookie is
// refused from then on, wherever it was copied to), a session ends after
// Options.SessionLife, and every session ends when the token changes or
// the relay restarts. The console keeps at most Options.MaxSessions; a
// new one beyond them ends the oldest. Tokens are compared in constant
// time, and sessions are looked up by an HMAC-SHA256 of their ID keyed by
// the token. A new login ends the session the browser had. Without the
// token or a session the page is a login form (401); with no token
// configured every route is 403.
//
// A login with a wrong token waits a quarter of a second before its
// answer (that request only), and failed logins are not logged one by
// one: the console logs at most one line a minute, "relay console: N
// failed logins in the last minute", as it does for refused cross-origin
// POSTs.
//
// # Cross-site requests
//
// Every state change is a POST form. Besides the SameSite=Strict cookie,
// each POST must come from the console's own origin: net/http's
// CrossOriginProtection (Sec-Fetch-Site, else Origin against Host), and
// a Referer of another host when the browser sends neither. A POST with
// none of the three headers is refused too, unless it carries
// "Authorization: Bearer" (a program's, which no browser form can send).
// A refused POST is 403 and changes nothing.
//
// # Security headers
//
// Every answer carries Content-Security-Policy allowing only 'self'
// (no inline script or style: the page's one script and style sheet are
// files), X-Frame-Options DENY, nosniff, Referrer-Policy same-origin; pages
// are Cache-Control: no-store. Everything shown passes through
// html/template's escaping: task URLs, keys and outcomes are strings
// written by clients and targets.
package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/relay"
)

// Options configure the console. The zero value of each field but Token
// means its documented default.
type Options struct {
	// Token is the relay's API token: the console's password. Required:
	// without one the console is off and every route is 403.
	Token string
	// Logger receives the console's events: replays, pauses, and a line a
	// minute at most about failed logins and refused cross-origin POSTs.
	// Default slog.Default().
	Logger *slog.Logger
	// SessionLife is how long a browser's login lasts; default 8 hours
	// (DefaultSessionLife).
	SessionLife time.Duration
	// MaxSessions is how many sessions the console keeps at once; a login
	// beyond them ends the oldest. Default 1,000 (DefaultMaxSessions).
	MaxSessions int
	// Now is the clock of sessions' expiry; default time.Now.
	Now func() time.Time
}

// DefaultSessionLife is Options.SessionLife's default.
const DefaultSessionLife = 8 * time.Hour

// DefaultMaxSessions is Options.MaxSessions's default.
const DefaultMaxSessions = 1000

// cookieName is the session cookie's name: a constant, nothing secret.
const cookieName = "sluice_console"

// failedLoginDelay is how long the answer to a wrong token waits: it
// slows a guesser a little and holds no other request.
const failedLoginDelay = 250 * time.Millisecond

// refreshEvery is how often the page fetches its live part.
const refreshEvery = 2 * time.Second

// csp allows the page its own files and nothing else.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// console is the handler's state; it is safe for concurrent use.
type console struct {
	r        *relay.Relay
	token    []byte
	life     time.Duration
	now      func() time.Time
	log      *slog.Logger
	cop      *http.CrossOriginProtection
	sessions *sessions
	failed   *tally // failed logins
	refused  *tally // refused cross-origin POSTs
}

// New returns the console's handler over r, its routes under "/" (see the
// package doc). The handler is safe for concurrent use. It starts no
// goroutine but the timer's that logs a minute's failed logins or refused
// POSTs, after the first of them.
func New(r *relay.Relay, o Options) http.Handler {
	c := &console{r: r, token: []byte(o.Token), life: o.SessionLife, now: o.Now, log: o.Logger}
	if c.life <= 0 {
		c.life = DefaultSessionLife
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.cop = http.NewCrossOriginProtection()
	c.sessions = newSessions(c.token, o.MaxSessions)
	c.failed = &tally{what: "failed logins", log: c.log}
	c.refused = &tally{what: "cross-origin POSTs refused", log: c.log}

	mux := http.NewServeMux()
	mux.Handle("GET /{$}", c.authed(http.HandlerFunc(c.page)))
	mux.Handle("GET /console/fragment", c.authed(http.HandlerFunc(c.fragment)))
	mux.Handle("GET /console/queues/{queue}/dead", c.authed(http.HandlerFunc(c.deadPage)))
	mux.Handle("POST /console/login", c.sameOrigin(http.HandlerFunc(c.login)))
	mux.Handle("POST /console/logout", c.sameOrigin(http.HandlerFunc(c.logout)))
	mux.Handle("POST /console/replay", c.sameOrigin(c.authed(http.HandlerFunc(c.replay))))
	mux.Handle("POST /console/replay-all", c.sameOrigin(c.authed(http.HandlerFunc(c.replayAll))))
	mux.Handle("POST /console/pause", c.sameOrigin(c.authed(http.HandlerFunc(c.pause))))
	mux.Handle("POST /console/resume", c.sameOrigin(c.authed(http.HandlerFunc(c.resume))))
	mux.HandleFunc("GET /console/static/{file}", serveStatic)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		c.problem(w, http.StatusNotFound, "There is no such page: the console is at /.")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if len(c.token) == 0 {
			h.Set("Cache-Control", "no-store")
			c.problem(w, http.StatusForbidden, "The console is off: the relay has no token (give sluice relay --token-file or $SLUICE_RELAY_TOKEN).")
			return
		}
		mux.ServeHTTP(w, req)
	})
}

// authed lets through the requests that carry the token or a session,
// and answers the others with the login page (401). A request with an
// Authorization header is a program's: package admin checks it and
// answers a wrong one as the API does.
func (c *console) authed(next http.Handler) http.Handler {
	bearer := admin.Handler(admin.Options{Token: string(c.token)}, next)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if req.Header.Get("Authorization") != "" {
			bearer.ServeHTTP(w, req)
			return
		}
		if req.Method == http.MethodGet && req.URL.Path == "/" && req.URL.Query().Has("token") {
			c.logIn(w, req, req.URL.Query().Get("token"))
			return
		}
		if !c.validSession(req) {
			w.Header().Set("WWW-Authenticate", admin.Challenge)
			c.render(w, http.StatusUnauthorized, "login", loginData{})
			return
		}
		next.ServeHTTP(w, req)
	})
}

// login is the login form's POST.
func (c *console) login(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	req.Body = http.MaxBytesReader(w, req.Body, 4<<10)
	if err := req.ParseForm(); err != nil {
		c.render(w, http.StatusBadRequest, "login", loginData{Problem: "The form could not be read."})
		return
	}
	c.logIn(w, req, req.PostForm.Get("token"))
}

// logIn checks a token a browser gave and, when it is right, ends the
// browser's old session if any, starts a new one, sets its cookie and
// sends the browser to /. A wrong token is counted (c.failed) and
// answered after failedLoginDelay.
func (c *console) logIn(w http.ResponseWriter, req *http.Request, token string) {
	if subtle.ConstantTimeCompare([]byte(token), c.token) != 1 {
		c.failed.add(req.RemoteAddr, "")
		wait(req.Context(), failedLoginDelay)
		w.Header().Set("WWW-Authenticate", admin.Challenge)
		c.render(w, http.StatusUnauthorized, "login", loginData{Problem: "That token is not the relay's."})
		return
	}
	if old, err := req.Cookie(cookieName); err == nil {
		c.sessions.end(old.Value)
	}
	now := c.now()
	expires := now.Add(c.life)
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: c.sessions.begin(now, expires), Path: "/", Expires: expires, MaxAge: int(c.life / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: req.TLS != nil,
	})
	http.Redirect(w, req, "/", http.StatusSeeOther)
}

// logout ends the request's session, if it has one, and clears its
// cookie.
func (c *console) logout(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if ck, err := req.Cookie(cookieName); err == nil {
		c.sessions.end(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: req.TLS != nil})
	http.Redirect(w, req, "/", http.StatusSeeOther)
}

// validSession reports whether the request carries the cookie of a
// session of this console that has not ended.
func (c *console) validSession(req *http.Request) bool {
	ck, err := req.Cookie(cookieName)
	return err == nil && c.sessions.valid(ck.Value, c.now())
}

// wait returns after d, or when ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

var (
	// errCrossOrigin is a Referer of another host.
	errCrossOrigin = errors.New("cross-origin request detected from Referer header")
	// errNoOrigin is a POST without Sec-Fetch-Site, Origin, Referer or a
	// bearer token.
	errNoOrigin = errors.New("a POST without Sec-Fetch-Site, Origin, Referer or Authorization: Bearer")
)

// sameOrigin refuses (403) a POST from another origin: see the package
// doc.
func (c *console) sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := c.checkOrigin(req); err != nil {
			c.refused.add(req.RemoteAddr, err.Error())
			w.Header().Set("Cache-Control", "no-store")
			c.problem(w, http.StatusForbidden, "The console refuses changes asked from another site. Use the buttons of the console's own page.")
			return
		}
		next.ServeHTTP(w, req)
	})
}

// checkOrigin judges a POST by the first of its headers that says where
// it comes from: Sec-Fetch-Site or Origin (CrossOriginProtection), else
// Referer, else a bearer token (a program's; authed checks it, and no
// browser form can send one). A POST with none of them is refused.
func (c *console) checkOrigin(req *http.Request) error {
	if err := c.cop.Check(req); err != nil {
		return err
	}
	h := req.Header
	if h.Get("Sec-Fetch-Site") != "" || h.Get("Origin") != "" {
		return nil // CrossOriginProtection judged them
	}
	if ref := h.Get("Referer"); ref != "" {
		if u, err := url.Parse(ref); err != nil || u.Host != req.Host {
			return errCrossOrigin
		}
		return nil
	}
	if scheme, _, _ := strings.Cut(h.Get("Authorization"), " "); strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	return errNoOrigin
}
