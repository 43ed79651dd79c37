package lease

import (
	"fmt"
	"strconv"
	"strings"
)

// FenceHeader is the HTTP header that carries a Spend to a target that
// checks fences: "<epoch> <partition> <group>".
const FenceHeader = "Sluice-Lease-Epoch"

// FormatFence returns s as FenceHeader's value.
func FormatFence(s Spend) string {
	return strconv.FormatUint(s.Epoch, 10) + " " + strconv.Itoa(s.Partition) + " " + s.Group
}

// ParseFence parses a FenceHeader value; anything else is an error
// wrapping ErrInvalid that says what is wrong.
func ParseFence(v string) (Spend, error) {
	if len(v) > 20+1+4+1+128 { // the longest epoch, partition and group
		return Spend{}, fmt.Errorf("%w: fence: %d bytes, too long", ErrInvalid, len(v))
	}
	epoch, rest, ok1 := strings.Cut(v, " ")
	part, group, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return Spend{}, fmt.Errorf("%w: fence %q: want \"<epoch> <partition> <group>\"", ErrInvalid, clip(v))
	}
	e, err := strconv.ParseUint(epoch, 10, 64)
	if err != nil || e == 0 || epoch[0] == '+' || (len(epoch) > 1 && epoch[0] == '0') {
		return Spend{}, fmt.Errorf("%w: fence %q: epoch is not a positive decimal integer", ErrInvalid, clip(v))
	}
	p, err := strconv.ParseUint(part, 10, 16)
	if err != nil || p >= MaxPartitions || part[0] == '+' || (len(part) > 1 && part[0] == '0') {
		return Spend{}, fmt.Errorf("%w: fence %q: partition is not a decimal integer from 0 to %d", ErrInvalid, clip(v), MaxPartitions-1)
	}
	if err := validName("fence group", group, 128); err != nil {
		return Spend{}, err
	}
	return Spend{Group: group, Grant: Grant{Partition: int(p), Epoch: e}}, nil
}
