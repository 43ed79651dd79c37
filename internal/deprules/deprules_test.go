package deprules

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice"

// adapters says, for each heavy dependency (an import path prefix), the
// only packages of the module that may import it directly.
var adapters = []struct {
	dep  string
	only []string
}{
	{"github.com/redis/rueidis", []string{"redisstore"}},
	{"github.com/redis/go-redis/", []string{"redisstore/goredis"}},
	{"google.golang.org/grpc", []string{"rls", "grpclimit"}},
	{"github.com/envoyproxy/go-control-plane/", []string{"rls"}},
	{"github.com/prometheus/", []string{"metrics"}},
	{"github.com/spf13/cobra", []string{"internal/cli"}},
	{"github.com/fsnotify/fsnotify", []string{"internal/filewatch"}},
	{"go.etcd.io/bbolt", []string{"boltqueue"}},
	{"go.etcd.io/etcd/", []string{"etcdlease"}},
	{"github.com/nats-io/", []string{"jsqueue"}},
	{"github.com/schollz/progressbar/", []string{"internal/cli"}},
	{"github.com/chromedp/", []string{"relay/console"}},
	{"gonum.org/v1/plot", []string{"sim/simplot"}},
}

// leanUsers says what a package taken alone must not compile: neither the
// listed import path prefixes nor anything below them.
var leanUsers = []struct {
	pkg   string
	never []string
}{
	// A go-redis user does not compile rueidis; the scripts and the store
	// that runs them compile no Redis client at all.
	{"redisscript", []string{"github.com/redis/"}},
	{"redisstore/goredis", []string{"github.com/redis/rueidis"}},
	// Prometheus for an httplimit user drags in no store and no client.
	{"metrics", []string{module + "/redisstore", module + "/memstore", module + "/pace", "github.com/redis/", "google.golang.org/grpc"}},
	// The HTTP middleware: no gRPC, no Redis client, no Prometheus.
	{"httplimit", []string{"google.golang.org/grpc", "github.com/redis/", "github.com/prometheus/", "github.com/envoyproxy/"}},
	// The gRPC middleware: no Redis client, no Prometheus, no Envoy.
	{"grpclimit", []string{"github.com/redis/", "github.com/prometheus/", "github.com/envoyproxy/"}},
	// The client pacer: no server side at all.
	{"pace", []string{"google.golang.org/grpc", "github.com/redis/", "github.com/prometheus/", "github.com/envoyproxy/"}},
	// The queue's contract and its suite compile no backend; the embedded
	// queue compiles no NATS, the fleet queue no bbolt.
	{"queue", []string{"go.etcd.io/bbolt", "github.com/nats-io/", "github.com/redis/", "google.golang.org/grpc"}},
	{"queuetest", []string{"go.etcd.io/bbolt", "github.com/nats-io/", "github.com/redis/", "google.golang.org/grpc"}},
	{"jsqueue", []string{"go.etcd.io/bbolt", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/"}},
	{"boltqueue", []string{"github.com/nats-io/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/"}},
	// What the relay may send to: the standard library alone.
	{"egress", []string{"go.etcd.io/bbolt", "github.com/nats-io/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/"}},
	// The relay and its adapters compile no backend (they come in through
	// Options.Open) and no Prometheus (the command registers the metrics).
	{"relay", []string{"go.etcd.io/bbolt", "github.com/nats-io/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/"}},
	// The relay's file reads the fleet's Redis connection (the shape every
	// sluice file shares, internal/redisconfig, which builds redisstore's
	// dial options): Redis's client, nothing else.
	{"relay/config", []string{"go.etcd.io/bbolt", "github.com/nats-io/", "google.golang.org/grpc", "github.com/prometheus/"}},
	{"relay/httpapi", []string{"go.etcd.io/bbolt", "github.com/nats-io/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/"}},
	{"relay/console", []string{"go.etcd.io/bbolt", "github.com/nats-io/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/", "github.com/chromedp/"}},
	// The fleet's contract and its in-memory Coordinator: no client at all;
	// the Redis Coordinator compiles the scripts' runner, not a client.
	{"lease", []string{"go.etcd.io/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/", "github.com/nats-io/"}},
	{"memlease", []string{"go.etcd.io/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/"}},
	{"leasetest", []string{"go.etcd.io/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/"}},
	{"redislease", []string{"github.com/redis/", "go.etcd.io/etcd", "github.com/prometheus/"}},
	{"redisbucket", []string{"github.com/redis/", "go.etcd.io/etcd", "github.com/prometheus/"}},
	// The simulator: the standard library, sluice and memstore; its plots
	// are simplot's.
	{"sim", []string{"gonum.org/", "github.com/spf13/", "github.com/redis/", "google.golang.org/grpc", "github.com/prometheus/"}},
	// The in-process store.
	{"memstore", []string{"google.golang.org/grpc", "github.com/redis/", "github.com/prometheus/", "github.com/envoyproxy/"}},
}

func TestHeavyDependenciesHaveOneAdapter(t *testing.T) {
	imports := goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	for _, line := range strings.Split(strings.TrimSpace(imports), "\n") {
		fields := strings.Fields(line)
		pkg, deps := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/"), fields[1:]
		for _, a := range adapters {
			if slices.Contains(a.only, pkg) {
				continue
			}
			for _, d := range deps {
				if covers(a.dep, d) {
					t.Errorf("%s imports %s: only %s may (docs/DESIGN.md, Dependencies)", pkg, d, strings.Join(a.only, ", "))
				}
			}
		}
	}
}

func TestLeanPackagesCompileNoHeavyClient(t *testing.T) {
	for _, u := range leanUsers {
		deps := strings.Fields(goList(t, "-deps", "-f", "{{.ImportPath}}", module+"/"+u.pkg))
		for _, d := range deps {
			for _, n := range u.never {
				if covers(n, d) {
					t.Errorf("%s compiles %s: it must not (docs/DESIGN.md, Dependencies)", u.pkg, d)
				}
			}
		}
	}
}

// TestRulesMatch is the negative control: the matching the two tests use
// does flag a package that breaks a rule.
func TestRulesMatch(t *testing.T) {
	for _, c := range []struct {
		dep, never string
		want       bool
	}{
		{"github.com/redis/rueidis", "github.com/redis/rueidis", true},
		{"github.com/redis/rueidis/internal/cmds", "github.com/redis/rueidis", true},
		{"github.com/redis/rueidisx", "github.com/redis/rueidis", false},
		{module + "/redisstore/goredis", module + "/redisstore", true},
		{module + "/pacer", module + "/pace", false},
		{"github.com/redis/go-redis/v9", "github.com/redis/", true},
		{"github.com/redis", "github.com/redis/", false},
		{"google.golang.org/grpcx", "google.golang.org/grpc", false},
	} {
		if got := covers(c.never, c.dep); got != c.want {
			t.Errorf("%s against %s: %v, want %v", c.dep, c.never, got, c.want)
		}
	}
}

// covers reports whether a rule's import path covers pkg: the path
// itself and every package below it ("a/b" covers "a/b" and "a/b/c", not
// "a/bc"); a rule ending in "/" covers only what is below it.
func covers(rule, pkg string) bool {
	if strings.HasSuffix(rule, "/") {
		return strings.HasPrefix(pkg, rule)
	}
	return pkg == rule || strings.HasPrefix(pkg, rule+"/")
}

// goList runs `go list` at the module's root and returns its output.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}
