package enforce_test

import (
	"errors"
	"hash/maphash"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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

func TestCheckRuleName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{{"api", true}, {strings.Repeat("r", 64), true}, {"", false}, {strings.Repeat("r", 65), false}, {"tab\there", false}, {"é", false}} {
		if err := enforce.CheckRuleName(c.name); (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestCompileQuota(t *testing.T) {
	l := sluice.Limit{Name: "l", Quota: 10, Window: time.Second}
	for _, c := range []struct {
		cost float64
		want string // "" for ok
	}{{0, ""}, {1, ""}, {10, ""}, {2.5, ""}, {-1, "must be positive"}, {math.NaN(), "must be positive"}, {math.Inf(1), "must be positive"},
		{1e-7, "resolution"}, {11, "exceeds the limit's capacity 10"}} {
		_, err := enforce.CompileQuota(l, c.cost)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("cost %v: %v, want %q", c.cost, err, c.want)
		}
	}
	if _, err := enforce.CompileQuota(sluice.Limit{Name: "bad", Quota: -1, Window: time.Second}, 0); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("an invalid limit: %v", err)
	}
}

func TestPseudonym(t *testing.T) {
	seed := maphash.MakeSeed()
	a, b := enforce.Pseudonym(seed, "ip", "secret-key"), enforce.Pseudonym(seed, "ip", "other-key")
	if a == b || a != enforce.Pseudonym(seed, "ip", "secret-key") || strings.Contains(a, "secret") || len(a) != len("ip:")+16 || !strings.HasPrefix(a, "ip:") {
		t.Fatalf("%q %q", a, b)
	}
	if enforce.Pseudonym(maphash.MakeSeed(), "ip", "secret-key") == a {
		t.Fatal("two seeds, one pseudonym")
	}
}
