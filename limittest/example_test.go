package limittest_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
)

// A store's conformance test: Run builds a fresh store per subtest, reading
// the suite's fake clock.
func ExampleRun() {
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		limittest.Run(t, func(t *testing.T, now func() time.Time) sluice.Limiter {
			s, err := memstore.New(memstore.Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	}
}
