package lease_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/lease"
)

// FuzzParseFence: ParseFence never panics; what it refuses wraps
// ErrInvalid; what it accepts is a Spend a target can check (an epoch from
// 1, a partition below MaxPartitions) and formats back to the very
// string it was read from, so that one fence has one spelling.
func FuzzParseFence(f *testing.F) {
	for _, s := range []string{
		"1 0 g", "9 3 openai-tokens", "18446744073709551615 1023 a_b-c.d:e/f", "18446744073709551616 0 g",
		"", " ", "5 3", "0 3 g", "05 3 g", "+5 3 g", "5 +3 g", "5 03 g", "5 -0 g", "-0 0 g", "5 3 g h", "5  3 g",
		"5 3 g\x00", "5 3 é", "5\t3\tg", "5 1024 g",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := lease.ParseFence(v)
		if err != nil {
			if !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("ParseFence(%q): %v does not wrap ErrInvalid", v, err)
			}
			return
		}
		if s.Epoch == 0 || s.Partition < 0 || s.Partition >= lease.MaxPartitions || s.Group == "" {
			t.Fatalf("ParseFence(%q) = %+v: not a Spend a holder makes", v, s)
		}
		if back := lease.FormatFence(s); back != v {
			t.Fatalf("ParseFence(%q) = %+v, which formats as %q", v, s, back)
		}
	})
}
