package tlsconfig_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/certtest"
	"github.com/sluicehq/sluice/internal/tlsconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every file a listener's TLS names is checked at start, and a refusal
// names the file and says what is wrong with it.
func TestServerCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	good := ca.Issue(t, certtest.Leaf{})
	other := ca.Issue(t, certtest.Leaf{})
	expired := ca.Issue(t, certtest.Leaf{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	future := ca.Issue(t, certtest.Leaf{NotBefore: time.Now().Add(time.Hour)})
	cert := writeFile(t, dir, "tls.crt", good.CertPEM)
	key := writeFile(t, dir, "tls.key", good.KeyPEM)
	caFile := writeFile(t, dir, "ca.crt", ca.PEM)
	otherKey := writeFile(t, dir, "other.key", other.KeyPEM)
	expiredCert := writeFile(t, dir, "expired.crt", expired.CertPEM)
	expiredKey := writeFile(t, dir, "expired.key", expired.KeyPEM)
	futureCert := writeFile(t, dir, "future.crt", future.CertPEM)
	futureKey := writeFile(t, dir, "future.key", future.KeyPEM)
	empty := writeFile(t, dir, "empty.pem", nil)
	clientOnly := ca.Issue(t, certtest.Leaf{Client: true})
	clientOnlyCert, clientOnlyKey := writeFile(t, dir, "client-only.crt", clientOnly.CertPEM), writeFile(t, dir, "client-only.key", clientOnly.KeyPEM)
	weak := ca.Issue(t, certtest.Leaf{RSABits: 1024})
	weakCert, weakKey := writeFile(t, dir, "weak.crt", weak.CertPEM), writeFile(t, dir, "weak.key", weak.KeyPEM)
	strong := ca.Issue(t, certtest.Leaf{RSABits: 2048})
	strongCert, strongKey := writeFile(t, dir, "strong.crt", strong.CertPEM), writeFile(t, dir, "strong.key", strong.KeyPEM)
	garbage := writeFile(t, dir, "garbage.pem", []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"))
	encrypted := writeFile(t, dir, "encrypted.key", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("x")}))
	expiredCA := writeFile(t, dir, "expired-ca.crt", certtest.NewCAUntil(t, "expired CA", time.Now().Add(-time.Hour)).PEM)
	missing := filepath.Join(dir, "missing.crt")
	fifo := filepath.Join(dir, "fifo.crt")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := (tlsconfig.Server{CertFile: strongCert, KeyFile: strongKey}).Check(time.Now()); err != nil {
		t.Errorf("an RSA key of 2048 bits: %v", err)
	}
	if sum, err := (tlsconfig.Server{CertFile: cert, KeyFile: key, ClientCAFile: caFile}).Check(time.Now()); err != nil {
		t.Fatalf("a good pair and CA: %v", err)
	} else if sum.CertFile != cert || sum.Subject != "CN=localhost" || sum.CAs != 1 || len(sum.Warnings) != 0 || !strings.Contains(strings.Join(sum.Names, ","), "127.0.0.1") {
		t.Errorf("summary %+v", sum)
	}
	for _, c := range []struct {
		name  string
		s     tlsconfig.Server
		field string
		says  string
	}{
		{"no key", tlsconfig.Server{CertFile: cert}, "key_file", "key_file: TLS needs the certificate's key"},
		{"no certificate", tlsconfig.Server{KeyFile: key}, "cert_file", "cert_file: TLS needs a certificate"},
		{"a client CA alone", tlsconfig.Server{ClientCAFile: caFile}, "cert_file", "TLS needs a certificate"},
		{"TLS 1.1", tlsconfig.Server{CertFile: cert, KeyFile: key, MinVersion: "1.1"}, "min_version", `min_version: "1.1": 1.2 or 1.3`},
		{"missing certificate", tlsconfig.Server{CertFile: missing, KeyFile: key}, "cert_file", "certificate file " + missing + ": no such file"},
		{"a directory", tlsconfig.Server{CertFile: dir, KeyFile: key}, "cert_file", "certificate file " + dir + ": a directory, not a file"},
		{"a named pipe (opening it would block)", tlsconfig.Server{CertFile: fifo, KeyFile: key}, "cert_file", "certificate file " + fifo + ": not a regular file"},
		{"empty certificate", tlsconfig.Server{CertFile: empty, KeyFile: key}, "cert_file", "certificate file " + empty + ": no certificate in it (a PEM CERTIFICATE block; found no PEM data)"},
		{"swapped", tlsconfig.Server{CertFile: key, KeyFile: cert}, "cert_file", "certificate file " + key + ": no certificate in it, but a private key: are the certificate and key files swapped?"},
		{"a certificate as key", tlsconfig.Server{CertFile: cert, KeyFile: cert}, "key_file", "key file " + cert + ": no private key in it, but a certificate"},
		{"mismatch", tlsconfig.Server{CertFile: cert, KeyFile: otherKey}, "key_file", "key file " + otherKey + ": not the key of the certificate in " + cert},
		{"garbage", tlsconfig.Server{CertFile: garbage, KeyFile: key}, "cert_file", "certificate file " + garbage + ": the certificate does not parse"},
		{"encrypted key", tlsconfig.Server{CertFile: cert, KeyFile: encrypted}, "key_file", "key file " + encrypted + ": an encrypted private key"},
		{"expired", tlsconfig.Server{CertFile: expiredCert, KeyFile: expiredKey}, "cert_file", "certificate file " + expiredCert + ": the certificate (CN=localhost) expired on "},
		{"not yet valid", tlsconfig.Server{CertFile: futureCert, KeyFile: futureKey}, "cert_file", "is not valid before "},
		{"a client's certificate", tlsconfig.Server{CertFile: clientOnlyCert, KeyFile: clientOnlyKey}, "cert_file", "certificate file " + clientOnlyCert + ": the certificate (CN=localhost) is not for a server (TLS Web Server Authentication): its extended key usage does not allow it"},
		{"an RSA key of 1024 bits", tlsconfig.Server{CertFile: weakCert, KeyFile: weakKey}, "cert_file", "has an RSA key of 1024 bits: Go's TLS and most peers refuse keys under 2048 bits"},
		{"a key as CA", tlsconfig.Server{CertFile: cert, KeyFile: key, ClientCAFile: key}, "client_ca_file", "client CA file " + key + ": holds a private key"},
		{"an empty CA", tlsconfig.Server{CertFile: cert, KeyFile: key, ClientCAFile: empty}, "client_ca_file", "client CA file " + empty + ": no certificate in it"},
		{"an expired CA", tlsconfig.Server{CertFile: cert, KeyFile: key, ClientCAFile: expiredCA}, "client_ca_file", "client CA file " + expiredCA + ": the certificate (CN=expired CA,O=sluice tests) expired on"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.s.Check(time.Now())
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.says) || tlsconfig.FieldOf(err) != c.field {
				t.Fatalf("%v (field %q)\nwant it to say %q, field %q", err, tlsconfig.FieldOf(err), c.says, c.field)
			}
		})
	}
	// A bundle in rotation: an expired CA beside a valid one is a warning.
	bundle := writeFile(t, dir, "bundle.crt", append(certtest.NewCAUntil(t, "expired CA", time.Now().Add(-time.Hour)).PEM, ca.PEM...))
	sum, err := (tlsconfig.Server{CertFile: cert, KeyFile: key, ClientCAFile: bundle}).Check(time.Now())
	if err != nil || sum.CAs != 2 || len(sum.Warnings) != 1 || !strings.Contains(sum.Warnings[0], "expired on") {
		t.Errorf("a bundle with an expired and a valid CA: %+v, %v; want both read and a warning", sum, err)
	}
	// Expiry within 14 days, and no SAN, are warnings.
	soon := ca.Issue(t, certtest.Leaf{NotAfter: time.Now().Add(72 * time.Hour)})
	noSAN := ca.Issue(t, certtest.Leaf{NoSAN: true})
	sum, err = (tlsconfig.Server{CertFile: writeFile(t, dir, "soon.crt", soon.CertPEM), KeyFile: writeFile(t, dir, "soon.key", soon.KeyPEM)}).Check(time.Now())
	if err != nil || len(sum.Warnings) != 1 || !strings.Contains(sum.Warnings[0], "expires in 7") {
		t.Errorf("a certificate expiring in 3 days: %+v, %v; want a warning", sum, err)
	}
	sum, err = (tlsconfig.Server{CertFile: writeFile(t, dir, "nosan.crt", noSAN.CertPEM), KeyFile: writeFile(t, dir, "nosan.key", noSAN.KeyPEM)}).Check(time.Now())
	if err != nil || len(sum.Warnings) != 1 || !strings.Contains(sum.Warnings[0], "no subject alternative name") {
		t.Errorf("a certificate without SAN: %+v, %v; want a warning", sum, err)
	}
}

// The client side: a CA bundle as roots, a client certificate with its
// key, a server name; each refused as the server's files are.
func TestClientConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "redis CA")
	client := ca.Issue(t, certtest.Leaf{Client: true, CommonName: "sluice"})
	caFile := writeFile(t, dir, "ca.crt", ca.PEM)
	cert := writeFile(t, dir, "client.crt", client.CertPEM)
	key := writeFile(t, dir, "client.key", client.KeyPEM)
	cfg, err := (tlsconfig.Client{CAFile: caFile, CertFile: cert, KeyFile: key, ServerName: "redis.internal"}).Config(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootCAs == nil || cfg.GetClientCertificate == nil || cfg.ServerName != "redis.internal" || cfg.MinVersion != tls.VersionTLS12 || cfg.InsecureSkipVerify {
		t.Errorf("config %+v", cfg)
	}
	sys, err := (tlsconfig.Client{MinVersion: "1.3"}).Config(time.Now())
	if err != nil || sys.RootCAs != nil || sys.MinVersion != tls.VersionTLS13 {
		t.Fatalf("the zero Client: %+v, %v; want the system's roots", sys, err)
	}
	for _, c := range []struct {
		name  string
		c     tlsconfig.Client
		field string
		says  string
	}{
		{"a certificate without its key", tlsconfig.Client{CertFile: cert}, "key_file", "needs its key"},
		{"a key without its certificate", tlsconfig.Client{KeyFile: key}, "cert_file", "needs its certificate"},
		{"a URL as server name", tlsconfig.Client{ServerName: "rediss://redis:6380"}, "server_name", "a host name or an IP address"},
		{"a missing CA", tlsconfig.Client{CAFile: filepath.Join(dir, "nope")}, "ca_file", "CA file " + filepath.Join(dir, "nope") + ": no such file"},
		{"a certificate as CA bundle", tlsconfig.Client{CAFile: key}, "ca_file", "holds a private key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.c.Config(time.Now())
			var e *tlsconfig.Error
			if !errors.As(err, &e) || e.Field != c.field || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v; want field %s saying %q", err, c.field, c.says)
			}
		})
	}
}

// tlsServer accepts TLS connections with cfg and echoes what it reads.
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { ln.Close() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	return ln.Addr().String()
}

// dial connects with roots (and a client certificate if any) and returns
// the connection and the serial of the certificate the server showed.
func dial(t *testing.T, addr string, roots *x509.CertPool, client *certtest.Pair) (*tls.Conn, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	if client != nil {
		pair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	// TLS 1.3: a refused client certificate is only seen on the first read.
	if err := echo(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func echo(c *tls.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != "ping" {
		return errors.New("echo: " + string(b))
	}
	return nil
}

func serial(c *tls.Conn) string { return c.ConnectionState().PeerCertificates[0].SerialNumber.String() }

// A rotation: new connections get the new certificate, the connection
// open before keeps working; files that are refused (a key that does not
// match, half-way through) leave the certificate in force.
func TestReloaderRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	first, second := ca.Issue(t, certtest.Leaf{}), ca.Issue(t, certtest.Leaf{})
	files := ca.Write(t, dir, first)
	var logs bytes.Buffer
	r, err := tlsconfig.NewReloader(tlsconfig.Server{CertFile: files.Cert, KeyFile: files.Key}, tlsconfig.ReloaderOptions{Name: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	addr := tlsServer(t, r.Config(false))
	old, err := dial(t, addr, roots, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got := serial(old); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serial %s, want the first certificate's", got)
	}

	// Half a rotation: the new certificate, the old key.
	certtest.WriteFile(t, files.Cert, second.CertPEM)
	if err := r.Reload(); err == nil || tlsconfig.FieldOf(err) != "key_file" {
		t.Fatalf("Reload with a certificate and a key of two pairs: %v; want the key refused", err)
	}
	if c, err := dial(t, addr, roots, nil); err != nil || serial(c) != first.Cert.SerialNumber.String() {
		t.Fatalf("after a refused reload: %v; want the first certificate still", err)
	} else {
		c.Close()
	}
	// The other half.
	certtest.WriteFile(t, files.Key, second.KeyPEM)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	c, err := dial(t, addr, roots, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := serial(c); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after the rotation, serial %s; want the second certificate's", got)
	}
	if err := echo(old); err != nil {
		t.Fatalf("the connection opened before the rotation: %v", err)
	}
	if st := r.Stats(); st.Reloads != 1 || st.Refused != 1 || st.Summary.NotAfter != second.Cert.NotAfter.UTC() {
		t.Errorf("Stats %+v; want 1 reload, 1 refused, the second certificate", st)
	}
	for _, want := range []string{"TLS files refused; the certificate in force stays", "TLS certificate loaded"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q: want %q", logs.String(), want)
		}
	}
}

// Watching: a rotation by cert-manager (files replaced) is picked up by
// itself.
func TestReloaderWatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	first, second := ca.Issue(t, certtest.Leaf{}), ca.Issue(t, certtest.Leaf{})
	files := ca.Write(t, dir, first)
	r, err := tlsconfig.NewReloader(tlsconfig.Server{CertFile: files.Cert, KeyFile: files.Key}, tlsconfig.ReloaderOptions{Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	addr := tlsServer(t, r.Config(false))
	ca.Write(t, dir, second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dial(t, addr, roots, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := serial(c)
		c.Close()
		if got == second.Cert.SerialNumber.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate not served 10 s after its files changed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mTLS: no certificate, or one another CA signed, is refused in the
// handshake; a listener of the same Reloader without client auth takes
// any client; a rotated client CA is in force after a reload.
func TestReloaderClientAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, clientCA, otherCA := certtest.NewCA(t, "server CA"), certtest.NewCA(t, "client CA"), certtest.NewCA(t, "other CA")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	files := ca.Write(t, dir, ca.Issue(t, certtest.Leaf{}))
	certtest.WriteFile(t, files.CA, clientCA.PEM)
	good := clientCA.Issue(t, certtest.Leaf{Client: true, CommonName: "envoy"})
	stranger := otherCA.Issue(t, certtest.Leaf{Client: true, CommonName: "envoy"})
	r, err := tlsconfig.NewReloader(tlsconfig.Server{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.CA}, tlsconfig.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mtls := tlsServer(t, r.Config(true))
	open := tlsServer(t, r.Config(false))
	for _, c := range []struct {
		name   string
		addr   string
		client *certtest.Pair
		ok     bool
	}{
		{"mTLS, the client CA's certificate", mtls, &good, true},
		{"mTLS, no certificate", mtls, nil, false},
		{"mTLS, another CA's certificate", mtls, &stranger, false},
		{"no client auth, no certificate", open, nil, true},
	} {
		conn, err := dial(t, c.addr, roots, c.client)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v; want ok %v", c.name, err, c.ok)
		}
		if conn != nil {
			conn.Close()
		}
	}
	certtest.WriteFile(t, files.CA, otherCA.PEM)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if c, err := dial(t, mtls, roots, &stranger); err != nil {
		t.Errorf("after the client CA's rotation, its certificate: %v", err)
	} else {
		c.Close()
	}
	if c, err := dial(t, mtls, roots, &good); err == nil {
		c.Close()
		t.Error("after the client CA's rotation, the old CA's certificate is still accepted")
	}
}

// A TLS listener refuses TLS 1.1, and TLS 1.2 when 1.3 is required.
func TestMinVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	files := ca.Write(t, dir, ca.Issue(t, certtest.Leaf{}))
	for _, c := range []struct {
		min         string
		offer       uint16
		ok          bool
		description string
	}{
		{"", tls.VersionTLS11, false, "default minimum, a TLS 1.1 client"},
		{"", tls.VersionTLS12, true, "default minimum, a TLS 1.2 client"},
		{"1.3", tls.VersionTLS12, false, "1.3 required, a TLS 1.2 client"},
		{"1.3", tls.VersionTLS13, true, "1.3 required, a TLS 1.3 client"},
	} {
		r, err := tlsconfig.NewReloader(tlsconfig.Server{CertFile: files.Cert, KeyFile: files.Key, MinVersion: c.min}, tlsconfig.ReloaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		addr := tlsServer(t, r.Config(false))
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: c.offer, MaxVersion: c.offer})
		if err == nil {
			err = echo(conn)
			conn.Close()
		}
		if (err == nil) != c.ok {
			t.Errorf("%s: %v; want ok %v", c.description, err, c.ok)
		}
		r.Close()
	}
}

// A failed handshake's log line holds no address, whichever way it
// comes: net/http's text (its "from ADDR" and a net.OpError's "read tcp
// A->B" inside), gRPC's net.OpError, an IPv6 peer; other net/http lines
// lose the client's address too.
func TestHandshakeLogHoldsNoAddress(t *testing.T) {
	t.Parallel()
	opErr := &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(198, 51, 100, 9), Port: 8081},
		Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5555}, Err: errors.New("connection reset by peer")}
	for _, c := range []struct {
		name, want string
		fail       func(*tlsconfig.Handshakes, *log.Logger)
	}{
		{"net/http, a client certificate missing", `reason="tls: client didn't provide a certificate"`, func(_ *tlsconfig.Handshakes, l *log.Logger) {
			l.Printf("http: TLS handshake error from 203.0.113.7:51234: tls: client didn't provide a certificate")
		}},
		{"net/http, a client that sent nothing", `reason="i/o timeout"`, func(_ *tlsconfig.Handshakes, l *log.Logger) {
			l.Printf("http: TLS handshake error from 203.0.113.7:51040: read tcp 198.51.100.9:8443->203.0.113.7:51040: i/o timeout")
		}},
		{"net/http, IPv6", `reason=EOF`, func(_ *tlsconfig.Handshakes, l *log.Logger) {
			l.Printf("http: TLS handshake error from [2001:db8::7]:51040: EOF")
		}},
		{"net/http, an address in the reason", `reason="dial <address>: refused"`, func(_ *tlsconfig.Handshakes, l *log.Logger) {
			l.Printf("http: TLS handshake error from 203.0.113.7:1: dial 203.0.113.7:9: refused")
		}},
		{"gRPC's net.OpError", `reason="connection reset by peer"`, func(h *tlsconfig.Handshakes, _ *log.Logger) { h.Failed(opErr) }},
		{"a panic in a handler", `msg="http: panic serving a client: runtime error"`, func(_ *tlsconfig.Handshakes, l *log.Logger) {
			l.Printf("http: panic serving 203.0.113.7:51234: runtime error")
		}},
	} {
		var buf bytes.Buffer
		failed := 0
		logger := slog.New(slog.NewTextHandler(&buf, nil))
		h := tlsconfig.NewHandshakes(logger, "http", func() { failed++ })
		c.fail(h, tlsconfig.HTTPErrorLog(logger, "http", h))
		out := buf.String()
		if !strings.Contains(out, c.want) || strings.Contains(out, "203.0.113.7") || strings.Contains(out, "198.51.100.9") || strings.Contains(out, "2001:db8") {
			t.Errorf("%s: %s; want %s and no address", c.name, out, c.want)
		}
	}
}

// Failed handshakes are each counted, and logged once a minute at most,
// saying how many were not logged since.
func TestHandshakeLogOnceAMinute(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	failed := 0
	h := tlsconfig.NewHandshakes(slog.New(slog.NewTextHandler(&buf, nil)), "grpc", func() { failed++ })
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	h.Now = func() time.Time { return now }
	for range 3 {
		h.Failed(errors.New("tls: client didn't provide a certificate"))
	}
	now = now.Add(59 * time.Second)
	h.Failed(errors.New("tls: bad certificate"))
	now = now.Add(time.Second)
	h.Failed(errors.New("tls: bad certificate"))
	out := buf.String()
	if failed != 5 || strings.Count(out, "TLS handshake refused") != 2 || !strings.Contains(out, "more_since_last_line=3") {
		t.Errorf("counted %d; log:\n%s\nwant 5 counted, 2 lines, the second saying 3 more", failed, out)
	}
}

// A client certificate follows its files: the next connection after a
// rotation presents the new one; files refused half-way keep the old.
func TestClientCertificateRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	files := ca.Write(t, dir, ca.Issue(t, certtest.Leaf{}))
	first, second := ca.Issue(t, certtest.Leaf{Client: true}), ca.Issue(t, certtest.Leaf{Client: true})
	cert, key := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	certtest.WriteFile(t, cert, first.CertPEM)
	certtest.WriteFile(t, key, first.KeyPEM)
	r, err := tlsconfig.NewReloader(tlsconfig.Server{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.CA}, tlsconfig.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	seen := make(chan string, 10)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.Config(true))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close() // before the Wait: Accept returns
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				seen <- tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
			}
			c.Close()
		}
	})
	cfg, err := (tlsconfig.Client{CAFile: files.CA, CertFile: cert, KeyFile: key, ServerName: "localhost"}).Config(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	presented := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return <-seen
	}
	if got := presented(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("presented %s, want the first certificate", got)
	}
	certtest.WriteFile(t, cert, second.CertPEM) // half a rotation: the key is still the first's
	if got := presented(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("half-way through a rotation, presented %s; want the first certificate still", got)
	}
	certtest.WriteFile(t, key, second.KeyPEM)
	if got := presented(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("after the rotation, presented %s; want the second certificate", got)
	}
}
