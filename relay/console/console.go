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
// SameSite=Strict cookie for Path / and a redirect to / that leaves the
// token out of the address bar. The cookie holds not the token but an
// expiry and an HMAC-SHA256 of it keyed by the token, so it is worthless
// against the API, ends after Options.SessionLife, and every session ends
// when the token changes. Tokens and cookies are compared in constant
// time. Without either the page is a login form (401); with no token
// configured every route is 403.
//
// # Cross-site requests
//
// Every state change is a POST form. Besides the SameSite=Strict cookie,
// each POST must come from the console's own origin: net/http's
// CrossOriginProtection (Sec-Fetch-Site, else Origin against Host), and
// a Referer of another host when the browser sends neither. A refused
// POST is 403 and changes nothing.
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
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
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
	// Logger receives the console's events: logins refused, replays,
	// pauses. Default slog.Default().
	Logger *slog.Logger
	// SessionLife is how long a browser's login lasts; default 12 hours.
	SessionLife time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// DefaultSessionLife is Options.SessionLife's default.
const DefaultSessionLife = 12 * time.Hour

// cookieName is the session cookie's name.
const cookieName = "sluice_console"

// refreshEvery is how often the page fetches its live part.
const refreshEvery = 2 * time.Second

// csp allows the page its own files and nothing else.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// console is the handler's state; it is safe for concurrent use.
type console struct {
	r     *relay.Relay
	token []byte
	life  time.Duration
	now   func() time.Time
	log   *slog.Logger
	cop   *http.CrossOriginProtection
}

// New returns the console's handler over r, its routes under "/" (see the
// package doc). The handler is safe for concurrent use; it starts no
// goroutine.
func New(r *relay.Relay, o Options) http.Handler {
	c := &console{r: r, token: []byte(o.Token), life: o.SessionLife, now: o.Now, log: o.Logger}
	if c.life <= 0 {
		c.life = DefaultSessionLife
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.cop = http.NewCrossOriginProtection()

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

// logIn checks a token a browser gave and, when it is right, sets the
// session cookie and sends the browser to /.
func (c *console) logIn(w http.ResponseWriter, req *http.Request, token string) {
	if subtle.ConstantTimeCompare([]byte(token), c.token) != 1 {
		c.log.Warn("relay console: a login with a wrong token", "remote", req.RemoteAddr)
		w.Header().Set("WWW-Authenticate", admin.Challenge)
		c.render(w, http.StatusUnauthorized, "login", loginData{Problem: "That token is not the relay's."})
		return
	}
	expires := c.now().Add(c.life)
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: c.session(expires), Path: "/", Expires: expires, MaxAge: int(c.life / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: req.TLS != nil,
	})
	http.Redirect(w, req, "/", http.StatusSeeOther)
}

func (c *console) logout(w http.ResponseWriter, req *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: req.TLS != nil})
	http.Redirect(w, req, "/", http.StatusSeeOther)
}

// session is the cookie's value for a session ending at expires:
// "<unix seconds>.<base64url HMAC-SHA256(token, that)>".
func (c *console) session(expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + base64.RawURLEncoding.EncodeToString(c.mac(exp))
}

func (c *console) mac(exp string) []byte {
	m := hmac.New(sha256.New, c.token)
	m.Write([]byte("sluice relay console session\x00" + exp))
	return m.Sum(nil)
}

// validSession reports whether the request carries a session cookie that
// this token signed and that has not expired.
func (c *console) validSession(req *http.Request) bool {
	ck, err := req.Cookie(cookieName)
	if err != nil {
		return false
	}
	exp, sig, ok := strings.Cut(ck.Value, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !c.now().Before(time.Unix(unix, 0)) {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	return err == nil && hmac.Equal(got, c.mac(exp))
}

// errCrossOrigin is a Referer of another host.
var errCrossOrigin = errors.New("cross-origin request detected from Referer header")

// sameOrigin refuses (403) a POST from another origin: see the package
// doc.
func (c *console) sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := c.checkOrigin(req); err != nil {
			c.log.Warn("relay console: a cross-origin request refused", "path", req.URL.Path, "remote", req.RemoteAddr, "err", err)
			w.Header().Set("Cache-Control", "no-store")
			c.problem(w, http.StatusForbidden, "The console refuses changes asked from another site. Use the buttons of the console's own page.")
			return
		}
		next.ServeHTTP(w, req)
	})
}

func (c *console) checkOrigin(req *http.Request) error {
	if err := c.cop.Check(req); err != nil {
		return err
	}
	if req.Header.Get("Sec-Fetch-Site") != "" || req.Header.Get("Origin") != "" {
		return nil // CrossOriginProtection judged them
	}
	if ref := req.Header.Get("Referer"); ref != "" {
		if u, err := url.Parse(ref); err != nil || u.Host != req.Host {
			return errCrossOrigin
		}
	}
	return nil
}
