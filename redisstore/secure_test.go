package redisstore_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/certtest"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// The secrets of these tests: no error, log or option printed may hold
// one.
const (
	defaultPassword = "pass-of-the-default-user-7d1"
	aclPassword     = "acl-user-password-c93"
	wrongPassword   = "not-the-password-0a4"
)

// aclUser is the least an ACL user of sluice needs (docs/stores.md): its
// keys, the script calls, and the commands its scripts and the client's
// health checks run.
var aclUser = []string{"--user", "sluice", "on", ">" + aclPassword, "resetkeys", "~sluice:*", "resetchannels", "-@all",
	"+evalsha", "+eval", "+ping", "+get", "+set", "+del", "+time"}

// decides checks that a store on conn decides on Redis: a fresh key under
// a quota of 3 admits exactly 3, which a failure policy never does.
func decides(t *testing.T, conn redisstore.Client) {
	t.Helper()
	s := newStore(t, redisstore.Options{Client: conn, Policy: sluice.FailOpen, Timeout: 5 * time.Second})
	limit := sluice.Limit{Name: "secure", Quota: 3, Window: time.Hour}
	key := fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	for i := range 4 {
		d, err := s.Allow(ctx, key, limit, 1)
		if err != nil || d.Allowed != (i < 3) {
			t.Fatalf("call %d: %+v, %v; want exactly 3 allowed (a policy would allow all)", i, d, err)
		}
	}
	if st := s.Stats(); st.FailOpen != 0 || st.Failures != 0 {
		t.Fatalf("Stats %+v: decisions were the policy's", st)
	}
}

// refused checks that Dial refuses opts at once with ErrMisconfigured,
// saying each of says, and holding no secret.
func refused(t *testing.T, opts redisstore.DialOptions, says ...string) {
	t.Helper()
	start := time.Now()
	conn, err := redisstore.Dial(opts)
	if err == nil {
		conn.Close()
		t.Fatalf("Dial(%v): no error", opts)
	}
	if !errors.Is(err, redisstore.ErrMisconfigured) {
		t.Errorf("Dial: %v; want ErrMisconfigured", err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Dial: %v\nwant it to say %q", err, s)
		}
	}
	noSecret(t, err.Error())
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Dial took %v to refuse: a refusal is not retried", d)
	}
}

func noSecret(t *testing.T, text string) {
	t.Helper()
	for _, s := range []string{defaultPassword, aclPassword, wrongPassword, sentinelPassword} {
		if strings.Contains(text, s) {
			t.Errorf("%q holds a secret", text)
		}
	}
}

func dialed(t *testing.T, opts redisstore.DialOptions) *redisstore.Conn {
	t.Helper()
	conn, err := redisstore.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if !conn.Connected() {
		t.Fatal("not connected after Dial to a Redis that is up")
	}
	return conn
}

// A Redis with a password and an ACL user: the right credentials decide;
// a wrong password, an unknown user, no password, a user that may not run
// PING are refused at once, saying which, never with the password.
func TestDialAuth(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, append([]string{"--requirepass", defaultPassword}, aclUser...)...)
	a := []string{srv.Addr()}
	t.Run("requirepass", func(t *testing.T) {
		conn := dialed(t, redisstore.DialOptions{Addrs: a, Password: defaultPassword})
		decides(t, conn)
		noSecret(t, fmt.Sprintf("%v %+v %#v", conn, conn, conn)) // a Conn printed
	})
	t.Run("ACL user", func(t *testing.T) {
		decides(t, dialed(t, redisstore.DialOptions{Addrs: a, Username: "sluice", Password: aclPassword}))
	})
	t.Run("database 3", func(t *testing.T) {
		decides(t, dialed(t, redisstore.DialOptions{Addrs: a, Password: defaultPassword, DB: 3}))
	})
	t.Run("wrong password", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: a, Password: wrongPassword}, `AUTH as "default" at `+srv.Addr(), "the user name or the password is wrong", "WRONGPASS")
	})
	t.Run("ACL user, wrong password", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: a, Username: "sluice", Password: defaultPassword}, `AUTH as "sluice"`, "WRONGPASS")
	})
	t.Run("unknown user", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: a, Username: "nobody", Password: aclPassword}, `AUTH as "nobody"`, "WRONGPASS")
	})
	t.Run("no password", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: a}, "asks for a password", "NOAUTH")
	})
	t.Run("database out of range", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: a, Password: defaultPassword, DB: 99}, "SELECT 99 (the database) at "+srv.Addr(), "out of range")
	})
	t.Run("a user that may not PING", func(t *testing.T) {
		if out, err := srv.CLI("--no-auth-warning", "-a", defaultPassword, "ACL", "SETUSER", "mute", "on", ">"+aclPassword, "-@all"); err != nil {
			t.Fatalf("ACL SETUSER: %v %s", err, out)
		}
		refused(t, redisstore.DialOptions{Addrs: a, Username: "mute", Password: aclPassword}, "PING at", "may not run it", "NOPERM")
	})
}

// tlsFixture is a Redis speaking TLS, with a password.
type tlsFixture struct {
	srv, mtls *redistest.Server
	ca, other *certtest.CA
	client    tls.Certificate
}

func startTLS(t *testing.T) *tlsFixture {
	t.Helper()
	f := &tlsFixture{ca: certtest.NewCA(t, "redis CA"), other: certtest.NewCA(t, "another CA")}
	files := f.ca.Write(t, t.TempDir(), f.ca.Issue(t, certtest.Leaf{}))
	rf := redistest.TLSFiles{Cert: files.Cert, Key: files.Key, CA: files.CA}
	f.srv = redistest.StartTLSServer(t, rf, false, "--requirepass", defaultPassword)
	f.mtls = redistest.StartTLSServer(t, rf, true, "--requirepass", defaultPassword)
	p := f.ca.Issue(t, certtest.Leaf{Client: true, CommonName: "sluice"})
	var err error
	if f.client, err = tls.X509KeyPair(p.CertPEM, p.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return f
}

func roots(ca *certtest.CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// TLS: the right CA decides (the server's name is the host dialled);
// another CA, the system's roots, a name the certificate lacks, TLS to a
// clear-text port are refused at once; a client certificate is sent to a
// Redis that asks for one, and its absence is refused. Clear text to a
// TLS port is never a success.
func TestDialTLS(t *testing.T) {
	t.Parallel()
	f := startTLS(t)
	tlsAt := []string{f.srv.TLSAddr()}
	t.Run("the right CA", func(t *testing.T) {
		decides(t, dialed(t, redisstore.DialOptions{Addrs: tlsAt, Password: defaultPassword, TLS: &tls.Config{RootCAs: roots(f.ca)}}))
	})
	t.Run("TLS 1.3 only", func(t *testing.T) {
		decides(t, dialed(t, redisstore.DialOptions{Addrs: tlsAt, Password: defaultPassword, TLS: &tls.Config{RootCAs: roots(f.ca), MinVersion: tls.VersionTLS13}}))
	})
	t.Run("another CA", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: tlsAt, Password: defaultPassword, TLS: &tls.Config{RootCAs: roots(f.other)}},
			"the TLS handshake with Redis at "+f.srv.TLSAddr(), "certificate signed by unknown authority", "the CA file does not hold the CA")
	})
	t.Run("the system's roots", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: tlsAt, Password: defaultPassword, TLS: &tls.Config{}}, "unknown authority", "no CA of the system's roots signed Redis's certificate: give the CA file")
	})
	t.Run("a name the certificate lacks", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: tlsAt, Password: defaultPassword, TLS: &tls.Config{RootCAs: roots(f.ca), ServerName: "redis.example"}},
			"redis.example", "set the TLS server name")
	})
	t.Run("TLS to a clear-text port", func(t *testing.T) {
		// A clear-text Redis waits for the rest of the "command" a
		// ClientHello starts: no answer, so not a refusal, but never a
		// connection in clear text either.
		conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{f.srv.Addr()}, Password: defaultPassword,
			TLS: &tls.Config{RootCAs: roots(f.ca)}, ConnectTimeout: 200 * time.Millisecond, MaxBackoff: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if conn.Connected() {
			t.Fatal("connected with TLS to a clear-text port")
		}
		if _, err := conn.EvalSHA(ctx, "0", nil, nil); !errors.Is(err, redisstore.ErrNotConnected) || !strings.Contains(err.Error(), "is it Redis's tls-port?") {
			t.Fatalf("a call: %v; want ErrNotConnected asking whether it is the tls-port", err)
		}
	})
	t.Run("TLS to a server that answers in clear text", func(t *testing.T) {
		// A clear-text server that answers at once (a Redis replying to
		// the ClientHello's first line) is a refusal.
		refused(t, redisstore.DialOptions{Addrs: []string{plainTalker(t)}, TLS: &tls.Config{RootCAs: roots(f.ca)}},
			"does not speak TLS", "connect without TLS, or to its tls-port")
	})
	t.Run("InsecureSkipVerify", func(t *testing.T) {
		_, err := redisstore.Dial(redisstore.DialOptions{Addrs: tlsAt, TLS: &tls.Config{InsecureSkipVerify: true}})
		if err == nil || !strings.Contains(err.Error(), "InsecureSkipVerify: refused") {
			t.Fatalf("Dial with InsecureSkipVerify: %v", err)
		}
	})
	t.Run("client certificate", func(t *testing.T) {
		decides(t, dialed(t, redisstore.DialOptions{Addrs: []string{f.mtls.TLSAddr()}, Password: defaultPassword,
			TLS: &tls.Config{RootCAs: roots(f.ca), Certificates: []tls.Certificate{f.client}}}))
	})
	t.Run("no client certificate", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: []string{f.mtls.TLSAddr()}, Password: defaultPassword, TLS: &tls.Config{RootCAs: roots(f.ca)}},
			"Redis refused this client", "client certificate")
	})
	t.Run("clear text to a TLS port", func(t *testing.T) {
		refused(t, redisstore.DialOptions{Addrs: tlsAt, Password: defaultPassword}, "Redis at "+f.srv.TLSAddr()+" speaks TLS, and the connection is configured in clear text: configure TLS")
	})
	t.Run("no password to a server that does not answer", func(t *testing.T) {
		// A server that closes every connection without a word (and is
		// not TLS): the probe's PING goes first, the password never.
		heard := closer(t)
		conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{heard.addr}, Username: "sluice", Password: defaultPassword, MaxBackoff: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if conn.Connected() {
			t.Fatal("connected to a server that says nothing")
		}
		if got := heard.bytes(); strings.Contains(got, defaultPassword) || !strings.Contains(got, "PING") {
			t.Fatalf("the server heard %q: want a PING and never the password", got)
		}
	})
}

// heardServer is a server that reads what a client sends and closes the
// connection without answering, recording what it heard.
type heardServer struct {
	addr  string
	mu    sync.Mutex
	heard []byte
}

func (h *heardServer) bytes() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.heard)
}

func closer(t *testing.T) *heardServer {
	t.Helper()
	h := &heardServer{}
	h.addr = redistest.Impostor(t, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		b := make([]byte, 4096)
		n, _ := c.Read(b)
		h.mu.Lock()
		h.heard = append(h.heard, b[:n]...)
		h.mu.Unlock()
	})
	return h
}

// plainTalker is a server that answers anything with a Redis error line, in
// clear text.
func plainTalker(t *testing.T) string {
	t.Helper()
	return redistest.Impostor(t, func(c net.Conn) { _, _ = c.Write([]byte("-ERR unknown command\r\n")) })
}

// Printed with fmt or log/slog, the options hide their passwords.
func TestDialOptionsRedacted(t *testing.T) {
	t.Parallel()
	opts := redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}, Username: "sluice", Password: aclPassword,
		Sentinel: redisstore.Sentinel{MasterName: "m", Addrs: []string{"127.0.0.1:26379"}, Password: sentinelPassword}}
	for _, s := range []string{fmt.Sprint(opts), fmt.Sprintf("%+v", opts), fmt.Sprintf("%v", &opts), fmt.Sprintf("%#v", opts), opts.LogValue().String()} {
		noSecret(t, s)
		if !strings.Contains(s, "[redacted]") || !strings.Contains(s, "sluice") {
			t.Errorf("%q: want the user and [redacted]", s)
		}
	}
}

// Options Dial refuses without a server.
func TestDialRefusesBadSecureOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts redisstore.DialOptions
		says string
	}{
		{"a user without password", redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}, Username: "sluice"}, "Username needs a Password"},
		{"addresses and Sentinel", redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}, Sentinel: redisstore.Sentinel{MasterName: "m", Addrs: []string{"127.0.0.1:26379"}}}, "give one"},
		{"Sentinel without addresses", redisstore.DialOptions{Sentinel: redisstore.Sentinel{MasterName: "m"}}, "Sentinel.Addrs is required"},
		{"Sentinel addresses without a master", redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}, Sentinel: redisstore.Sentinel{Addrs: []string{"127.0.0.1:26379"}}}, "MasterName is required"},
		{"a database on a Cluster", redisstore.DialOptions{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, DB: 2}, "a Cluster has only database 0"},
		{"a negative database", redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}, DB: -1}, "DB -1"},
		{"a negative connect timeout", redisstore.DialOptions{Addrs: []string{"127.0.0.1:6379"}, ConnectTimeout: -time.Second}, "ConnectTimeout -1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := redisstore.Dial(c.opts)
			if err == nil {
				conn.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v; want it to say %q", err, c.says)
			}
		})
	}
}

// A Redis busy with a slow script answers BUSY to everything, SELECT
// included: that is an outage that heals, not a refusal. Dial returns a
// Conn that connects by itself once the script is killed.
func TestDialBusyIsNotARefusal(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--busy-reply-threshold", "50")
	busy := exec.Command("redis-cli", "-p", strings.TrimPrefix(srv.Addr(), "127.0.0.1:"), "EVAL", "while true do end", "0")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer busy.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := srv.CLI("PING")
		if strings.HasPrefix(out, "BUSY") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis not busy after 10 s: %q", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := redisstore.Dial(redisstore.DialOptions{Addrs: []string{srv.Addr()}, DB: 1, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("Dial while Redis is busy: %v; want an outage, not a refusal", err)
	}
	defer conn.Close()
	if conn.Connected() {
		t.Fatal("connected while Redis is busy")
	}
	if _, err := conn.EvalSHA(ctx, "0", nil, nil); !errors.Is(err, redisstore.ErrNotConnected) || !strings.Contains(err.Error(), "BUSY") {
		t.Fatalf("a call while Redis is busy: %v; want ErrNotConnected saying BUSY", err)
	}
	if out, err := srv.CLI("SCRIPT", "KILL"); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("SCRIPT KILL: %v %s", err, out)
	}
	for !conn.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("not connected 10 s after the script was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	decides(t, conn)
}

// Redis that stops taking sluice's credentials while it runs (a password
// rotated on the Redis side first, an ACL tightened): each decision is the
// failure policy's, not an error (behind Envoy's failure_mode_deny: false
// an error would switch the limits off); Redis is reported unreachable,
// with the reply, once; when the credentials are good again, decisions
// are Redis's again.
func TestCredentialsRefusedWhileRunning(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, append([]string{"--requirepass", defaultPassword}, aclUser...)...)
	conn := dialed(t, redisstore.DialOptions{Addrs: []string{srv.Addr()}, Username: "sluice", Password: aclPassword})
	var logs logtest.Buffer
	s := newStore(t, redisstore.Options{Client: conn, Policy: sluice.FailClosed, Timeout: time.Second, BreakerCooldown: 20 * time.Millisecond, Logger: logs.Logger()})
	limit := sluice.Limit{Name: "rotation", Quota: 100, Window: time.Hour}
	admin := func(args ...string) {
		t.Helper()
		if out, err := srv.CLI(append([]string{"--no-auth-warning", "-a", defaultPassword}, args...)...); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	if d, err := s.Allow(ctx, "k", limit, 1); err != nil || !d.Allowed {
		t.Fatalf("before: %+v, %v", d, err)
	}
	// The password changes on Redis's side; sluice's connections are cut.
	admin("ACL", "SETUSER", "sluice", "resetpass", ">"+wrongPassword)
	admin("CLIENT", "KILL", "USER", "sluice")
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := s.Allow(ctx, "k", limit, 1)
		if err != nil {
			t.Fatalf("credentials refused: %v; want the failure policy's decision, not an error", err)
		}
		if !d.Allowed && s.Stats().FailClosed > 0 && logs.Count(t, "redis refuses this client") > 0 {
			break // fail_closed decided, and the refusal is logged
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fail_closed decision 10 s after the password changed: %+v %+v", d, s.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := s.Stats(); !st.Unreachable {
		t.Errorf("Stats %+v: want Redis unreachable", st)
	}
	if n := logs.Count(t, "redis refuses this client"); n != 1 || !strings.Contains(logs.String(), "WRONGPASS") {
		t.Errorf("log %q: want one 'redis refuses this client' line with the WRONGPASS", logs.String())
	}
	noSecret(t, logs.String())
	// The old password is back: Redis decides again.
	admin("ACL", "SETUSER", "sluice", "resetpass", ">"+aclPassword)
	for {
		if d, err := s.Allow(ctx, "k", limit, 1); err == nil && d.Allowed {
			break
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("not back on Redis 10 s after the password was restored: %+v", s.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
