// Package certtest makes the certificates tests need, with crypto/x509: a
// certificate authority, server and client certificates it signs (or
// expired, or for another name), written as PEM files the way
// cert-manager and Kubernetes Secrets lay them out. Keys are ECDSA P-256.
// Nothing here is for production: the keys are written unencrypted.
package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA's certificate, PEM-encoded: what a ca_file holds.
	PEM []byte
}

// NewCA makes a self-signed CA named name, valid from an hour ago for a
// year.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	return NewCAUntil(t, name, time.Now().Add(365*24*time.Hour))
}

// NewCAUntil makes a self-signed CA named name, valid from an hour ago
// (or a day before notAfter, if earlier) until notAfter (in the past: an
// expired CA).
func NewCAUntil(t testing.TB, name string, notAfter time.Time) *CA {
	t.Helper()
	key := newKey(t)
	notBefore := time.Now().Add(-time.Hour)
	if early := notAfter.Add(-24 * time.Hour); early.Before(notBefore) {
		notBefore = early
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"sluice tests"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf describes a certificate the CA issues. The zero Leaf is a server
// certificate for 127.0.0.1 and localhost, valid from an hour ago for 90
// days (cert-manager's default).
type Leaf struct {
	// CommonName; default "localhost".
	CommonName string
	// DNS and IPs are the subject alternative names; both empty means
	// localhost, 127.0.0.1 and ::1, unless NoSAN.
	DNS   []string
	IPs   []net.IP
	NoSAN bool
	// Client makes a client certificate (ExtKeyUsageClientAuth); a server
	// certificate otherwise. Both usages with Both.
	Client, Both bool
	// NotBefore and NotAfter; defaults an hour ago and 90 days from now.
	NotBefore, NotAfter time.Time
	// RSABits, when set, makes an RSA key of that size instead of P-256.
	RSABits int
}

// Pair is an issued certificate with its key, PEM-encoded.
type Pair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue signs a certificate for leaf.
func (ca *CA) Issue(t testing.TB, leaf Leaf) Pair {
	t.Helper()
	var key crypto.Signer = newKey(t)
	if leaf.RSABits > 0 {
		k, err := rsa.GenerateKey(rand.Reader, leaf.RSABits)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	}
	if leaf.CommonName == "" {
		leaf.CommonName = "localhost"
	}
	if len(leaf.DNS) == 0 && len(leaf.IPs) == 0 && !leaf.NoSAN {
		leaf.DNS, leaf.IPs = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	if leaf.NotBefore.IsZero() {
		leaf.NotBefore = time.Now().Add(-time.Hour)
	}
	if leaf.NotAfter.IsZero() {
		leaf.NotAfter = time.Now().Add(90 * 24 * time.Hour)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	switch {
	case leaf.Both:
		usage = append(usage, x509.ExtKeyUsageClientAuth)
	case leaf.Client:
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: leaf.CommonName},
		DNSNames:     leaf.DNS,
		IPAddresses:  leaf.IPs,
		NotBefore:    leaf.NotBefore,
		NotAfter:     leaf.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// Files are a pair and its CA written to a directory, as a Kubernetes TLS
// Secret lays them out (tls.crt, tls.key, ca.crt).
type Files struct {
	Dir, Cert, Key, CA string
}

// Write writes p and ca's certificate into dir as tls.crt, tls.key and
// ca.crt (replacing each file by a rename, as a rotation does), and
// returns their paths.
func (ca *CA) Write(t testing.TB, dir string, p Pair) Files {
	t.Helper()
	f := Files{Dir: dir, Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	WriteFile(t, f.Cert, p.CertPEM)
	WriteFile(t, f.Key, p.KeyPEM)
	WriteFile(t, f.CA, ca.PEM)
	return f
}

// WriteFile writes data to path through a temporary file renamed over it,
// so that a reader never sees half of it.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
