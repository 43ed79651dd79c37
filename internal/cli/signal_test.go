package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/certtest"
)

// childArgs, when set (by a test starting this test binary again), makes
// the process sluice itself: Main on those arguments (tab-separated),
// stopped by SIGINT or SIGTERM as cmd/sluice's main does.
const childArgs = "SLUICE_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childArgs); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, strings.Split(args, "\t"), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// sluiceProcess runs sluice with args in a process of its own and returns
// it with its stderr, line by line.
func sluiceProcess(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(args, "\t"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, lines
}

// waitLine waits for a line of stderr holding want, failing the test
// after 10 s or when the process ends.
func waitLine(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the process ended before a line saying %q", want)
			}
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line saying %q in 10 s", want)
		}
	}
}

// SIGHUP reloads, it does not stop: sluice serve reloads its
// configuration and its certificate, the gateway its certificates; both
// then stop gracefully on SIGTERM (exit 0).
func TestHangupReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	files := ca.Write(t, dir, ca.Issue(t, certtest.Leaf{}))
	cfg := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfg, []byte("domain: edge\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(gw, []byte(fmt.Sprintf("listen: 127.0.0.1:0\nupstream: http://127.0.0.1:1\ntls: {cert_file: %s, key_file: %s}\nadmin: {listen: 127.0.0.1:0}\nlimits: [{name: l, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: l, key: ip}]}]\n", files.Cert, files.Key)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, ready string
		args        []string
	}{
		{"serve", `"msg":"serving"`, []string{"serve", "--config", cfg, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--tls-cert-file", files.Cert, "--tls-key-file", files.Key}},
		{"gateway", `"msg":"gateway listening"`, []string{"gateway", "--config", gw}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cmd, lines := sluiceProcess(t, c.args...)
			waitLine(t, lines, c.ready)
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			waitLine(t, lines, `"msg":"TLS certificate loaded"`)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("after SIGHUP then SIGTERM: %v; want a graceful exit 0", err)
			}
		})
	}
}
