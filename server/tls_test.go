package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/certtest"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/tlsconfig"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/server"
)

// pki is a server CA with the listeners' certificate files, and a client
// CA whose certificates mTLS accepts.
type pki struct {
	ca, clientCA, stranger *certtest.CA
	files                  certtest.Files
	client, strangerClient tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{ca: certtest.NewCA(t, "server CA"), clientCA: certtest.NewCA(t, "client CA"), stranger: certtest.NewCA(t, "another CA")}
	p.files = p.ca.Write(t, t.TempDir(), p.ca.Issue(t, certtest.Leaf{}))
	certtest.WriteFile(t, p.files.CA, p.clientCA.PEM) // ca.crt: the client CA, as mTLS reads it
	p.client = keyPair(t, p.clientCA.Issue(t, certtest.Leaf{Client: true, CommonName: "envoy"}))
	p.strangerClient = keyPair(t, p.stranger.Issue(t, certtest.Leaf{Client: true, CommonName: "envoy"}))
	return p
}

func keyPair(t *testing.T, p certtest.Pair) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientTLS is a client's TLS: the server CA as roots, and certificates.
func (p *pki) clientTLS(certs ...tls.Certificate) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.Cert)
	return &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: certs}
}

// counting is a real store that counts its decisions, and can hold them
// until released.
type counting struct {
	*memstore.Store
	calls   atomic.Int64
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newCounting(t *testing.T) *counting {
	t.Helper()
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	return &counting{Store: ms, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (c *counting) Allow(ctx context.Context, key string, l sluice.Limit, cost float64) (sluice.Decision, error) {
	c.calls.Add(1)
	if c.hold.Load() {
		c.entered <- struct{}{}
		<-c.release
	}
	return c.Store.Allow(ctx, key, l, cost)
}

// startTLS runs a server with opts (see serve), over the PKI's
// certificate unless opts names TLS files of its own.
func startTLS(t *testing.T, p *pki, opts server.Options) *server.Server {
	t.Helper()
	if opts.TLS.CertFile == "" {
		opts.TLS = tlsconfig.Server{CertFile: p.files.Cert, KeyFile: p.files.Key}
	}
	return serve(t, opts)
}

// rlsClient is a real grpc-go client of the server's RLS over creds.
func rlsClient(t *testing.T, addr string, creds credentials.TransportCredentials) rlpb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlpb.NewRateLimitServiceClient(conn)
}

func shouldRateLimit(client rlpb.RateLimitServiceClient, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, request("k"), opts...)
	if err == nil && resp.OverallCode != rlpb.RateLimitResponse_OK {
		err = fmt.Errorf("answered %v", resp.OverallCode)
	}
	return err
}

// RLS over TLS, then mTLS, with a real grpc-go client: the right CA (and
// under mTLS a client certificate the client CA signed) decides; a client
// in clear text, one that does not trust the server, one without a
// certificate or with another CA's is refused in the handshake, before
// any decision; failed handshakes are counted.
func TestGRPCOverTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	store := newCounting(t)
	plain := startTLS(t, p, server.Options{Limiter: store})
	if err := shouldRateLimit(rlsClient(t, plain.GRPCAddr(), credentials.NewTLS(p.clientTLS()))); err != nil {
		t.Fatalf("TLS, the right CA: %v", err)
	}
	var logs logtest.Buffer
	mtls := startTLS(t, p, server.Options{Limiter: store, Logger: logs.Logger(), TLS: tlsconfig.Server{CertFile: p.files.Cert, KeyFile: p.files.Key, ClientCAFile: p.files.CA}})
	if err := shouldRateLimit(rlsClient(t, mtls.GRPCAddr(), credentials.NewTLS(p.clientTLS(p.client)))); err != nil {
		t.Fatalf("mTLS, a client certificate of the client CA: %v", err)
	}
	before := store.calls.Load()
	wrongRoots := p.clientTLS()
	wrongRoots.RootCAs = x509.NewCertPool()
	wrongRoots.RootCAs.AddCert(p.stranger.Cert)
	for _, c := range []struct {
		name  string
		addr  string
		creds credentials.TransportCredentials
	}{
		{"TLS, clear text", plain.GRPCAddr(), insecure.NewCredentials()},
		{"TLS, a client that does not trust the server", plain.GRPCAddr(), credentials.NewTLS(wrongRoots)},
		{"mTLS, no client certificate", mtls.GRPCAddr(), credentials.NewTLS(p.clientTLS())},
		{"mTLS, another CA's certificate", mtls.GRPCAddr(), credentials.NewTLS(p.clientTLS(p.strangerClient))},
		{"mTLS, clear text", mtls.GRPCAddr(), insecure.NewCredentials()},
	} {
		err := shouldRateLimit(rlsClient(t, c.addr, c.creds))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v; want UNAVAILABLE (refused in the handshake)", c.name, err)
		}
	}
	if n := store.calls.Load(); n != before {
		t.Errorf("%d decisions for refused clients", n-before)
	}
	_, body := httpsGet(t, mtls.HTTPAddr(), "/metrics", p.clientTLS(p.client))
	if !strings.Contains(body, `sluice_tls_handshake_failures_total{listener="grpc"}`) || strings.Contains(body, `sluice_tls_handshake_failures_total{listener="grpc"} 0`) {
		t.Errorf("/metrics does not count the failed handshakes of the gRPC listener:\n%s", grepLines(body, "sluice_tls"))
	}
	if !strings.Contains(body, `sluice_tls_certificate_expiry_timestamp_seconds{certificate="serve"}`) {
		t.Errorf("/metrics lacks the certificate's expiry:\n%s", grepLines(body, "sluice_tls"))
	}
	refusals := grepLines(logs.String(), "TLS handshake refused")
	if n := strings.Count(refusals, "\n") + 1; refusals == "" || n != 1 || !strings.Contains(refusals, `"listener":"grpc"`) || strings.Contains(refusals, "127.0.0.1") {
		t.Errorf("the log of the refused handshakes (want one line, for the gRPC listener, without an address):\n%s", logs.String())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// httpsGet GETs path over TLS with cfg, with the admin token.
func httpsGet(t *testing.T, addr, path string, cfg *tls.Config) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET https://%s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The HTTP and admin listeners over TLS: /json and the admin API answer
// over TLS, never in clear text; with --tls-client-auth grpc, they take
// clients without a certificate (a Kubernetes probe) while gRPC requires
// one. /admin/config describes the certificate and the listeners.
func TestHTTPListenersOverTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	s := startTLS(t, p, server.Options{AdminToken: token, ClientAuth: []string{server.ListenerGRPC}, NoJSON: true,
		TLS: tlsconfig.Server{CertFile: p.files.Cert, KeyFile: p.files.Key, ClientCAFile: p.files.CA}})
	if code, _ := httpsGet(t, s.HTTPAddr(), "/healthz", p.clientTLS()); code != 200 {
		t.Errorf("/healthz over TLS, no client certificate (http is not in --tls-client-auth): %d", code)
	}
	// NoJSON: a client without a certificate cannot spend what Envoy's
	// calls spend through the listener probes reach.
	if code, body := httpsGet(t, s.HTTPAddr(), "/json", p.clientTLS()); code != http.StatusNotFound {
		t.Errorf("/json with NoJSON: %d %s; want 404", code, body)
	}
	if err := shouldRateLimit(rlsClient(t, s.GRPCAddr(), credentials.NewTLS(p.clientTLS()))); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC without a client certificate: %v; want refused", err)
	}
	for _, addr := range []string{s.HTTPAddr(), s.AdminAddr()} {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("clear text to %s: %d; want nothing served (400 from a TLS listener)", addr, resp.StatusCode)
			}
		}
	}
	code, body := httpsGet(t, s.AdminAddr(), "/admin/config", p.clientTLS())
	var d struct {
		Version   string `json:"version"`
		Listeners map[string]struct {
			TLS                bool   `json:"tls"`
			ClientCertificates string `json:"client_certificates"`
			JSON               *bool  `json:"json"`
		} `json:"listeners"`
		TLS struct {
			Certificate tlsconfig.Summary `json:"certificate"`
		} `json:"tls"`
		Store struct{ Kind string } `json:"store"`
	}
	if err := json.Unmarshal([]byte(body), &d); code != 200 || err != nil {
		t.Fatalf("/admin/config: %d %s %v", code, body, err)
	}
	if d.Version == "" || d.Listeners["grpc"].ClientCertificates != "required" || d.Listeners["http"].JSON == nil || *d.Listeners["http"].JSON || d.Listeners["http"].ClientCertificates != "not asked" ||
		!d.Listeners["admin"].TLS || d.TLS.Certificate.CertFile != p.files.Cert || d.TLS.Certificate.CAFile != p.files.CA || d.Store.Kind != "memory" {
		t.Errorf("/admin/config: %s", body)
	}
}

// A rotation of the certificate files (cert-manager writing a new pair)
// is picked up without a restart and without dropping a call in flight:
// the call on the connection opened before finishes; a new connection
// gets the new certificate.
func TestCertificateRotation(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	store := newCounting(t)
	first := p.ca.Issue(t, certtest.Leaf{})
	p.ca.Write(t, p.files.Dir, first)
	certtest.WriteFile(t, p.files.CA, p.clientCA.PEM)
	s := startTLS(t, p, server.Options{Limiter: store, TLS: tlsconfig.Server{CertFile: p.files.Cert, KeyFile: p.files.Key, ClientCAFile: p.files.CA}})
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(p.client))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlpb.NewRateLimitServiceClient(conn)
	var before grpcpeer.Peer
	if err := shouldRateLimit(client, grpc.Peer(&before)); err != nil {
		t.Fatal(err)
	}
	if serialOf(before) != first.Cert.SerialNumber.String() {
		t.Fatal("the first call did not see the first certificate")
	}
	// A call in flight on that connection, held in the store.
	store.hold.Store(true)
	inFlight := make(chan error, 1)
	go func() { inFlight <- shouldRateLimit(client) }()
	<-store.entered
	store.hold.Store(false)

	second := p.ca.Issue(t, certtest.Leaf{})
	p.ca.Write(t, p.files.Dir, second)
	certtest.WriteFile(t, p.files.CA, p.clientCA.PEM)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pr grpcpeer.Peer
		fresh := rlsClient(t, s.GRPCAddr(), credentials.NewTLS(p.clientTLS(p.client)))
		if err := shouldRateLimit(fresh, grpc.Peer(&pr)); err != nil {
			t.Fatalf("a new connection during the rotation: %v", err)
		}
		if serialOf(pr) == second.Cert.SerialNumber.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new connections still get the first certificate 10 s after the rotation")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(store.release)
	if err := <-inFlight; err != nil {
		t.Fatalf("the call in flight across the rotation: %v", err)
	}
	if err := shouldRateLimit(client); err != nil {
		t.Fatalf("the connection opened before the rotation, afterwards: %v", err)
	}
}

func serialOf(p grpcpeer.Peer) string {
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	return info.State.PeerCertificates[0].SerialNumber.String()
}

// A listener's TLS files that are refused at start: New says which file
// and why, and nothing serves in clear text instead.
func TestTLSRefusedAtStart(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	dir := t.TempDir()
	expired := p.ca.Issue(t, certtest.Leaf{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	other := p.ca.Issue(t, certtest.Leaf{})
	expiredFiles := p.ca.Write(t, filepath.Join(dir), expired)
	otherKey := filepath.Join(t.TempDir(), "other.key")
	certtest.WriteFile(t, otherKey, other.KeyPEM)
	cfgDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "edge.yaml"), []byte(config(1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tls  tlsconfig.Server
		says string
	}{
		{"expired", tlsconfig.Server{CertFile: expiredFiles.Cert, KeyFile: expiredFiles.Key}, "certificate file " + expiredFiles.Cert + ": the certificate (CN=localhost) expired on"},
		{"a key of another pair", tlsconfig.Server{CertFile: p.files.Cert, KeyFile: otherKey}, "key file " + otherKey + ": not the key of the certificate in " + p.files.Cert},
		{"a missing CA", tlsconfig.Server{CertFile: p.files.Cert, KeyFile: p.files.Key, ClientCAFile: filepath.Join(dir, "nope")}, "client CA file " + filepath.Join(dir, "nope") + ": no such file"},
		{"a key alone", tlsconfig.Server{KeyFile: p.files.Key}, "cert_file: TLS needs a certificate"},
	} {
		opts := server.Options{Load: server.EnvoyLoader(cfgDir), TLS: c.tls, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"}
		_, checkErr := server.Check(opts)
		s, err := server.New(opts)
		if err == nil {
			s.Close()
			t.Errorf("%s: New started", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.says) || checkErr == nil || checkErr.Error() != err.Error() {
			t.Errorf("%s:\nNew: %v\nCheck: %v\nwant both to say %q", c.name, err, checkErr, c.says)
		}
		var te *tlsconfig.Error
		if !errors.As(err, &te) {
			t.Errorf("%s: %v is not a *tlsconfig.Error", c.name, err)
		}
	}
}
