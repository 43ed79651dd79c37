package tlsconfig

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/configfile"
)

// MaxFileSize bounds a certificate, key or CA file (1 MiB: a bundle of
// every public root is about 200 KiB).
const MaxFileSize = 1 << 20

// clockSkew is how far in the future a certificate's NotBefore may be and
// still be accepted: the issuer's clock and this machine's differ.
const clockSkew = time.Minute

// expiresSoon is how close to its expiry a certificate makes Summary warn.
const expiresSoon = 14 * 24 * time.Hour

// Summary describes the certificates read: for sluice check, the admin
// API's /admin/config and the logs. It holds names and dates, never a key.
type Summary struct {
	// CertFile and the certificate's subject, names (DNS and IP SANs) and
	// validity; empty for a Client without a certificate.
	CertFile  string    `json:"cert_file,omitempty"`
	Subject   string    `json:"subject,omitempty"`
	Names     []string  `json:"names,omitempty"`
	NotBefore time.Time `json:"not_before,omitzero"`
	NotAfter  time.Time `json:"not_after,omitzero"`
	// CAFile is the client CA file (a Server's) or the server CA file (a
	// Client's); CAs the certificates in it. Empty: no client
	// certificates asked (Server), the system's roots (Client).
	CAFile string `json:"ca_file,omitempty"`
	CAs    int    `json:"cas,omitempty"`
	// Warnings are what will not stop TLS but may soon, or for some
	// clients: an expiry within 14 days, no subject alternative name.
	Warnings []string `json:"warnings,omitempty"`

	clientCAs bool // CAFile is a listener's client CA
}

// String is the summary in one line.
func (s Summary) String() string {
	var parts []string
	if s.CertFile != "" {
		who := s.Subject
		if len(s.Names) > 0 {
			who += "; " + strings.Join(s.Names, ", ")
		}
		parts = append(parts, fmt.Sprintf("%s (%s), valid until %s", s.CertFile, who, s.NotAfter.UTC().Format(time.RFC3339)))
	}
	if s.CAFile != "" {
		what := "CA"
		if s.clientCAs {
			what = "client CA"
		}
		parts = append(parts, fmt.Sprintf("%s %s (%d certificate(s))", what, s.CAFile, s.CAs))
	}
	for _, w := range s.Warnings {
		parts = append(parts, "warning: "+w)
	}
	return strings.Join(parts, "; ")
}

// material is what a Server's files hold, read and checked.
type material struct {
	cert     *tls.Certificate // Leaf set
	pool     *x509.CertPool   // the client CAs; nil without mTLS
	summary  Summary
	loadedAt time.Time // when a Reloader put it in force
}

// Check reads s's files and checks them as a listener would at start (see
// the package doc), at the instant now: every refusal is an *Error naming
// the file. It returns what they hold. The zero Server checks nothing.
func (s Server) Check(now time.Time) (Summary, error) {
	if !s.Enabled() {
		return Summary{}, nil
	}
	m, err := s.load(now)
	if err != nil {
		return Summary{}, err
	}
	return m.summary, nil
}

func (s Server) load(now time.Time) (*material, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	cert, sum, err := loadPair(s.CertFile, s.KeyFile, now, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	m := &material{cert: cert, summary: sum}
	if s.ClientCAFile != "" {
		pool, n, warnings, err := loadCAs(s.ClientCAFile, "client_ca_file", now)
		if err != nil {
			return nil, err
		}
		m.pool = pool
		m.summary.CAFile, m.summary.CAs, m.summary.clientCAs = s.ClientCAFile, n, true
		m.summary.Warnings = append(m.summary.Warnings, warnings...)
	}
	return m, nil
}

// Check reads c's files and checks them as a connection would at start,
// at the instant now, and returns what they hold.
func (c Client) Check(now time.Time) (Summary, error) {
	_, sum, err := c.load(now)
	return sum, err
}

// Config reads and checks c's files and returns the TLS configuration of
// a client: the CA bundle as its roots (or the system's), the client
// certificate if any, the server name if set (otherwise the dialler sets
// the host it dials: see ForHost), TLS 1.2 at least.
func (c Client) Config(now time.Time) (*tls.Config, error) {
	cfg, _, err := c.load(now)
	return cfg, err
}

func (c Client) load(now time.Time) (*tls.Config, Summary, error) {
	if err := c.Validate(); err != nil {
		return nil, Summary{}, err
	}
	v, _ := minVersion(c.MinVersion)
	cfg := &tls.Config{MinVersion: v, ServerName: c.ServerName}
	var sum Summary
	if c.CertFile != "" {
		cert, s, err := loadPair(c.CertFile, c.KeyFile, now, x509.ExtKeyUsageClientAuth)
		if err != nil {
			return nil, Summary{}, err
		}
		cc := &clientCert{certFile: c.CertFile, keyFile: c.KeyFile, cert: cert, stamp: stampOf(c.CertFile, c.KeyFile)}
		cfg.GetClientCertificate = cc.get
		sum = s
	}
	if c.CAFile != "" {
		pool, n, warnings, err := loadCAs(c.CAFile, "ca_file", now)
		if err != nil {
			return nil, Summary{}, err
		}
		cfg.RootCAs = pool
		sum.CAFile, sum.CAs = c.CAFile, n
		sum.Warnings = append(sum.Warnings, warnings...)
	}
	return cfg, sum, nil
}

// clientCert is a client certificate that follows its files: each new
// connection's handshake looks at the files (a stat of each) and reads
// them again when they changed, so that a rotation (cert-manager writing a
// new pair) is used by the next connection, without a watcher. Files that
// are refused (half-way through a rotation) leave the certificate in use.
type clientCert struct {
	certFile, keyFile string

	mu    sync.Mutex
	cert  *tls.Certificate
	stamp string // the files' sizes and modification times when read
}

func (c *clientCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := stampOf(c.certFile, c.keyFile); st != c.stamp {
		if cert, _, err := loadPair(c.certFile, c.keyFile, time.Now(), x509.ExtKeyUsageClientAuth); err == nil {
			c.cert, c.stamp = cert, st
		}
	}
	return c.cert, nil
}

// stampOf is the sizes and modification times of files, "" for one that
// cannot be seen.
func stampOf(files ...string) string {
	var b strings.Builder
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d@%d;", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

// readPEM reads a file of at most MaxFileSize bytes and lists the PEM
// blocks in it.
func readPEM(path, field string) ([]byte, []*pem.Block, error) {
	b, err := configfile.ReadFile(path, MaxFileSize)
	if fe := (*configfile.FileError)(nil); errors.As(err, &fe) {
		return nil, nil, &Error{Field: field, File: path, Reason: fe.Reason, Err: fe.Err}
	}
	var blocks []*pem.Block
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		blocks = append(blocks, blk)
	}
	return b, blocks, nil
}

func types(blocks []*pem.Block) []string {
	var ts []string
	for _, b := range blocks {
		if !slices.Contains(ts, b.Type) {
			ts = append(ts, b.Type)
		}
	}
	return ts
}

func isKey(typ string) bool { return strings.HasSuffix(typ, "PRIVATE KEY") }

// minRSABits is the smallest RSA key accepted: Go's TLS and most clients
// refuse smaller ones in a handshake, so a certificate with one would load
// and then fail every connection.
const minRSABits = 2048

// loadPair reads a certificate and its key, and checks that they belong
// together, that the certificate is valid at now, and that it can do its
// part (usage: a server's, or a client's), as its peers will check: an
// extended key usage that allows it, an RSA key of 2048 bits at least.
func loadPair(certFile, keyFile string, now time.Time, usage x509.ExtKeyUsage) (*tls.Certificate, Summary, error) {
	const certField, keyField = "cert_file", "key_file"
	certPEM, certBlocks, err := readPEM(certFile, certField)
	if err != nil {
		return nil, Summary{}, err
	}
	keyPEM, keyBlocks, err := readPEM(keyFile, keyField)
	if err != nil {
		return nil, Summary{}, err
	}
	certErr := func(reason string) error { return &Error{Field: certField, File: certFile, Reason: reason} }
	keyErr := func(reason string) error { return &Error{Field: keyField, File: keyFile, Reason: reason} }
	if !slices.ContainsFunc(certBlocks, func(b *pem.Block) bool { return b.Type == "CERTIFICATE" }) {
		if slices.ContainsFunc(certBlocks, func(b *pem.Block) bool { return isKey(b.Type) }) {
			return nil, Summary{}, certErr("no certificate in it, but a private key: are the certificate and key files swapped?")
		}
		return nil, Summary{}, certErr(fmt.Sprintf("no certificate in it (a PEM CERTIFICATE block; found %s)", found(certBlocks)))
	}
	switch {
	case slices.ContainsFunc(keyBlocks, func(b *pem.Block) bool { return b.Type == "ENCRYPTED PRIVATE KEY" || b.Headers["Proc-Type"] != "" }):
		return nil, Summary{}, keyErr("an encrypted private key: sluice reads unencrypted keys (protect the file with its permissions instead)")
	case !slices.ContainsFunc(keyBlocks, func(b *pem.Block) bool { return isKey(b.Type) }):
		if slices.ContainsFunc(keyBlocks, func(b *pem.Block) bool { return b.Type == "CERTIFICATE" }) {
			return nil, Summary{}, keyErr("no private key in it, but a certificate: are the certificate and key files swapped?")
		}
		return nil, Summary{}, keyErr(fmt.Sprintf("no private key in it (a PEM PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY block; found %s)", found(keyBlocks)))
	}
	leaf, err := x509.ParseCertificate(firstOf(certBlocks, "CERTIFICATE").Bytes)
	if err != nil {
		return nil, Summary{}, certErr("the certificate does not parse: " + strings.TrimPrefix(err.Error(), "x509: "))
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, Summary{}, &Error{Field: keyField, File: keyFile, Reason: fmt.Sprintf("not the key of the certificate in %s (a rotation half done, or files of two pairs)", certFile)}
		}
		return nil, Summary{}, keyErr("the key does not parse: " + strings.TrimPrefix(err.Error(), "tls: "))
	}
	pair.Leaf = leaf
	if err := validAt(leaf, now); err != "" {
		return nil, Summary{}, certErr(err)
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, usage) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		role := map[x509.ExtKeyUsage]string{x509.ExtKeyUsageServerAuth: "a server (TLS Web Server Authentication)", x509.ExtKeyUsageClientAuth: "a client (TLS Web Client Authentication)"}[usage]
		return nil, Summary{}, certErr(fmt.Sprintf("the certificate (%s) is not for %s: its extended key usage does not allow it, and every peer would refuse it", leaf.Subject, role))
	}
	if k, ok := leaf.PublicKey.(*rsa.PublicKey); ok && k.N.BitLen() < minRSABits {
		return nil, Summary{}, certErr(fmt.Sprintf("the certificate (%s) has an RSA key of %d bits: Go's TLS and most peers refuse keys under %d bits", leaf.Subject, k.N.BitLen(), minRSABits))
	}
	sum := Summary{CertFile: certFile, Subject: leaf.Subject.String(), Names: names(leaf), NotBefore: leaf.NotBefore.UTC(), NotAfter: leaf.NotAfter.UTC()}
	if len(sum.Names) == 0 {
		sum.Warnings = append(sum.Warnings, certFile+": no subject alternative name (DNS or IP): Go and most TLS clients ignore the common name and will refuse it")
	}
	if left := leaf.NotAfter.Sub(now); left < expiresSoon {
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("%s: expires in %s, on %s", certFile, left.Round(time.Minute), leaf.NotAfter.UTC().Format(time.RFC3339)))
	}
	return &pair, sum, nil
}

// validAt is "" when cert is valid at now (its NotBefore within the clock
// skew), else why not.
func validAt(cert *x509.Certificate, now time.Time) string {
	switch {
	case now.After(cert.NotAfter):
		return fmt.Sprintf("the certificate (%s) expired on %s", cert.Subject, cert.NotAfter.UTC().Format(time.RFC3339))
	case now.Add(clockSkew).Before(cert.NotBefore):
		return fmt.Sprintf("the certificate (%s) is not valid before %s", cert.Subject, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return ""
}

// loadCAs reads a CA bundle: every CERTIFICATE block must parse, and at
// least one must be valid at now. All are in the pool — verification
// checks each CA's validity when it verifies, so a CA not valid yet (the
// next one of a staged rotation) is trusted from its NotBefore on, and an
// expired one not at all; each not valid now is a warning.
func loadCAs(path, field string, now time.Time) (*x509.CertPool, int, []string, error) {
	_, blocks, err := readPEM(path, field)
	if err != nil {
		return nil, 0, nil, err
	}
	caErr := func(reason string) error { return &Error{Field: field, File: path, Reason: reason} }
	pool := x509.NewCertPool()
	var warnings, invalid []string
	n := 0
	for _, b := range blocks {
		if b.Type != "CERTIFICATE" {
			if isKey(b.Type) {
				return nil, 0, nil, caErr("holds a private key: a CA bundle holds certificates only (is it the key file?)")
			}
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, 0, nil, caErr(fmt.Sprintf("certificate %d does not parse: %s", n+1, strings.TrimPrefix(err.Error(), "x509: ")))
		}
		n++
		pool.AddCert(c)
		if why := validAt(c, now); why != "" {
			invalid = append(invalid, why)
		}
	}
	switch {
	case n == 0:
		return nil, 0, nil, caErr(fmt.Sprintf("no certificate in it (PEM CERTIFICATE blocks; found %s)", found(blocks)))
	case len(invalid) == n:
		return nil, 0, nil, caErr(strings.Join(invalid, "; "))
	}
	for _, why := range invalid {
		warnings = append(warnings, path+": "+why+" (kept: verification checks it)")
	}
	return pool, n, warnings, nil
}

func firstOf(blocks []*pem.Block, typ string) *pem.Block {
	for _, b := range blocks {
		if b.Type == typ {
			return b
		}
	}
	return nil
}

// found says which PEM blocks a file holds, for a message.
func found(blocks []*pem.Block) string {
	if len(blocks) == 0 {
		return "no PEM data"
	}
	return strings.Join(types(blocks), ", ")
}

// names lists a certificate's subject alternative names.
func names(c *x509.Certificate) []string {
	ns := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		ns = append(ns, ip.String())
	}
	return ns
}
