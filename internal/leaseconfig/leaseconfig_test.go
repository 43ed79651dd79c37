package leaseconfig_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/leaseconfig"
	"github.com/sluicehq/sluice/leasestore"
)

// Leased gives each limit its own on_failure, or the caller's for it; the
// other fields as written.
func TestLeased(t *testing.T) {
	t.Parallel()
	local := sluice.FailLocal
	l := leaseconfig.Leases{Limits: []leaseconfig.Limit{
		{Name: "a", Partitions: 4, TTL: configfile.Duration(time.Second), OnFailure: &local, OutageShare: 0.1, Idle: configfile.Duration(time.Minute)},
		{Name: "b"},
	}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	var asked []string
	got := l.Leased(func(name string) sluice.FailurePolicy { asked = append(asked, name); return sluice.FailClosed })
	want := []leasestore.Leased{
		{Name: "a", Partitions: 4, TTL: time.Second, Policy: sluice.FailLocal, OutageShare: 0.1, Idle: time.Minute},
		{Name: "b", Policy: sluice.FailClosed},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Leased: %+v, want %+v", got, want)
	}
	if !slices.Equal(l.Names(), []string{"a", "b"}) {
		t.Errorf("Names: %v", l.Names())
	}
}

// Every refusal is a FieldError whose path names the field.
func TestValidate(t *testing.T) {
	t.Parallel()
	ok := leaseconfig.Limit{Name: "a"}
	for _, c := range []struct {
		name   string
		leases leaseconfig.Leases
		field  string
	}{
		{"no limits", leaseconfig.Leases{}, "limits"},
		{"member", leaseconfig.Leases{Limits: []leaseconfig.Limit{ok}, Member: "a b"}, "member"},
		{"max_keys", leaseconfig.Leases{Limits: []leaseconfig.Limit{ok}, MaxKeys: -1}, "max_keys"},
		{"prefix", leaseconfig.Leases{Limits: []leaseconfig.Limit{ok}, Prefix: "a{b}"}, "prefix"},
		{"name", leaseconfig.Leases{Limits: []leaseconfig.Limit{ok, {}}}, "limits[1].name"},
		{"twice", leaseconfig.Leases{Limits: []leaseconfig.Limit{ok, ok}}, "limits[1].name"},
		{"ttl", leaseconfig.Leases{Limits: []leaseconfig.Limit{{Name: "a", TTL: -1}}}, "limits[0].ttl"},
		{"idle", leaseconfig.Leases{Limits: []leaseconfig.Limit{{Name: "a", Idle: -1}}}, "limits[0].idle"},
		{"partitions", leaseconfig.Leases{Limits: []leaseconfig.Limit{{Name: "a", Partitions: -1}}}, "limits[0].partitions"},
		{"outage_share", leaseconfig.Leases{Limits: []leaseconfig.Limit{{Name: "a", OutageShare: 1}}}, "limits[0].outage_share"},
		{"what leasestore refuses", leaseconfig.Leases{Limits: []leaseconfig.Limit{{Name: "a", TTL: configfile.Duration(time.Millisecond)}}}, "limits[0]"},
	} {
		err := c.leases.Validate()
		var fe *configfile.FieldError
		if !errors.As(err, &fe) || fe.Field() != c.field {
			t.Errorf("%s: %v; want a FieldError at %s", c.name, err, c.field)
		}
	}
}
