package redistest

import (
	"strconv"
	"testing"
)

// TLSFiles are the PEM files a TLS redis-server uses: its certificate and
// key, and the CA it verifies client certificates with.
type TLSFiles struct {
	Cert, Key, CA string
}

// StartTLSServer starts redis-server speaking TLS on TLSAddr, with files,
// and clear text on Addr (for the test's own commands: CLI, readiness).
// clientCerts makes Redis require a client certificate signed by
// files.CA on TLS connections (tls-auth-clients yes). Extra arguments
// follow (--requirepass, --user …).
func StartTLSServer(t testing.TB, files TLSFiles, clientCerts bool, args ...string) *Server {
	t.Helper()
	port := FreePort(t)
	auth := "no"
	if clientCerts {
		auth = "yes"
	}
	s := StartServer(t, append([]string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", files.Cert, "--tls-key-file", files.Key,
		"--tls-ca-cert-file", files.CA, "--tls-auth-clients", auth}, args...)...)
	s.tlsPort = port
	return s
}

// TLSAddr is the address of a StartTLSServer's TLS port ("" for a server
// without one).
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return "127.0.0.1:" + strconv.Itoa(s.tlsPort)
}
