package memlease_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/leasetest"
	"github.com/sluicehq/sluice/memlease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) lease.Coordinator { return memlease.New(nil) })
}
