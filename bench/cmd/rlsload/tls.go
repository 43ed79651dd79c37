package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// transportCredentials returns clear text without -ca, and otherwise TLS
// that verifies the server's certificate against -ca for -server-name (by
// default the host of -addr, an IP address or a DNS name, as the server's
// certificate names it), presenting -cert and -key when given (mTLS).
// Verification is never skipped: a benchmark that measures TLS measures a
// real one.
func transportCredentials(o options) (credentials.TransportCredentials, error) {
	if o.ca == "" {
		return insecure.NewCredentials(), nil
	}
	pem, err := os.ReadFile(o.ca)
	if err != nil {
		return nil, fmt.Errorf("-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-ca %s: no PEM CERTIFICATE in it", o.ca)
	}
	name := o.serverName
	if name == "" {
		host, _, err := net.SplitHostPort(o.addr)
		if err != nil {
			return nil, fmt.Errorf("-addr %q: %w (or set -server-name)", o.addr, err)
		}
		name = host
	}
	cfg := &tls.Config{
		RootCAs:    roots,
		ServerName: name,
		MinVersion: tls.VersionTLS12,
	}
	if o.cert != "" {
		pair, err := tls.LoadX509KeyPair(o.cert, o.key)
		if err != nil {
			return nil, fmt.Errorf("-cert %s, -key %s: %w", o.cert, o.key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	// NewTLS adds "h2" to ALPN, which gRPC servers require.
	return credentials.NewTLS(cfg), nil
}

// checkTLSFlags refuses TLS flags that would be ignored.
func checkTLSFlags(o options) error {
	switch {
	case (o.cert == "") != (o.key == ""):
		return errors.New("-cert and -key go together")
	case o.ca == "" && (o.cert != "" || o.serverName != ""):
		return errors.New("-cert, -key and -server-name need -ca (TLS is on only with -ca)")
	}
	return nil
}

// notHealing reports whether err, from a first call, is a TLS handshake or
// certificate failure, which waiting for the server to start does not heal.
func notHealing(err error) bool {
	s := err.Error()
	return strings.Contains(s, "authentication handshake failed") || strings.Contains(s, "tls: ") || strings.Contains(s, "x509: ")
}

// tlsHint says what a first call's failure may mean about TLS, or "".
func tlsHint(o options, err error) string {
	s := err.Error()
	switch {
	case o.ca == "" && strings.Contains(s, "server preface"):
		return " (a TLS server? pass -ca)"
	case o.ca != "" && strings.Contains(s, "does not look like a TLS handshake"):
		return " (a clear-text server? drop -ca)"
	case o.cert == "" && strings.Contains(s, "certificate required"):
		return " (the server asks for a client certificate: -cert and -key)"
	case o.cert != "" && strings.Contains(s, "remote error: tls: bad certificate"):
		return " (the server refused -cert: not signed by a CA it trusts, or not for client authentication)"
	}
	return ""
}
