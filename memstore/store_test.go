package memstore_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
		s, err := memstore.New(memstore.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
