package leasetest_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/leasetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bugEnv names the rule the reference Coordinator breaks in a run of
// TestReference that TestSuiteCatchesEachBug starts.
const bugEnv = "LEASETEST_BUG"

// TestReference runs the suite against the reference Coordinator: it
// passes, unless bugEnv breaks one rule.
func TestReference(t *testing.T) {
	bug := os.Getenv(bugEnv)
	leasetest.Run(t, func(t *testing.T) lease.Coordinator { return newRef(bug) })
}

// TestSuiteCatchesEachBug breaks one rule of the reference Coordinator
// at a time and checks that the case meant to notice it fails: each case
// of the suite can fail, and does on the bug it is there for.
func TestSuiteCatchesEachBug(t *testing.T) {
	if testing.Short() {
		t.Skip("one test binary per bug: not in -short")
	}
	for _, b := range []struct{ bug, caught string }{
		{"no-validation", "BadInput"},
		{"ignore-context", "Cancelled"},
		{"always-free", "Acquire"},
		{"acquire-all-free", "Acquire"},
		{"members-unsorted", "Acquire"},
		{"member-keeps-old-want", "Acquire"},
		{"racy", "Exclusive"},
		{"renew-any-epoch", "Renew"},
		{"renew-any-member", "Renew"},
		{"renew-does-not-extend", "RenewExtends"},
		{"stale-renew-extends", "StaleRenewDoesNotExtend"},
		{"release-ignored", "Release"},
		{"release-any-epoch", "Release"},
		{"taken-over-always", "Release"},
		{"never-lapse", "Takeover"},
		{"taken-over-never", "Takeover"},
		{"takeover-keeps-epoch", "Takeover"},
		{"takeover-keeps-epoch", "Epochs"},
		{"renew-lapsed-fails", "SelfReclaim"},
		{"members-never-lapse", "MemberLapse"},
		{"leave-keeps-member", "Leave"},
		{"one-group", "Groups"},
	} {
		t.Run(b.caught+"/"+b.bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestReference$/^"+b.caught+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), bugEnv+"="+b.bug)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if err == nil {
				t.Fatalf("the suite passed a Coordinator with bug %s:\n%s", b.bug, out.String())
			}
			if !strings.Contains(out.String(), "--- FAIL: TestReference/"+b.caught+" ") {
				t.Fatalf("bug %s: case %s did not fail (%v):\n%s", b.bug, b.caught, err, out.String())
			}
		})
	}
}
