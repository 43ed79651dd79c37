package etcdlease_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The tests run against real etcd servers: Debian's etcd-server package
// (`apt-get install etcd-server`, which .ci/run does) puts the etcd binary
// on the PATH. Without it the tests skip, loudly, or, when CI is set,
// fail.

// shared is the server of the tests that do not stop theirs, started by
// TestMain; nil when there is no etcd binary.
var shared *server

// endpoints are shared's client URLs: where Example connects.
var endpoints []string

// noEtcd says why there is no etcd ("" when there is).
var noEtcd string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		noEtcd = "no etcd binary on the PATH (apt-get install etcd-server): " + err.Error()
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "CI: "+noEtcd+"; the etcdlease tests need it")
			return 1
		}
		fmt.Fprintln(os.Stderr, "etcdlease: SKIPPED, NOT PASSED: "+noEtcd)
		// The example needs a server and cannot skip: run the tests only.
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			_ = flag.Set("test.run", "^Test")
		}
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "etcdlease-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	shared, err = startServer(bin, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdlease: start etcd:", err)
		return 1
	}
	endpoints = []string{shared.clientURL}
	code := m.Run()
	shared.stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// needEtcd returns the etcd binary, or skips t (fails it under CI).
func needEtcd(t *testing.T) string {
	t.Helper()
	if noEtcd != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %s; the etcdlease tests need it", noEtcd)
		}
		t.Skipf("SKIPPED, NOT PASSED: %s", noEtcd)
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// server is an etcd process of one member, on loopback ports.
type server struct {
	bin, dir           string
	clientURL, peerURL string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd ended
	log    bytes.Buffer  // the process's output, guarded by mu
}

// startServer starts etcd with its data in dir, on two free ports.
func startServer(bin, dir string) (*server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &server{
		bin: bin, dir: dir,
		clientURL: "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		peerURL:   "http://127.0.0.1:" + strconv.Itoa(ports[1]),
	}
	return s, s.start()
}

// start runs the process (again, after kill or stop) and waits until it
// answers.
func (s *server) start() error {
	cmd := exec.Command(s.bin,
		"--name", "sluice-test",
		"--data-dir", s.dir,
		"--listen-client-urls", s.clientURL,
		"--advertise-client-urls", s.clientURL,
		"--listen-peer-urls", s.peerURL,
		"--initial-advertise-peer-urls", s.peerURL,
		"--initial-cluster", "sluice-test="+s.peerURL,
		"--initial-cluster-state", "new",
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--logger", "zap",
		"--log-level", "error",
	)
	cmd.SysProcAttr = sysProcAttr()
	s.mu.Lock()
	cmd.Stdout, cmd.Stderr = lockedWriter{s}, lockedWriter{s}
	s.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if s.healthy() {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("etcd exited: %s", s.output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("etcd did not answer on %s in 20s: %s", s.clientURL, s.output())
		}
	}
}

// healthy reports whether the server answers its health check.
func (s *server) healthy() bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(s.clientURL + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	return resp.StatusCode == http.StatusOK && bytes.Contains(body.Bytes(), []byte(`"health":"true"`))
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (s *server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// stop ends the process with SIGTERM (SIGKILL after 5 s) and waits for it.
func (s *server) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

type lockedWriter struct{ s *server }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.log.Write(p)
}

// newServer starts a server of t's own, stopped when t ends.
func newServer(t *testing.T) *server {
	t.Helper()
	s, err := startServer(needEtcd(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// sharedServer returns the server TestMain started, or skips t.
func sharedServer(t *testing.T) *server {
	t.Helper()
	needEtcd(t)
	return shared
}

// newClient returns a client of s, closed when t ends.
func newClient(t *testing.T, s *server) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.clientURL},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// freePorts returns n loopback ports free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// errorWithin runs f and fails t unless it returns an error within d.
func errorWithin(t *testing.T, what string, d time.Duration, f func(context.Context) error) {
	t.Helper()
	start := time.Now()
	err := f(t.Context())
	took := time.Since(start)
	if err == nil {
		t.Fatalf("%s with etcd down: no error", what)
	}
	if took > d {
		t.Errorf("%s with etcd down: error after %v, want within %v: %v", what, took, d, err)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("%s with etcd down: %v (the test's context was cancelled?)", what, err)
	}
	t.Logf("%s with etcd down: %v after %v", what, err, took.Round(time.Millisecond))
}
