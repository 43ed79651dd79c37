package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/internal/certtest"
	"github.com/sluicehq/sluice/internal/logtest"
)

// --grpc-max-streams and --grpc-call-timeout reach the gRPC listener: its
// SETTINGS announce the streams, and a call whose message never comes
// ends DEADLINE_EXCEEDED after the timeout.
func TestServeGRPCCallBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var stderr logtest.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- Main(ctx, []string{"serve", "--config", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--grpc-max-streams", "3", "--grpc-call-timeout", timeout.String()}, io.Discard, &stderr)
	}()
	defer func() {
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("serve exited %d: %s", code, stderr.String())
		}
	}()

	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var line struct{ Msg, GRPC string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				addr = line.GRPC
			}
		}
		select {
		case code := <-exit:
			exit <- code
			t.Fatalf("serve exited %d: %s", code, stderr.String())
		default:
		}
	}
	if addr == "" {
		t.Fatalf("serve logged no \"serving\" line: %s", stderr.String())
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout + 5*time.Second))
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(c, http2.ClientPreface)
	fr.WriteSettings()
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := f.(*http2.SettingsFrame); !ok {
		t.Fatalf("the server's first frame: %v", f)
	} else if v, ok := s.Value(http2.SettingMaxConcurrentStreams); !ok || v != 3 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent %v), want 3", v, ok)
	}
	fr.WriteSettingsAck()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{":authority", "sluice"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	start := time.Now()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}) // and never the message
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the stuck call did not end within %v: %v", timeout+5*time.Second, err)
		}
		h, ok := f.(*http2.MetaHeadersFrame)
		if !ok || !h.StreamEnded() {
			continue
		}
		if took := time.Since(start); took < timeout || took > timeout+time.Second {
			t.Errorf("the stuck call ended after %v, want %v (+ 1 s)", took.Round(time.Millisecond), timeout)
		}
		if st := h.Fields; !strings.Contains(fmt.Sprint(st), `"grpc-status" = "4"`) {
			t.Errorf("the stuck call's trailers: %v, want grpc-status 4 (DEADLINE_EXCEEDED)", st)
		}
		return
	}
}

func TestServeBadGRPCCallBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--grpc-max-streams", "0"}, "--grpc-max-streams 0"},
		{[]string{"--grpc-max-streams", "4294967296"}, "--grpc-max-streams 4294967296"},
		{[]string{"--grpc-call-timeout", "0s"}, "--grpc-call-timeout 0s"},
		{[]string{"--grpc-call-timeout", "-1s"}, "--grpc-call-timeout -1s"},
	} {
		code, out, errOut := run(append([]string{"serve", "--config", t.TempDir()}, c.args...)...)
		if code != 2 || !strings.Contains(errOut+out, c.says) {
			t.Errorf("%q: exit %d, output %q; want exit 2 saying %q", c.args, code, errOut+out, c.says)
		}
	}
}

// Each bad flag is named alone, with its rule, before anything starts; a
// listener or Redis address is checked as the gateway's file checks one.
func TestServeBadFlagSaysWhich(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--grpc-call-timeout", "-1s"}, "sluice serve: --grpc-call-timeout -1s: must be positive"},
		{[]string{"--max-connections", "-1"}, "sluice serve: --max-connections -1: at least 1"},
		{[]string{"--grpc-idle-timeout", "0s"}, "sluice serve: --grpc-idle-timeout 0s: must be positive"},
		{[]string{"--http-addr", "127.0.0.1:99999"}, `sluice serve: --http-addr "127.0.0.1:99999": the port must be a number from 0 to 65535`},
		{[]string{"--admin-addr", "localhost"}, `sluice serve: --admin-addr "localhost": host:port`},
		{[]string{"--grpc-addr", "::1:80"}, `sluice serve: --grpc-addr "::1:80": an IPv6 address goes in brackets`},
		{[]string{"--http-addr", "127.0.0.1:18080", "--admin-addr", "127.0.0.1:18080"}, `sluice serve: --admin-addr "127.0.0.1:18080": the address of --http-addr too; each listener needs its own`},
		{[]string{"--redis", "127.0.0.1:6379,localhost"}, `sluice serve: --redis: "localhost": host:port, e.g. 127.0.0.1:8080 or [::1]:8080 (Redis listens on 6379 by default)`},
	} {
		code, out, errOut := run(append([]string{"serve", "--config", t.TempDir()}, c.args...)...)
		if code != 2 || !strings.HasPrefix(errOut, c.says) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, stderr starting %q", c.args, code, out, errOut, c.says)
		}
	}
}

// The flags of TLS, Redis and secrets: a shape that cannot work is a
// usage error naming the flag (exit 2); a file that cannot be used is a
// failure naming the flag and the file (exit 1); a secret on the command
// line is refused with the reason, never repeated. Nothing starts, and
// sluice check says the same.
func TestServeConnectionFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	files := ca.Write(t, dir, ca.Issue(t, certtest.Leaf{}))
	otherKey := filepath.Join(dir, "other.key")
	certtest.WriteFile(t, otherKey, ca.Issue(t, certtest.Leaf{}).KeyPEM)
	expired := ca.Write(t, t.TempDir(), ca.Issue(t, certtest.Leaf{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}))
	missing := filepath.Join(dir, "missing")
	const secret = "hunter2-hunter2-hunter2"
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--redis", "127.0.0.1:6379", "--redis-password", secret}, 2, "--redis-password: a secret is not given on the command line, where every user of the machine can read it (ps, /proc/PID/cmdline) and the shell keeps it in its history; give --redis-password-file FILE (a file holding it) or --redis-password-env VAR"},
		{[]string{"--admin-token=" + secret}, 2, "--admin-token: a secret is not given on the command line"},
		{[]string{"--redis", "127.0.0.1:6379", "--key-hmac", secret}, 2, "--key-hmac: a secret is not given on the command line"},
		{[]string{"--redis-sentinel-master", "m", "--redis-sentinel-addrs", "127.0.0.1:26379", "--redis-sentinel-password", secret}, 2, "--redis-sentinel-password: a secret is not given"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-password-file", "/x", "--redis-password-env", "X"}, 2, "--redis-password-file and --redis-password-env: give one"},
		{[]string{"--redis-username", "sluice"}, 2, "--redis-username configures the Redis connection: give --redis (or --redis-sentinel-master) too"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-username", "sluice"}, 2, `--redis-username: "sluice" needs its password`},
		{[]string{"--redis", "redis://u:" + secret + "@127.0.0.1:6379"}, 2, "--redis: a URL (not repeated here: it may hold a password)"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-sentinel-master", "m", "--redis-sentinel-addrs", "127.0.0.1:26379"}, 2, "--redis-sentinel-master: addresses and a Sentinel are both given: give one"},
		{[]string{"--redis-sentinel-master", "m"}, 2, "--redis-sentinel-addrs: the Sentinels' addresses are required"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-sentinel-password-file", missing}, 2, "--redis-sentinel-master: addresses and a Sentinel are both given"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-sentinel-username", "bob"}, 2, "--redis-sentinel-master: addresses and a Sentinel are both given"},
		{[]string{"--redis", "127.0.0.1:6379,127.0.0.1:6380", "--redis-db", "2"}, 2, "--redis-db: 2 with 2 addresses (a Cluster): a Cluster has only database 0"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-tls-key-file", otherKey}, 2, "--redis-tls-cert-file: a client key needs its certificate"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-tls-server-name", "rediss://x"}, 2, "--redis-tls-server-name: \"rediss://x\": a host name or an IP address"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-timeout", "0s"}, 2, "--redis-timeout 0s: must be positive"},
		{[]string{"--tls-cert-file", files.Cert}, 2, "--tls-key-file: TLS needs the certificate's key"},
		{[]string{"--tls-cert-file", "", "--tls-key-file", ""}, 2, "--tls-cert-file is given empty: give a file or a variable, or leave the flag out"},
		{[]string{"--admin-token-env="}, 2, "--admin-token-env is given empty"},
		{[]string{"--tls-min-version", "1.1", "--tls-cert-file", files.Cert, "--tls-key-file", files.Key}, 2, `--tls-min-version: "1.1": 1.2 or 1.3`},
		{[]string{"--tls-client-auth", "grpc"}, 2, "--tls-client-auth needs --tls-client-ca-file"},
		{[]string{"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-client-ca-file", files.CA, "--tls-client-auth", "grpc,ftp"}, 2, `--tls-client-auth "ftp": grpc, http or admin`},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-password-file", missing}, 1, "--redis-password-file: Redis password (file " + missing + "): no such file"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-password-env", "SLUICE_TEST_SURELY_UNSET"}, 1, "--redis-password-env: Redis password (environment variable SLUICE_TEST_SURELY_UNSET): the variable is not set"},
		{[]string{"--admin-token-file", missing}, 1, "--admin-token-file: admin token (file " + missing + "): no such file"},
		{[]string{"--redis", "127.0.0.1:6379", "--redis-tls-ca-file", missing}, 1, "--redis-tls-ca-file: CA file " + missing + ": no such file"},
		{[]string{"--tls-cert-file", files.Cert, "--tls-key-file", otherKey}, 1, "key file " + otherKey + ": not the key of the certificate in " + files.Cert},
		{[]string{"--tls-cert-file", expired.Cert, "--tls-key-file", expired.Key}, 1, "certificate file " + expired.Cert + ": the certificate (CN=localhost) expired on"},
		{[]string{"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-client-ca-file", missing}, 1, "client CA file " + missing + ": no such file"},
	} {
		cfg := t.TempDir()
		if err := os.WriteFile(filepath.Join(cfg, "edge.yaml"), []byte("domain: edge\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"serve", "check"} {
			args := append([]string{cmd, "--config", cfg, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, c.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var out, errOut logtest.Buffer
			code := Main(ctx, args, &out, &errOut)
			cancel()
			if code != c.code || !strings.Contains(errOut.String(), c.says) || strings.Contains(out.String()+errOut.String(), secret) {
				t.Errorf("sluice %s %q: exit %d, stderr %q; want exit %d saying %q, never the secret", cmd, c.args, code, errOut.String(), c.code, c.says)
			}
		}
	}
}

// A named pipe given as the configuration is refused at once by every
// command (opening it to read would wait for a writer, and a process
// waiting there ignored SIGTERM).
func TestConfigNamedPipe(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "config.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", fifo}, {"serve", "--config", fifo}, {"gateway", "--config", fifo}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out, errOut logtest.Buffer
		start := time.Now()
		code := Main(ctx, args, &out, &errOut)
		cancel()
		if code != 1 || !strings.Contains(errOut.String(), "not a regular file") || time.Since(start) > 5*time.Second {
			t.Errorf("sluice %v: exit %d after %v, stderr %q; want exit 1 at once, saying it is not a regular file", args, code, time.Since(start), errOut.String())
		}
	}
}

// --leases: a file of limits to decide on leases in Redis. It needs
// --redis (a usage error), must parse (its file and line) and must name
// token_bucket or gcra limits of the configuration; sluice check says the
// same as serve, before anything starts.
func TestServeLeasesFlag(t *testing.T) {
	t.Parallel()
	cfg := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - {key: generic_key, value: global, rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket}}\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "limits:\n  - name: edge.generic_key_global\n    partitions: 4\n")
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--leases", good}, 2, "--leases " + good + ": the leases are held in Redis: give --redis"},
		{[]string{"--redis", "127.0.0.1:6379", "--leases", filepath.Join(dir, "missing.yaml")}, 1, "missing.yaml"},
		{[]string{"--redis", "127.0.0.1:6379", "--leases", write("bad.yaml", "limits:\n  - name: edge.generic_key_global\n    partitons: 4\n")}, 1, "bad.yaml:3: field partitons not found"},
		{[]string{"--redis", "127.0.0.1:6379", "--leases", write("unknown.yaml", "limits:\n  - name: edge.nothing\n")}, 1, "limit edge.nothing is leased, but no rule of the configuration"},
		{[]string{"--redis", "127.0.0.1:6379", "--leases", write("window.yaml", "limits:\n  - name: edge.k\n")}, 1, "a leased limit is a token_bucket or gcra, not fixed_window"},
	} {
		for _, cmd := range []string{"serve", "check"} {
			args := append([]string{cmd, "--config", cfg, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, c.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var out, errOut logtest.Buffer
			code := Main(ctx, args, &out, &errOut)
			cancel()
			if code != c.code || !strings.Contains(errOut.String(), c.says) {
				t.Errorf("sluice %s %q: exit %d, stderr %q; want exit %d saying %q", cmd, c.args, code, errOut.String(), c.code, c.says)
			}
		}
	}
	var out, errOut logtest.Buffer
	if code := Main(context.Background(), []string{"check", "--config", cfg, "--redis", "127.0.0.1:6379", "--leases", good}, &out, &errOut); code != 0 {
		t.Errorf("sluice check with good leases: exit %d, %s%s", code, out.String(), errOut.String())
	}
}
