package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/certtest"
	"github.com/sluicehq/sluice/internal/logtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The secrets of the scan: each must appear in no log line, no admin
// answer, no error text, no output of sluice check.
const (
	scanRedisPassword    = "redis-acl-pass-SCAN-1f2e3d"
	scanWrongPassword    = "wrong-redis-pass-SCAN-9c8b7a"
	scanAdminToken       = "admin-token-SCAN-5a6b7c8d9e"
	scanKeyHMAC          = "key-hmac-secret-SCAN-0a1b2c3d"
	scanDefaultPassword  = "default-user-pass-SCAN-77aa"
	scanSentinelPassword = "sentinel-pass-SCAN-66bb"
)

var scanSecrets = []string{scanRedisPassword, scanWrongPassword, scanAdminToken, scanKeyHMAC, scanDefaultPassword, scanSentinelPassword}

// leaks lists each secret found in a text, with where.
func leaks(texts map[string]string) []string {
	var found []string
	for where, text := range texts {
		for _, s := range scanSecrets {
			if strings.Contains(text, s) {
				found = append(found, fmt.Sprintf("%s holds the secret %q:\n%s", where, s, text))
			}
		}
	}
	return found
}

// scan fails the test for each secret found in a text.
func scan(t *testing.T, texts map[string]string) {
	t.Helper()
	for _, l := range leaks(texts) {
		t.Error(l)
	}
}

// The scanner finds what it looks for (its negative control): every
// planted secret, wherever it is in a text.
func TestScanFindsSecrets(t *testing.T) {
	t.Parallel()
	texts := map[string]string{}
	for i, s := range scanSecrets {
		texts[fmt.Sprint(i)] = `{"level":"ERROR","msg":"AUTH sluice ` + s + `"}`
	}
	if got := leaks(texts); len(got) != len(scanSecrets) {
		t.Fatalf("the scan found %d of %d planted secrets", len(got), len(scanSecrets))
	}
	if got := leaks(map[string]string{"clean": "password: environment variable SLUICE_SCAN_REDIS_PASSWORD"}); len(got) != 0 {
		t.Fatalf("the scan found secrets in a clean text: %v", got)
	}
}

func writeSecret(t *testing.T, dir, name, value string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// serving runs sluice serve with args until the test ends, and returns
// the addresses of its "serving" log line and its log.
func serving(t *testing.T, args ...string) (grpcAddr, httpAddr, adminAddr string, log *logtest.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log = &logtest.Buffer{}
	exit := make(chan int, 1)
	go func() {
		exit <- Main(ctx, append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, args...), io.Discard, log)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("serve exited %d: %s", code, log.String())
		}
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(log.String()))
		for sc.Scan() {
			var line struct{ Msg, GRPC, HTTP, Admin string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				return line.GRPC, line.HTTP, line.Admin, log
			}
		}
		select {
		case code := <-exit:
			exit <- code
			t.Fatalf("serve exited %d: %s", code, log.String())
		default:
		}
	}
	t.Fatalf("serve logged no \"serving\" line: %s", log.String())
	return
}

// Every secret of a production setup — a Redis ACL password and a
// Sentinel-less TLS Redis, the admin token, the key HMAC secret, read from
// files and variables — is absent from the logs of a run, from
// /admin/config and the other admin answers, from sluice check's output
// and from every refusal's text (a wrong password, a password on the
// command line, a secret in a configuration file). Not parallel: it sets
// environment variables.
func TestSecretsNeverShown(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "scan CA")
	redisFiles := ca.Write(t, filepath.Join(dir), ca.Issue(t, certtest.Leaf{}))
	srv := redistest.StartTLSServer(t, redistest.TLSFiles{Cert: redisFiles.Cert, Key: redisFiles.Key, CA: redisFiles.CA}, false,
		"--requirepass", scanDefaultPassword, "--user", "sluice", "on", ">"+scanRedisPassword, "resetkeys", "~sluice:*", "resetchannels", "-@all",
		"+evalsha", "+eval", "+ping", "+get", "+set", "+del", "+time")
	listenerDir := t.TempDir()
	listener := ca.Write(t, listenerDir, ca.Issue(t, certtest.Leaf{}))
	client := ca.Issue(t, certtest.Leaf{Client: true, CommonName: "envoy"})
	tokenFile := writeSecret(t, dir, "admin-token", scanAdminToken)
	t.Setenv("SLUICE_SCAN_REDIS_PASSWORD", scanRedisPassword)
	t.Setenv("SLUICE_SCAN_WRONG_PASSWORD", scanWrongPassword)
	t.Setenv("SLUICE_SCAN_KEY_HMAC", scanKeyHMAC)
	cfgDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	redisArgs := []string{"--redis", srv.TLSAddr(), "--redis-username", "sluice", "--redis-tls-ca-file", redisFiles.CA, "--key-hmac-env", "SLUICE_SCAN_KEY_HMAC"}
	serveArgs := append([]string{"--config", cfgDir, "--redis-password-env", "SLUICE_SCAN_REDIS_PASSWORD", "--admin-token-file", tokenFile,
		"--tls-cert-file", listener.Cert, "--tls-key-file", listener.Key, "--tls-client-ca-file", listener.CA, "--tls-client-auth", "grpc"}, redisArgs...)
	texts := map[string]string{}

	// A run: decisions over gRPC (mTLS) and /json, the admin API.
	grpcAddr, httpAddr, adminAddr, log := serving(t, serveArgs...)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	pair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{pair}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rlpb.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "api_key", Value: "scan"}}}}}
	for range 6 {
		if _, err := rlpb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatalf("RLS over mTLS on Redis over TLS: %v", err)
		}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	get := func(method, url, body string) string {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+scanAdminToken)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	texts["/json"] = get("POST", "https://"+httpAddr+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"scan"}]}]}`)
	for _, path := range []string{"/admin/config", "/admin/keys?domain=edge&entry=api_key=scan", "/admin/tenants", "/metrics", "/readyz"} {
		texts[path] = get("GET", "https://"+adminAddr+path, "")
	}
	if !strings.Contains(texts["/admin/config"], `"password":"environment variable SLUICE_SCAN_REDIS_PASSWORD"`) ||
		!strings.Contains(texts["/admin/config"], `"admin_token":"file `+tokenFile+`"`) || !strings.Contains(texts["/admin/config"], `"username":"sluice"`) {
		t.Errorf("/admin/config does not say where the secrets are kept: %s", texts["/admin/config"])
	}
	if !strings.Contains(texts["/admin/keys?domain=edge&entry=api_key=scan"], `"remaining":0`) {
		t.Errorf("the admin's key view: %s; want the key spent on Redis", texts["/admin/keys?domain=edge&entry=api_key=scan"])
	}
	// Redis holds no raw key either (HMAC'd).
	if out, _ := srv.CLI("--no-auth-warning", "-a", scanDefaultPassword, "--scan", "--pattern", "*scan*"); strings.TrimSpace(out) != "" {
		t.Errorf("Redis holds the raw key: %q", out)
	}

	// sluice check with the same flags, and its output.
	code, out, errOut := run(append([]string{"check"}, serveArgs...)...)
	if code != 0 || !strings.Contains(out, "redis: "+srv.TLSAddr()+`, user "sluice", password: environment variable SLUICE_SCAN_REDIS_PASSWORD, TLS: CA `) ||
		!strings.Contains(out, "client certificates: required on grpc") {
		t.Errorf("sluice check: exit %d\n%s%s", code, out, errOut)
	}
	texts["check"] = out + errOut

	// Refusals.
	for name, args := range map[string][]string{
		"a wrong password":                         append([]string{"serve", "--config", cfgDir, "--redis-password-env", "SLUICE_SCAN_WRONG_PASSWORD"}, redisArgs...),
		"the password on the command line":         append([]string{"serve", "--config", cfgDir, "--redis-password", scanRedisPassword}, redisArgs...),
		"the password on the command line, with =": append([]string{"serve", "--config", cfgDir, "--redis-password=" + scanRedisPassword}, redisArgs...),
		"the admin token on the command line":      {"serve", "--config", cfgDir, "--admin-token", scanAdminToken},
		"a password in the Redis address":          {"serve", "--config", cfgDir, "--redis", "redis://sluice:" + scanRedisPassword + "@" + srv.TLSAddr()},
		"check, a wrong password":                  append([]string{"check", cfgDir, "--redis-password-env", "SLUICE_SCAN_WRONG_PASSWORD"}, redisArgs...),
	} {
		code, out, errOut := run(append(args, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")...)
		if name == "check, a wrong password" {
			if code != 0 {
				t.Errorf("%s: exit %d (check does not connect): %s", name, code, errOut)
			}
		} else if code == 0 {
			t.Errorf("%s: exit 0", name)
		}
		texts[name] = out + errOut
	}
	if s := texts["a wrong password"]; !strings.Contains(s, "WRONGPASS") {
		t.Errorf("a wrong password: %q; want Redis's WRONGPASS", s)
	}
	if s := texts["the password on the command line"]; !strings.Contains(s, "--redis-password: a secret is not given on the command line") {
		t.Errorf("the password on the command line: %q; want the reason", s)
	}
	if s := texts["the admin token on the command line"]; !strings.Contains(s, "--admin-token: a secret is not given on the command line") {
		t.Errorf("the admin token on the command line: %q; want the reason", s)
	}
	if s := texts["a password in the Redis address"]; !strings.Contains(s, "--redis:") {
		t.Errorf("a password in the Redis address: %q; want it refused", s)
	}

	// The gateway, with the same secrets in its file's own fields.
	gw := filepath.Join(t.TempDir(), "gateway.yaml")
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
upstream: http://127.0.0.1:1
tls: {cert_file: %s, key_file: %s}
admin: {listen: 127.0.0.1:0, token_file: %s, tls: {cert_file: %s, key_file: %s}}
store:
  kind: redis
  redis:
    addrs: [%s]
    username: sluice
    password_env: SLUICE_SCAN_REDIS_PASSWORD
    key_hmac_env: SLUICE_SCAN_KEY_HMAC
    tls: {ca_file: %s}
limits: [{name: l, quota: 5, window: 1m}]
rules: [{name: r, quotas: [{limit: l, key: ip}]}]
`, listener.Cert, listener.Key, tokenFile, listener.Cert, listener.Key, srv.TLSAddr(), redisFiles.CA)
	if err := os.WriteFile(gw, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run("check", gw)
	texts["check gateway"] = out + errOut
	if code != 0 || !strings.Contains(out, "tls (listen): ") || !strings.Contains(out, `user "sluice", password: environment variable SLUICE_SCAN_REDIS_PASSWORD`) {
		t.Errorf("sluice check of the gateway's file: exit %d\n%s%s", code, out, errOut)
	}
	for name, edit := range map[string][2]string{
		"gateway, a wrong password":       {"SLUICE_SCAN_REDIS_PASSWORD", "SLUICE_SCAN_WRONG_PASSWORD"},
		"gateway, a password in the file": {"password_env: SLUICE_SCAN_REDIS_PASSWORD", "password: " + scanRedisPassword},
	} {
		bad := filepath.Join(t.TempDir(), "gateway.yaml")
		if err := os.WriteFile(bad, []byte(strings.Replace(yaml, edit[0], edit[1], 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var stdout, stderr logtest.Buffer
		code := Main(ctx, []string{"gateway", "--config", bad}, &stdout, &stderr)
		cancel()
		if code == 0 {
			t.Errorf("%s: exit 0", name)
		}
		texts[name] = stdout.String() + stderr.String()
	}
	if s := texts["gateway, a wrong password"]; !strings.Contains(s, "WRONGPASS") {
		t.Errorf("gateway, a wrong password: %q", s)
	}
	if s := texts["gateway, a password in the file"]; !strings.Contains(s, "password: a secret is not written in the configuration file") {
		t.Errorf("gateway, a password in the file: %q", s)
	}

	texts["serve's log"] = log.String()
	scan(t, texts)
}
