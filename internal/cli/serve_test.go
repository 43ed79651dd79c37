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
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

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
		{[]string{"--redis", "127.0.0.1:6379,localhost"}, `sluice serve: --redis: "localhost": host:port, e.g. 127.0.0.1:8080 or [::1]:8080 (Redis listens on 6379 by default)`},
	} {
		code, out, errOut := run(append([]string{"serve", "--config", t.TempDir()}, c.args...)...)
		if code != 2 || !strings.HasPrefix(errOut, c.says) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, stderr starting %q", c.args, code, out, errOut, c.says)
		}
	}
}
