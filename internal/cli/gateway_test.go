package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheck(t *testing.T) {
	t.Parallel()
	good := writeFile(t, "good.yaml", "limits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n")
	if code, out, _ := run("check", "-config", good); code != 0 || !strings.Contains(out, "ok (1 limits, 1 rules, memory store, for sluice gateway)") {
		t.Fatalf("good: %d %q", code, out)
	}
	bad := writeFile(t, "bad.yaml", "limits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\nlisten_on: x\n")
	if code, _, errOut := run("check", "-config", bad); code != 1 || !strings.Contains(errOut, `bad.yaml:3: unknown field "listen_on"`) {
		t.Fatalf("bad: %d %q", code, errOut)
	}
	if code, _, _ := run("check"); code != 2 {
		t.Fatalf("no file: %d", code)
	}
}

// The gateway refuses at start, with the line and the reason, a file it
// cannot run.
func TestGatewayRefusesBadConfig(t *testing.T) {
	t.Parallel()
	bad := writeFile(t, "bad.yaml", "limits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: b, key: ip}]}]\n")
	if code, _, errOut := run("gateway", "-config", bad, "-upstream", "http://127.0.0.1:1"); code != 1 || !strings.Contains(errOut, `bad.yaml:2: rule "r": limit "b" is not defined`) {
		t.Fatalf("%d %q", code, errOut)
	}
	if code, _, _ := run("gateway"); code != 2 {
		t.Fatalf("no config: %d", code)
	}
	good := writeFile(t, "good.yaml", "limits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, quotas: [{limit: a, key: ip}]}]\n")
	if code, _, errOut := run("gateway", "-config", good); code != 1 || !strings.Contains(errOut, "no upstream") {
		t.Fatalf("no upstream: %d %q", code, errOut)
	}
}

// The example the README runs stays valid.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	if code, out, errOut := run("check", "../../examples/gateway.yaml"); code != 0 || !strings.Contains(out, "ok (5 limits, 2 rules, memory store, for sluice gateway)") {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
	code, out, errOut := run("check", "../../examples/gateway-fleet.yaml")
	if code != 0 || !strings.Contains(out, "ok (2 limits, 2 rules, redis store, for sluice gateway)") ||
		!strings.Contains(out, `  leases: global, decided in process on partitions leased in Redis under "sluice:lease:"`) {
		t.Fatalf("gateway-fleet.yaml: %d %q %q", code, out, errOut)
	}
	if code, _, _ := run("check", "a.yaml", "b.yaml"); code != 2 {
		t.Fatalf("two files: %d", code)
	}
}
