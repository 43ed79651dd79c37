package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/certtest"
	"github.com/sluicehq/sluice/internal/redisconfig"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/tlsconfig"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/server"
)

const (
	redisPassword = "redis-acl-password-for-serve-4f1"
	wrongPassword = "a-wrong-password-for-serve-93a"
)

// secretFile writes a secret into a file of its own.
func secretFile(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// sluice serve on a Redis that speaks TLS only to clients it trusts and
// has an ACL user: the right settings decide over gRPC (a quota of 2 from
// Redis: OK, OK, OVER_LIMIT); a wrong password, an unknown user, a CA
// that did not sign Redis's certificate are refused by New with the
// reason — under every failure policy, since waiting does not heal them.
func TestServeOnSecureRedis(t *testing.T) {
	t.Parallel()
	ca := certtest.NewCA(t, "redis CA")
	files := ca.Write(t, t.TempDir(), ca.Issue(t, certtest.Leaf{}))
	srv := redistest.StartTLSServer(t, redistest.TLSFiles{Cert: files.Cert, Key: files.Key, CA: files.CA}, false,
		"--user", "sluice", "on", ">"+redisPassword, "resetkeys", "~sluice:*", "resetchannels", "-@all",
		"+evalsha", "+eval", "+ping", "+get", "+set", "+del", "+time")
	other := certtest.NewCA(t, "another CA")
	otherCA := filepath.Join(t.TempDir(), "other-ca.crt")
	certtest.WriteFile(t, otherCA, other.PEM)
	good := redisconfig.Connection{Addrs: []string{srv.TLSAddr()}, Username: "sluice", PasswordFile: secretFile(t, redisPassword), TLS: &tlsconfig.Client{CAFile: files.CA}}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(config(2)), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(conn redisconfig.Connection, policy sluice.FailurePolicy) (*server.Server, error) {
		return server.New(server.Options{Load: server.EnvoyLoader(dir), Redis: &conn, RedisPolicy: policy, RedisTimeout: redisTimeout(),
			HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"})
	}

	s, err := open(good, sluice.FailClosed)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	gc, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	key := strings.ReplaceAll(t.Name(), "/", "-")
	for i, want := range []rlpb.RateLimitResponse_Code{rlpb.RateLimitResponse_OK, rlpb.RateLimitResponse_OK, rlpb.RateLimitResponse_OVER_LIMIT} {
		resp, err := rlpb.NewRateLimitServiceClient(gc).ShouldRateLimit(context.Background(), request(key))
		if err != nil || resp.OverallCode != want {
			t.Fatalf("call %d on Redis over TLS as an ACL user: %v %v, want %v (fail_closed would refuse all)", i, resp, err, want)
		}
	}

	wrongPass, unknownUser, wrongCA := good, good, good
	wrongPass.PasswordFile = secretFile(t, wrongPassword)
	unknownUser.Username = "nobody"
	wrongCA.TLS = &tlsconfig.Client{CAFile: otherCA}
	for _, c := range []struct {
		name string
		conn redisconfig.Connection
		says string
	}{
		{"a wrong password", wrongPass, "WRONGPASS"},
		{"an unknown user", unknownUser, `AUTH as "nobody"`},
		{"a CA that did not sign Redis's certificate", wrongCA, "certificate signed by unknown authority"},
	} {
		for _, policy := range []sluice.FailurePolicy{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
			s, err := open(c.conn, policy)
			if err == nil {
				s.Close()
				t.Errorf("%s, %v: New started", c.name, policy)
				continue
			}
			if !errors.Is(err, redisstore.ErrMisconfigured) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), wrongPassword) || strings.Contains(err.Error(), redisPassword) {
				t.Errorf("%s, %v: %v; want ErrMisconfigured saying %q, without a password", c.name, policy, err, c.says)
			}
		}
	}
}
