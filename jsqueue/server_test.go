package jsqueue_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// server is a nats-server process a test started: its own port, its own
// storage directory, killed when the test ends.
type server struct {
	t    testing.TB
	name string
	args []string
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startServer starts nats-server with JetStream on a free port, with
// storage in a directory of the test, and extra arguments.
func startServer(t testing.TB, name string, port int, extra ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		unavailable(t, "nats-server is not installed")
	}
	dir := filepath.Join(t.TempDir(), name)
	args := append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir, "-n", name}, extra...)
	s := &server{t: t, name: name, args: append([]string{bin}, args...), url: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.args[0], s.args[1:]...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.name, err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(s.url, nats.Timeout(200*time.Millisecond), nats.NoReconnect())
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s does not answer at %s: %v", s.name, s.url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to end.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// waitJetStream waits until url's JetStream can place a stream of the
// replicas given (a cluster has elected its meta leader and sees its
// peers).
func waitJetStream(t testing.TB, url string, replicas int) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "probe", Replicas: replicas, Storage: jetstream.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(ctx, "probe")
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream at %s does not answer: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
