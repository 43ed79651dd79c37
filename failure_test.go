package sluice_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
)

func TestFailurePolicyText(t *testing.T) {
	for _, p := range []sluice.FailurePolicy{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		b, err := p.MarshalText()
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		var back sluice.FailurePolicy
		if err := back.UnmarshalText(b); err != nil || back != p || string(b) != p.String() {
			t.Fatalf("%v: round trip gave %v, %q, %v", p, back, b, err)
		}
	}
	if sluice.FailOpen.String() != "fail_open" || sluice.FailClosed.String() != "fail_closed" || sluice.FailLocal.String() != "fail_local" {
		t.Fatal("names changed")
	}
	for _, bad := range []string{"", "open", "FAIL_OPEN", "fail_open ", "fail_local\x00"} {
		var p sluice.FailurePolicy
		err := p.UnmarshalText([]byte(bad))
		if !errors.Is(err, sluice.ErrUnknownFailurePolicy) {
			t.Fatalf("%q: %v, want ErrUnknownFailurePolicy", bad, err)
		}
	}
	if _, err := sluice.FailurePolicy(3).MarshalText(); err == nil || sluice.FailurePolicy(3).Valid() {
		t.Fatal("policy 3 marshalled")
	}
	if got := sluice.FailurePolicy(7).String(); got != "failure_policy(7)" {
		t.Fatal(got)
	}
}
