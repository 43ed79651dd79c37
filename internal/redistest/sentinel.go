package redistest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SentinelOptions configures StartSentinels.
type SentinelOptions struct {
	// Name is the master's name under the Sentinels. Default "sluice".
	Name string
	// Sentinels is how many Sentinels monitor it (quorum: a majority).
	// Default 1.
	Sentinels int
	// Password, when set, is Redis's requirepass (and masterauth, so
	// that replication survives a failover); the Sentinels are told it.
	Password string
	// SentinelPassword, when set, is the Sentinels' own requirepass.
	SentinelPassword string
}

// Sentinels is a Redis Sentinel setup a test owns: a master, one replica
// and the Sentinels monitoring them, each a process on a free loopback
// port, killed by the test's cleanup.
type Sentinels struct {
	t         testing.TB
	opts      SentinelOptions
	Master    *Server
	Replica   *Server
	sentinels []*sentinel
}

// StartSentinels starts the setup and returns once every Sentinel knows
// the master and its replica (a failover can then be forced).
func StartSentinels(t testing.TB, opts SentinelOptions) *Sentinels {
	t.Helper()
	Binaries(t)
	if opts.Name == "" {
		opts.Name = "sluice"
	}
	if opts.Sentinels == 0 {
		opts.Sentinels = 1
	}
	var auth []string
	if opts.Password != "" {
		auth = []string{"--requirepass", opts.Password, "--masterauth", opts.Password}
	}
	s := &Sentinels{t: t, opts: opts}
	s.Master = StartServer(t, auth...)
	s.Replica = StartServer(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Master.port)}, auth...)...)
	quorum := opts.Sentinels/2 + 1
	for range opts.Sentinels {
		s.sentinels = append(s.sentinels, s.startSentinel(quorum))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, sn := range s.sentinels {
		for {
			out, _ := sn.cli("SENTINEL", "REPLICAS", opts.Name)
			master, _ := sn.cli("SENTINEL", "GET-MASTER-ADDR-BY-NAME", opts.Name)
			// The replica known, in sync (a failover needs one), and the
			// master named.
			if strings.Contains(out, strconv.Itoa(s.Replica.port)) && strings.Contains(out, "master-link-status\nok") &&
				strings.Contains(master, strconv.Itoa(s.Master.port)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Sentinel %s does not know the master and its replica after 30 s: %q / %q", sn.addr(), master, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return s
}

// Name is the master's name.
func (s *Sentinels) Name() string { return s.opts.Name }

// Addrs are the Sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.addr()
	}
	return addrs
}

// MasterAddr is the master's address as the first Sentinel reports it.
func (s *Sentinels) MasterAddr() string {
	s.t.Helper()
	out, err := s.sentinels[0].cli("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.opts.Name)
	if err != nil {
		s.t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME: %v: %s", err, out)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		s.t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME answered %q", out)
	}
	return f[0] + ":" + f[1]
}

// Failover forces a failover (SENTINEL FAILOVER) and returns once the
// first Sentinel names the new master, with its address. The former
// master becomes its replica.
func (s *Sentinels) Failover() string {
	s.t.Helper()
	before := s.MasterAddr()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// NOGOODSLAVE: the Sentinel has not seen the replica's last INFO
		// yet; it asks every 10 s at most, or 1 s during a failover.
		out, err := s.sentinels[0].cli("SENTINEL", "FAILOVER", s.opts.Name)
		if err == nil && strings.Contains(out, "OK") {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(out, "NOGOODSLAVE") {
			s.t.Fatalf("SENTINEL FAILOVER: %v: %s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		if after := s.MasterAddr(); after != before {
			return after
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no new master 30 s after SENTINEL FAILOVER")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Server returns the Server (Master or Replica) at addr.
func (s *Sentinels) Server(addr string) *Server {
	for _, srv := range []*Server{s.Master, s.Replica} {
		if srv.Addr() == addr {
			return srv
		}
	}
	s.t.Fatalf("no server of the setup at %s", addr)
	return nil
}

// sentinel is one redis-server --sentinel process.
type sentinel struct {
	t        testing.TB
	port     int
	password string
	mu       sync.Mutex
	cmd      *exec.Cmd
}

func (s *Sentinels) startSentinel(quorum int) *sentinel {
	t := s.t
	t.Helper()
	dir := t.TempDir()
	sn := &sentinel{t: t, port: FreePort(t), password: s.opts.SentinelPassword}
	conf := []string{
		fmt.Sprintf("port %d", sn.port),
		"bind 127.0.0.1",
		"dir " + dir,
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", s.opts.Name, s.Master.port, quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s 1000", s.opts.Name),
		fmt.Sprintf("sentinel failover-timeout %s 5000", s.opts.Name),
	}
	if s.opts.Password != "" {
		conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", s.opts.Name, s.opts.Password))
	}
	if s.opts.SentinelPassword != "" {
		conf = append(conf, "requirepass "+s.opts.SentinelPassword, "sentinel sentinel-pass "+s.opts.SentinelPassword)
	}
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", path, "--sentinel")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server --sentinel: %v", err)
	}
	sn.cmd = cmd
	t.Cleanup(sn.kill)
	deadline := time.Now().Add(10 * time.Second)
	for answers(sn.addr()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Sentinel on %s did not answer in 10 s", sn.addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sn
}

func (sn *sentinel) addr() string { return "127.0.0.1:" + strconv.Itoa(sn.port) }

func (sn *sentinel) cli(args ...string) (string, error) {
	base := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(sn.port)}
	if sn.password != "" {
		base = append(base, "--no-auth-warning", "-a", sn.password)
	}
	out, err := exec.Command("redis-cli", append(base, args...)...).CombinedOutput()
	return string(out), err
}

func (sn *sentinel) kill() {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.cmd != nil {
		_ = sn.cmd.Process.Kill()
		_ = sn.cmd.Wait()
		sn.cmd = nil
	}
}
