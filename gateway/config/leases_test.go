package config_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway/config"
)

// leasedFile is a Redis store with store.leases (lines 5 to 15), a
// global limit on leases and a per-IP one in Redis.
const leasedFile = `store:
  kind: redis
  redis:
    addrs: [127.0.0.1:6379]
  leases:
    limits:
      - name: global
        partitions: 4
        ttl: 300ms
        on_failure: fail_local
        outage_share: 0.25
        idle: 1m
    member: gw-a1
    max_keys: 10
    prefix: "gw:lease:"
limits:
  - {name: global, quota: 100, window: 1s, burst: 40}
  - {name: per-ip, quota: 10, window: 1s, algorithm: fixed_window}
rules:
  - name: all
    quotas:
      - {limit: per-ip, key: ip}
      - {limit: global, key: global}
`

func TestLeases(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("gw.yaml", []byte(leasedFile))
	if err != nil {
		t.Fatal(err)
	}
	l := f.Store.Leases
	if l == nil || len(l.Limits) != 1 || l.Member != "gw-a1" || l.MaxKeys != 10 || l.Prefix != "gw:lease:" {
		t.Fatalf("store.leases: %+v", l)
	}
	x := l.Limits[0]
	if x.Name != "global" || x.Partitions != 4 || time.Duration(x.TTL) != 300*time.Millisecond || x.OnFailure == nil || *x.OnFailure != sluice.FailLocal ||
		x.OutageShare != 0.25 || time.Duration(x.Idle) != time.Minute {
		t.Fatalf("store.leases.limits[0]: %+v", x)
	}
}

// Every refusal of store.leases names the line of the field, and says why.
func TestLeasesRefuses(t *testing.T) {
	t.Parallel()
	const limits = `limits:
  - {name: global, quota: 100, window: 1s, burst: 40}
  - {name: window, quota: 100, window: 1s, algorithm: fixed_window}
  - {name: tiny, quota: 4, window: 1s}
rules:
  - name: all
    quotas: [{limit: global, key: global}]
`
	for _, c := range []struct{ name, store, rules, want string }{
		{"memory store", "store:\n  leases:\n    limits: [{name: global}]\n", "",
			"bad.yaml:3: leases need store kind redis: the leases are held in that Redis (this store is memory)"},
		{"empty", "store:\n  kind: redis\n  leases:\n", "",
			"bad.yaml:3: store leases: present but empty — list the limits to decide on leases under limits:, or leave leases out"},
		{"no limits", "store:\n  kind: redis\n  leases: {max_keys: 4}\n", "",
			"bad.yaml:3: leases limits: none: list the limits to decide on leases, each with its name"},
		{"unknown field", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n        partition: 4\n", "",
			`bad.yaml:6: unknown field "partition" (did you mean "partitions"?)`},
		{"not a duration", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n        ttl: soon\n", "",
			`bad.yaml:6: limit "global": ttl "soon": not a duration; write it as 50ms, 1s, 1m30s or 2h (units: ns, us, ms, s, m, h)`},
		{"bad policy", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n        on_failure: fail_maybe\n", "",
			`bad.yaml:6: limit "global": on_failure "fail_maybe": fail_open, fail_closed or fail_local`},
		{"no name", "store:\n  kind: redis\n  leases:\n    limits:\n      - partitions: 4\n", "",
			"bad.yaml:5: leases limits[0].name: required: the name of the limit to decide on leases"},
		{"twice", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n      - name: global\n", "",
			`bad.yaml:6: leases limits[1].name: "global" is leased twice (first as limits[0])`},
		{"negative partitions", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n        partitions: -1\n", "",
			"bad.yaml:6: leases limits[0].partitions: -1: must be positive (0 or absent: 8)"},
		{"too many partitions", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n        partitions: 2000\n", "",
			`bad.yaml:5: leases limits[0]: leasestore: limit "global": lease: invalid: group "g": partitions 2000: want 1 to 1024`},
		{"short ttl", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n        ttl: 10ms\n", "",
			`bad.yaml:5: leases limits[0]: leasestore: limit "global": lease: invalid: group "g": ttl 10ms: want a whole number of milliseconds, at least 50ms`},
		{"negative ttl", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n        ttl: -1s\n", "",
			"bad.yaml:6: leases limits[0].ttl: -1s: must be positive (0 or absent: the default)"},
		{"outage share", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: global\n        outage_share: 1\n", "",
			"bad.yaml:6: leases limits[0].outage_share: 1: want 0 to less than 1 (the fraction of the limit kept out of the leases)"},
		{"negative max_keys", "store:\n  kind: redis\n  leases:\n    limits: [{name: global}]\n    max_keys: -1\n", "",
			"bad.yaml:5: leases max_keys: -1: must be positive (0 or absent: 1024)"},
		{"bad member", "store:\n  kind: redis\n  leases:\n    limits: [{name: global}]\n    member: a b\n", "",
			`bad.yaml:5: leases member: lease: invalid: member "a b": byte 1 is not a letter, digit or one of _-.:/`},
		{"bad prefix", "store:\n  kind: redis\n  leases:\n    limits: [{name: global}]\n    prefix: \"{x}\"\n", "",
			`bad.yaml:5: leases prefix: "{x}": at most 64 bytes, without { or }`},
		{"undefined limit", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: glob\n", "",
			`bad.yaml:5: leases: limit "glob" is not defined under limits`},
		{"not a bucket", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: window\n", "",
			`bad.yaml:5: leases: limit "window": sluice: invalid limit: limit "window" is leased: a leased limit is a token_bucket or gcra, not fixed_window`},
		{"partitions exceed the quota", "store:\n  kind: redis\n  leases:\n    limits:\n      - name: tiny\n", "",
			`bad.yaml:5: leases: limit "tiny": sluice: invalid limit: leasestore: limit "tiny" on leases: lease: invalid: partitions 8 exceed the quota 4 of limit "tiny:0000000000000000": each partition must hold at least one unit per window; use fewer partitions`},
		{"charged", "store:\n  kind: redis\n  leases:\n    limits: [{name: global}]\n", "  - name: tokens\n    quotas: [{limit: global, key: global, charge_header: X-Tokens}]\n",
			`bad.yaml:13: rule "tokens": limit "global" is decided on leases (store.leases), which cannot charge after the response`},
		{"cost above a partition", "store:\n  kind: redis\n  leases:\n    limits: [{name: global, partitions: 8}]\n", "  - name: big\n    quotas: [{limit: global, key: global, cost: 6}]\n",
			`bad.yaml:13: rule "big": cost 6 on limit "global", decided on leases: above one partition's burst 5 (burst × (1 − outage_share) ÷ partitions), so it would never fit`},
	} {
		_, err := config.Parse("bad.yaml", []byte(c.store+limits+c.rules))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
	// A cost of one partition's burst fits.
	if _, err := config.Parse("ok.yaml", []byte("store:\n  kind: redis\n  leases:\n    limits: [{name: global, partitions: 8}]\n"+limits+
		"  - name: big\n    quotas: [{limit: global, key: global, cost: 5}]\n")); err != nil {
		t.Errorf("a cost of one partition's burst (40 / 8): %v", err)
	}
}
