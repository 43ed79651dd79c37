// Package leaseconfig is how sluice's commands put chosen limits on
// leases (package leasestore, its leases in Redis through redislease), in
// one shape: sluice serve's --leases file and the gateway's store.leases
// fill the same Leases, which is checked the same way (Validate, then each
// limit against the configuration's with leasestore.Leased.Check) and
// turned into leasestore's options the same way (Leased). docs/leasestore.md
// says what a leased limit decides differently.
package leaseconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/leasestore"
)

// Leases are the limits decided on leases, and how. A zero field means
// its default. It is read at start: a change takes a restart. Every
// instance of a fleet must lease a limit the same way (partitions, ttl)
// and share the key HMAC secret.
type Leases struct {
	// Limits are the leased limits, by name. At least one.
	Limits []Limit `yaml:"limits"`
	// Member identifies this instance to the fleet's other members
	// (default: a random ID, new at each start); never a raw identity.
	Member string `yaml:"member"`
	// MaxKeys bounds the keys held on leases at once, over every leased
	// limit (default leasestore.DefaultMaxKeys, 1024).
	MaxKeys int `yaml:"max_keys"`
	// Prefix starts the leases' Redis keys (default
	// redislease.DefaultPrefix, "sluice:lease:"); at most 64 bytes,
	// without { or }.
	Prefix string `yaml:"prefix"`
}

// Limit is one leased limit (leasestore.Leased, as a file writes it).
type Limit struct {
	// Name is the limit's: a limit the configuration defines, a
	// token_bucket or gcra. Required.
	Name string `yaml:"name"`
	// Partitions is P, the parts the limit is cut into (default 8); each
	// must hold at least one unit of the leased quota and burst.
	Partitions int `yaml:"partitions"`
	// TTL is a lease's length (default 2s; at least lease.MinTTL, whole
	// milliseconds); leases are renewed every TTL/3.
	TTL configfile.Duration `yaml:"ttl"`
	// OnFailure is what a key decides when its Holder cannot reach Redis
	// and holds nothing usable. Nil: the caller's default (the limit's
	// own on_failure).
	OnFailure *sluice.FailurePolicy `yaml:"on_failure"`
	// OutageShare is the fraction of the limit kept out of the leases for
	// fail_local, from 0 (the default) to less than 1.
	OutageShare float64 `yaml:"outage_share"`
	// Idle is how long a key goes unused before its Holder stops and
	// gives its partitions back (default 30 × ttl).
	Idle configfile.Duration `yaml:"idle"`
}

// Validate checks the leases alone, as leasestore.New and redislease.New
// would: at least one limit, each named once, and every field in its
// range. Whether each name is a limit the leases can hold is the
// caller's to check, against its configuration (leasestore.Leased.Check).
// Every refusal is a *configfile.FieldError, its path under the leases
// (["limits", "1", "ttl"]).
func (l Leases) Validate() error {
	if len(l.Limits) == 0 {
		return fieldErr(errors.New("none: list the limits to decide on leases, each with its name"), "limits")
	}
	if l.Member != "" {
		if err := lease.ValidateMember(l.Member); err != nil {
			return fieldErr(err, "member")
		}
	}
	if l.MaxKeys < 0 {
		return fieldErr(fmt.Errorf("%d: must be positive (0 or absent: %d)", l.MaxKeys, leasestore.DefaultMaxKeys), "max_keys")
	}
	if len(l.Prefix) > 64 || strings.ContainsAny(l.Prefix, "{}") {
		return fieldErr(fmt.Errorf("%q: at most 64 bytes, without { or }", l.Prefix), "prefix")
	}
	for i, x := range l.Limits {
		at := func(p ...string) []string { return append([]string{"limits", strconv.Itoa(i)}, p...) }
		if x.Name == "" {
			return fieldErr(errors.New("required: the name of the limit to decide on leases"), at("name")...)
		}
		for j, other := range l.Limits[:i] {
			if other.Name == x.Name {
				return fieldErr(fmt.Errorf("%q is leased twice (first as limits[%d])", x.Name, j), at("name")...)
			}
		}
		for _, d := range []struct {
			field string
			v     configfile.Duration
		}{{"ttl", x.TTL}, {"idle", x.Idle}} {
			if d.v < 0 {
				return fieldErr(fmt.Errorf("%v: must be positive (0 or absent: the default)", time.Duration(d.v)), at(d.field)...)
			}
		}
		if x.Partitions < 0 {
			return fieldErr(fmt.Errorf("%d: must be positive (0 or absent: %d)", x.Partitions, lease.DefaultPartitions), at("partitions")...)
		}
		if !(x.OutageShare >= 0 && x.OutageShare < 1) {
			return fieldErr(fmt.Errorf("%v: want 0 to less than 1 (the fraction of the limit kept out of the leases)", x.OutageShare), at("outage_share")...)
		}
		// The rest as leasestore refuses it: the name, partitions and
		// ttl in lease's ranges, a known policy.
		if err := x.leased(sluice.FailOpen).Validate(); err != nil {
			return fieldErr(err, at()...)
		}
	}
	return nil
}

// Leased is the limits as leasestore takes them, each with its
// on_failure or, without one, policy(its name).
func (l Leases) Leased(policy func(name string) sluice.FailurePolicy) []leasestore.Leased {
	out := make([]leasestore.Leased, len(l.Limits))
	for i, x := range l.Limits {
		out[i] = x.leased(policy(x.Name))
	}
	return out
}

// leased is x as leasestore takes it, with def for a policy it leaves out.
func (x Limit) leased(def sluice.FailurePolicy) leasestore.Leased {
	p := def
	if x.OnFailure != nil {
		p = *x.OnFailure
	}
	return leasestore.Leased{Name: x.Name, Partitions: x.Partitions, TTL: time.Duration(x.TTL), Policy: p,
		OutageShare: x.OutageShare, Idle: time.Duration(x.Idle)}
}

// Names are the leased limits' names, in order.
func (l Leases) Names() []string {
	out := make([]string, len(l.Limits))
	for i, x := range l.Limits {
		out[i] = x.Name
	}
	return out
}

func fieldErr(err error, path ...string) *configfile.FieldError {
	return &configfile.FieldError{Path: path, Err: err}
}
