package lease_test

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/lease"
)

func TestParseFence(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("g", 128)
	for _, c := range []struct {
		in   string
		want lease.Spend
	}{
		{"1 0 g", spend("g", 0, 1)},
		{"9 3 openai-tokens", spend("openai-tokens", 3, 9)},
		{"18446744073709551615 1023 a_b-c.d:e/f", spend("a_b-c.d:e/f", 1023, 1<<64-1)},
		{"5 7 " + long, spend(long, 7, 5)},
		{"18446744073709551615 1023 " + long, spend(long, 1023, 1<<64-1)}, // FormatFence's longest
	} {
		got, err := lease.ParseFence(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseFence(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "want \"<epoch> <partition> <group>\""},
		{"5 3", "want \"<epoch> <partition> <group>\""},
		{"5", "want \"<epoch> <partition> <group>\""},
		{"0 3 g", "epoch is not a positive decimal integer"},
		{"05 3 g", "epoch is not a positive decimal integer"},
		{"+5 3 g", "epoch is not a positive decimal integer"},
		{"-5 3 g", "epoch is not a positive decimal integer"},
		{"18446744073709551616 3 g", "epoch is not a positive decimal integer"},
		{"0x5 3 g", "epoch is not a positive decimal integer"},
		{" 5 3 g", "epoch is not a positive decimal integer"},
		{"5 1024 g", "partition is not a decimal integer from 0 to 1023"},
		{"5 -1 g", "partition is not a decimal integer from 0 to 1023"},
		{"5 03 g", "partition is not a decimal integer from 0 to 1023"},
		{"5 +3 g", "partition is not a decimal integer from 0 to 1023"},
		{"5  3 g", "partition is not a decimal integer from 0 to 1023"},
		{"5 3 ", "fence group"},
		{"5 3 g h", "fence group"},
		{"5 3 g\x00", "fence group"},
		{"5 3 " + long + "g", "fence group"},
		{strings.Repeat("1", 200), "too long"},
	} {
		_, err := lease.ParseFence(c.in)
		if err == nil || !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFence(%q) = %v, want an ErrInvalid saying %q", c.in, err, c.want)
		}
	}
}

// What a Holder sends a target reads back: FormatFence of any Spend a
// Holder can make (an epoch from 1, a partition below MaxPartitions, a
// valid group name) parses to the same Spend.
func TestFormatFenceParses(t *testing.T) {
	t.Parallel()
	name := rapid.StringOfN(rapid.SampledFrom([]rune("abcXYZ019_-.:/")), 1, 128, -1)
	rapid.Check(t, func(t *rapid.T) {
		s := spend(
			name.Draw(t, "group"),
			rapid.IntRange(0, lease.MaxPartitions-1).Draw(t, "partition"),
			rapid.OneOf(rapid.Uint64Range(1, 1000), rapid.Uint64Min(1)).Draw(t, "epoch"),
		)
		v := lease.FormatFence(s)
		got, err := lease.ParseFence(v)
		if err != nil || got != s {
			t.Fatalf("ParseFence(FormatFence(%+v) = %q) = %+v, %v", s, v, got, err)
		}
	})
}
