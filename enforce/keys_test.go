package enforce_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/enforce"
)

func TestBoundedKey(t *testing.T) {
	short := strings.Repeat("k", enforce.MaxRawKey)
	if got := enforce.BoundedKey("h:X:", short); got != "h:X:"+short {
		t.Fatalf("a %d-byte value was changed", len(short))
	}
	long := short + "!"
	got := enforce.BoundedKey("h:X:", long)
	if strings.Contains(got, short) || len(got) != len("h:X:sha256:")+64 {
		t.Fatalf("a %d-byte value gave %q", len(long), got)
	}
	if enforce.BoundedKey("h:X:", long+"?") == got {
		t.Fatal("two long values share a key")
	}
}

func TestPutIPKey(t *testing.T) {
	key := func(s string) string {
		var b [enforce.IPKeyLen]byte
		enforce.PutIPKey(&b, netip.MustParsePrefix(s))
		return string(b[:])
	}
	if key("2001:db8:1:2::/64") == key("2001:db8:1:3::/64") || key("10.0.0.1/32") == key("10.0.0.2/32") {
		t.Fatal("two prefixes share a key")
	}
	if key("::/64") == key("::/48") {
		t.Fatal("the prefix length is not in the key")
	}
	if k := key("192.0.2.1/32"); !strings.HasPrefix(k, "ip:") || len(k) != enforce.IPKeyLen || k[19] != 32 {
		t.Fatalf("%q", k)
	}
}
