package gateway_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/internal/certtest"
)

// tlsClient gets url over TLS, trusting ca, with certs.
func tlsClient(ca *certtest.CA, certs ...certtest.Pair) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	for _, p := range certs {
		pair, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			panic(err)
		}
		cfg.Certificates = append(cfg.Certificates, pair)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
}

func tlsGet(c *http.Client, url string, header ...string) (*http.Response, string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	r, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r, string(b), nil
}

// The gateway's listener over mTLS and its admin over TLS: a client with
// a certificate the client CA signed is proxied and limited as before;
// one without, or in clear text, is refused before any rule counts it;
// the admin answers over TLS and describes both listeners' certificates;
// a rotation of the listener's files is served to new connections.
func TestGatewayTLS(t *testing.T) {
	t.Parallel()
	ca, clientCA := certtest.NewCA(t, "gateway CA"), certtest.NewCA(t, "client CA")
	dir := t.TempDir()
	files := ca.Write(t, dir, ca.Issue(t, certtest.Leaf{}))
	certtest.WriteFile(t, files.CA, clientCA.PEM)
	adminFiles := ca.Write(t, t.TempDir(), ca.Issue(t, certtest.Leaf{}))
	client := clientCA.Issue(t, certtest.Leaf{Client: true, CommonName: "app"})
	up := newUpstream(t, nil)
	token := tokenFile(t)
	g, _ := start(t, fmt.Sprintf(`
listen: 127.0.0.1:0
tls: {cert_file: %s, key_file: %s, client_ca_file: %s}
admin:
  listen: 127.0.0.1:0
  token_file: %s
  tls: {cert_file: %s, key_file: %s, min_version: "1.3"}
limits:
  - {name: per-ip, quota: 2, window: 1m}
rules:
  - name: all
    quotas: [{limit: per-ip, key: ip}]
`, files.Cert, files.Key, files.CA, token, adminFiles.Cert, adminFiles.Key), up.URL)
	mtls := tlsClient(ca, client)
	defer mtls.CloseIdleConnections()
	for i, want := range []int{200, 200, 429} {
		r, body, err := tlsGet(mtls, "https://"+g.Addr()+"/api")
		if err != nil || r.StatusCode != want {
			t.Fatalf("request %d with a client certificate: %v %v %s; want %d", i, r, err, body, want)
		}
	}
	hits := up.hits.Load()
	noCert := tlsClient(ca)
	defer noCert.CloseIdleConnections()
	if _, _, err := tlsGet(noCert, "https://"+g.Addr()+"/api"); err == nil {
		t.Error("no client certificate: served")
	}
	if r, err := http.Get("http://" + g.Addr() + "/api"); err == nil {
		r.Body.Close()
		if r.StatusCode != http.StatusBadRequest {
			t.Errorf("clear text to the TLS listener: %d", r.StatusCode)
		}
	}
	if up.hits.Load() != hits {
		t.Error("a refused client reached the upstream")
	}

	admin := tlsClient(ca)
	defer admin.CloseIdleConnections()
	r, body, err := tlsGet(admin, "https://"+g.AdminAddr()+"/admin/config", "Authorization", "Bearer an-admin-token-of-some-length")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("/admin/config over TLS: %v %v %s", r, err, body)
	}
	var d struct {
		Listeners map[string]struct {
			TLS *struct {
				Certificate struct {
					CertFile string `json:"cert_file"`
					CAFile   string `json:"ca_file"`
				} `json:"certificate"`
			} `json:"tls"`
			ClientCertificates string `json:"client_certificates"`
		} `json:"listeners"`
		Admin struct{ Token string } `json:"admin"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	pub, adm := d.Listeners["public"], d.Listeners["admin"]
	if pub.TLS == nil || pub.TLS.Certificate.CertFile != files.Cert || pub.TLS.Certificate.CAFile != files.CA || pub.ClientCertificates != "required" ||
		adm.TLS == nil || adm.ClientCertificates != "not asked" || d.Admin.Token != "file "+token {
		t.Errorf("/admin/config: %s", body)
	}
	old := &tls.Config{RootCAs: admin.Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "localhost", MaxVersion: tls.VersionTLS12}
	if c, err := tls.Dial("tcp", g.AdminAddr(), old); err == nil {
		c.Close()
		t.Error("the admin listener took TLS 1.2 under min_version 1.3")
	}

	// Rotation of the public listener's files.
	next := ca.Issue(t, certtest.Leaf{})
	ca.Write(t, dir, next)
	certtest.WriteFile(t, files.CA, clientCA.PEM)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := tlsClient(ca, client)
		r, _, err := tlsGet(c, "https://"+g.Addr()+"/other")
		c.CloseIdleConnections()
		if err != nil {
			t.Fatalf("during the rotation: %v", err)
		}
		if r.TLS.PeerCertificates[0].SerialNumber.Cmp(next.Cert.SerialNumber) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate not served 10 s after its files changed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A listener's TLS files that are wrong: Check and New refuse them, with
// the file's line and the file's name.
func TestGatewayTLSRefused(t *testing.T) {
	t.Parallel()
	ca := certtest.NewCA(t, "gateway CA")
	files := ca.Write(t, t.TempDir(), ca.Issue(t, certtest.Leaf{}))
	other := ca.Write(t, t.TempDir(), ca.Issue(t, certtest.Leaf{}))
	expired := ca.Write(t, t.TempDir(), ca.Issue(t, certtest.Leaf{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}))
	for _, c := range []struct {
		name, tls, says string
	}{
		{"a key of another pair", fmt.Sprintf("{cert_file: %s, key_file: %s}", files.Cert, other.Key), "test.yaml:3: tls key file " + other.Key + ": not the key of the certificate in " + files.Cert},
		{"expired", fmt.Sprintf("{cert_file: %s, key_file: %s}", expired.Cert, expired.Key), "test.yaml:3: tls certificate file " + expired.Cert + ": the certificate (CN=localhost) expired on "},
		{"no key", fmt.Sprintf("{cert_file: %s}", files.Cert), "test.yaml:3: tls key_file: TLS needs the certificate's key"},
		{"TLS 1.0", fmt.Sprintf("{cert_file: %s, key_file: %s, min_version: '1.0'}", files.Cert, files.Key), `test.yaml:3: tls min_version: "1.0": 1.2 or 1.3`},
	} {
		yaml := "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\ntls: " + c.tls + "\nlimits: [{name: l, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: l, key: ip}]}]\n"
		cfg, err := config.Parse("test.yaml", []byte(yaml))
		if err == nil {
			err = gateway.Check(gateway.Options{Config: cfg, Upstream: "http://127.0.0.1:1"})
		}
		if err == nil || !strings.HasPrefix(err.Error(), c.says) {
			t.Errorf("%s: %v\nwant %q", c.name, err, c.says)
		}
	}
}
