// Package redistest gives tests real Redis servers: the shared one of the
// environment (SLUICE_REDIS_ADDR), servers a test starts and kills itself,
// a Redis Cluster of test-owned nodes, and a TCP proxy that can blackhole
// the traffic to one. Nothing here is a mock.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Addr returns the address of the environment's Redis (SLUICE_REDIS_ADDR,
// default 127.0.0.1:6379). When none answers, the test is skipped, loudly,
// or, when CI is set, fails.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("SLUICE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if err := ping(addr); err != nil {
		unavailable(t, fmt.Sprintf("Redis at %s (SLUICE_REDIS_ADDR): %v", addr, err))
	}
	return addr
}

// Binaries checks that redis-server and redis-cli are installed, skipping
// or (under CI) failing the test otherwise.
func Binaries(t testing.TB) {
	t.Helper()
	for _, b := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(b); err != nil {
			unavailable(t, b+" is not installed")
		}
	}
}

func unavailable(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI: %s; the Redis tests need it", what)
	}
	t.Skipf("SKIPPED, NOT PASSED: %s", what)
}

// ping sends PING and waits for PONG.
func ping(addr string) error {
	line, err := send(addr, "PING")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// answers is nil once a server at addr answers PING at all: PONG, or an
// error such as NOAUTH from one that wants a password.
func answers(addr string) error {
	line, err := send(addr, "PING")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+") && !strings.HasPrefix(line, "-") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// send sends an inline command and returns the first line of the reply.
func send(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// FreePort returns a loopback port free at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Server is a redis-server a test owns.
type Server struct {
	t       testing.TB
	port    int
	tlsPort int // StartTLSServer's; 0 otherwise
	args    []string
	dir     string
	mu      sync.Mutex
	cmd     *exec.Cmd
}

// StartServer starts redis-server on a free loopback port, without
// persistence, with extra arguments; the test's cleanup kills it.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	Binaries(t)
	s := &Server{t: t, port: FreePort(t), args: args, dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// Addr is the server's address.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start (re)starts the server on its port and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir}, s.args...)
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for answers(s.Addr()) != nil {
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer in 10 s", s.Addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL) and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// CLI runs redis-cli against the server and returns its output.
func (s *Server) CLI(args ...string) (string, error) {
	out, err := exec.Command("redis-cli", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port)}, args...)...).CombinedOutput()
	return string(out), err
}

// StartCluster starts n redis-server nodes in cluster mode and joins them
// into a Redis Cluster of n masters with redis-cli --cluster create. It
// returns the nodes' addresses once the cluster state is ok.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	Binaries(t)
	nodes := make([]*Server, n)
	addrs := make([]string, n)
	for i := range nodes {
		dir := t.TempDir()
		nodes[i] = StartServer(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000")
		addrs[i] = nodes[i].Addr()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, node := range nodes {
		for {
			out, _ := node.CLI("cluster", "info")
			if strings.Contains(out, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster not ok after 20 s: %s", out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}

// Proxy forwards TCP connections to a target and can blackhole them: hold
// everything in both directions while keeping the connections open, as a
// network partition does (TCP delivers the held bytes once it heals; it
// does not drop them from a live connection).
type Proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	hole   bool
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// StartProxy listens on a free loopback port and forwards to target.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{l: l, target: target, conns: map[net.Conn]struct{}{}, ctx: ctx, cancel: cancel}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Blackhole stops (true) or resumes (false) forwarding. Bytes sent while
// blackholed are held, and delivered when forwarding resumes.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.hole = on
	p.mu.Unlock()
}

// CutNextReply drops the next bytes Redis sends back, on whichever
// connection, and closes that connection: the command ran, and its caller
// sees the connection fail without a reply (an outcome unknown to it).
// Later connections are forwarded as usual.
func (p *Proxy) CutNextReply() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

func (p *Proxy) takeCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cut := p.cut
	p.cut = false
	return cut
}

func (p *Proxy) blackholed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hole
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.cancel()
	p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(in, out, false) })
		p.wg.Go(func() { p.pipe(out, in, true) })
	}
}

func (p *Proxy) pipe(from, to net.Conn, replies bool) {
	defer func() {
		from.Close()
		to.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		for p.blackholed() && p.ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		if n > 0 && replies && p.takeCut() {
			return // the deferred closes cut both sides
		}
		if n > 0 {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Impostor starts a TCP server on a free loopback port that is not Redis:
// each connection is handed to serve, then closed. For tests of what a
// client does with a server that says something else, or nothing. The
// test's cleanup stops it and waits for its goroutines.
func Impostor(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { l.Close() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			serve(c)
			c.Close()
		}
	})
	return l.Addr().String()
}
