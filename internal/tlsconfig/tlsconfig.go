// Package tlsconfig is TLS as sluice's commands configure it, from files:
// a listener's (Server: a certificate and its key, optionally a CA whose
// client certificates the listener requires — mTLS) and a client's of a
// server such as Redis (Client: the CA that signed the server, optionally a
// client certificate, the name to verify). One shape, the same YAML fields
// and flags, for sluice serve, sluice gateway and the components to come
// (the relay, the NATS queue).
//
// Every file is checked when it is read — readable, PEM that parses, a
// certificate and a key that belong together, a CA bundle with a
// certificate in it, a certificate valid now — and refused with an *Error
// that names the file and says what is wrong. TLS 1.2 is the minimum; 1.3
// may be required. A listener's files are reloaded when they change
// (Reloader), so that a cert-manager rotation needs no restart: new
// connections get the new certificate, connections open keep theirs.
package tlsconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
)

// Server is a listener's TLS: YAML fields (the gateway's tls: and
// admin.tls:) and flags (sluice serve's --tls-*). The zero Server is clear
// text.
type Server struct {
	// CertFile is the PEM file of the listener's certificate, followed by
	// its intermediates (cert-manager's tls.crt). Required for TLS.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM file of the certificate's private key, not
	// encrypted (tls.key). Required for TLS.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, when set, is the PEM bundle of the CAs whose client
	// certificates the listener requires (mTLS): a client without one, or
	// with one they did not sign, is refused during the handshake.
	ClientCAFile string `yaml:"client_ca_file"`
	// MinVersion is the oldest TLS version accepted: "1.2" (the default)
	// or "1.3".
	MinVersion string `yaml:"min_version"`
}

// Enabled reports whether s asks for TLS (any field set).
func (s Server) Enabled() bool { return s != Server{} }

// Validate checks s's fields without reading the files: a certificate and
// its key together, a client CA only with them, a known minimum version.
// The zero Server is valid (clear text).
func (s Server) Validate() error {
	if !s.Enabled() {
		return nil
	}
	switch {
	case s.CertFile == "":
		return &Error{Field: "cert_file", Reason: "TLS needs a certificate and its key"}
	case s.KeyFile == "":
		return &Error{Field: "key_file", Reason: "TLS needs the certificate's key"}
	}
	_, err := minVersion(s.MinVersion)
	return err
}

// Client is the TLS of a connection to a server (Redis, a Sentinel): YAML
// fields (the gateway's store.redis.tls) and flags (serve's
// --redis-tls-*). A Client, even the zero one, means TLS: whether to use
// TLS at all is its owner's field (a nil *Client is clear text).
type Client struct {
	// CAFile is the PEM bundle of the CAs that may sign the server's
	// certificate. Default: the system's roots (a managed Redis's
	// certificate from a public CA).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key, for a
	// server that requires one (Redis's tls-auth-clients yes). They are
	// read again at a new connection when they have changed (a
	// rotation); the CA file is read once.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must carry. Default:
	// the host of the address dialled (an IP address is checked against
	// the certificate's IP SANs).
	ServerName string `yaml:"server_name"`
	// MinVersion is the oldest TLS version accepted: "1.2" (the default)
	// or "1.3".
	MinVersion string `yaml:"min_version"`
}

// Validate checks c's fields without reading the files: a client
// certificate and its key together, a server name that is a host name, a
// known minimum version.
func (c Client) Validate() error {
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return &Error{Field: "key_file", Reason: "a client certificate needs its key"}
	case c.KeyFile != "" && c.CertFile == "":
		return &Error{Field: "cert_file", Reason: "a client key needs its certificate"}
	case c.ServerName != "" && !validServerName(c.ServerName):
		return &Error{Field: "server_name", Reason: fmt.Sprintf("%q: a host name or an IP address, without a scheme or a port", c.ServerName)}
	}
	_, err := minVersion(c.MinVersion)
	return err
}

// validServerName: a DNS name or an IP address, nothing else.
func validServerName(s string) bool {
	if net.ParseIP(s) != nil {
		return true
	}
	if len(s) > 253 || strings.ContainsAny(s, ":/@ ") {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '*' && i == 0) {
				return false
			}
		}
	}
	return true
}

// minVersion reads a MinVersion field.
func minVersion(v string) (uint16, error) {
	switch v {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, &Error{Field: "min_version", Reason: fmt.Sprintf("%q: 1.2 or 1.3 (TLS 1.0 and 1.1 are not offered)", v)}
}

// Error is a TLS setting or file refused: the field it is about (its YAML
// name: cert_file, key_file, client_ca_file, ca_file, server_name,
// min_version), the file when there is one, and why.
type Error struct {
	// Field is the YAML name of the field.
	Field string
	// File is the file the field names, when the refusal is about it.
	File string
	// Reason says what is wrong, in words.
	Reason string
	// Err is the cause, when there is one (a file that cannot be read).
	Err error
}

func (e *Error) Error() string {
	if e.File == "" {
		return e.Field + ": " + e.Reason
	}
	return fmt.Sprintf("%s %s: %s", fileKind[e.Field], e.File, e.Reason)
}

// Unwrap returns the cause, or nil.
func (e *Error) Unwrap() error { return e.Err }

// fileKind names what each field's file holds, for messages.
var fileKind = map[string]string{
	"cert_file":      "certificate file",
	"key_file":       "key file",
	"client_ca_file": "client CA file",
	"ca_file":        "CA file",
}

// FieldOf is the YAML field an error of this package is about, "" for
// another error: for a caller that says it with a line number or a flag.
func FieldOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}
