package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/relay/config"
)

// fleetGood shares per_second of target api. Its lines: 8 the target's
// fleet:, 9 limit, 10 partitions, 11 ttl, 14 the top-level fleet:, 15
// redis, 16 prefix.
const fleetGood = `targets:
  - name: api
    origin: http://127.0.0.1:9000
    allow: [127.0.0.0/8]
    limits:
      - {name: per_second, quota: 50, window: 1s}
      - {name: per_minute, quota: 1000, window: 1m}
    fleet:
      limit: per_second
      partitions: 8
      ttl: 2s
queues:
  - {name: jobs, target: api}
fleet:
  redis: {addrs: ['127.0.0.1:6379']}
  prefix: "sluice:lease:"
`

func TestFleetExampleParses(t *testing.T) {
	t.Parallel()
	f, err := config.Load("../../examples/relay-fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ls := f.Leases()
	if len(ls) != 1 || ls[0].Options.Limit.Name != "relay.demo.per_second" || f.Fleet.Redis == nil || len(f.Options().Queues) != 2 {
		t.Fatalf("leases %+v, fleet %+v", ls, f.Fleet)
	}
}

// TestFleetLeases: the lease options each fleet block gives, every
// default filled in.
func TestFleetLeases(t *testing.T) {
	t.Parallel()
	defaults := func(limit sluice.Limit) config.Lease {
		return config.Lease{Target: "api", Limit: strings.TrimPrefix(limit.Name, "relay.api."), Options: leaseOptions(limit, 8, 2*time.Second, 666*time.Millisecond, 100*time.Millisecond, "")}
	}
	perSecond := sluice.Limit{Name: "relay.api.per_second", Quota: 50, Window: time.Second}
	perMinute := sluice.Limit{Name: "relay.api.per_minute", Quota: 1000, Window: time.Minute}
	block := func(b string) string {
		return strings.Replace(fleetGood, "    fleet:\n      limit: per_second\n      partitions: 8\n      ttl: 2s\n", b, 1)
	}
	cases := []struct {
		name, file string
		want       config.Lease
	}{
		{"as written", fleetGood, defaults(perSecond)},
		{"an empty block: the fastest limit", block("    fleet: {}\n"), defaults(perSecond)},
		{"a block without a value", block("    fleet:\n"), defaults(perSecond)},
		{"the slower limit named", block("    fleet: {limit: per_minute}\n"), defaults(perMinute)},
		{"every field", strings.Replace(block("    fleet: {partitions: 5, ttl: 600ms, renew: 250ms, drift: 20ms}\n"), "  prefix:", "  member: relay-1.eu:a/b\n  prefix:", 1),
			config.Lease{Target: "api", Limit: "per_second", Options: leaseOptions(perSecond, 5, 600*time.Millisecond, 250*time.Millisecond, 20*time.Millisecond, "relay-1.eu:a/b")}},
		{"ttl alone: renew and drift follow it", block("    fleet: {ttl: 4s}\n"),
			config.Lease{Target: "api", Limit: "per_second", Options: leaseOptions(perSecond, 8, 4*time.Second, 1333*time.Millisecond, 200*time.Millisecond, "")}},
		{"a gcra limit", strings.Replace(fleetGood, "{name: per_second, quota: 50", "{name: per_second, algorithm: gcra, quota: 50", 1),
			func() config.Lease {
				l := perSecond
				l.Algorithm = sluice.GCRA
				return defaults(l)
			}()},
	}
	for _, c := range cases {
		f, err := config.Parse("relay.yaml", []byte(c.file))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := f.Leases()
		if len(got) != 1 || !reflect.DeepEqual(got[0], c.want) {
			t.Errorf("%s: leases\n %+v\nwant\n %+v", c.name, got, c.want)
		}
	}
	// Without a fleet block, no lease; an empty redis: is the default.
	f, err := config.Parse("relay.yaml", []byte(good+"fleet:\n  redis:\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ls := f.Leases(); len(ls) != 0 || f.Fleet.Redis == nil {
		t.Fatalf("leases %+v, fleet %+v", ls, f.Fleet)
	}
	o, err := f.RedisDialOptions(time.Now())
	if err != nil || len(o.Addrs) != 1 || o.Addrs[0] != "127.0.0.1:6379" {
		t.Fatalf("dial options %v, %v", o, err)
	}
}

func leaseOptions(l sluice.Limit, p int, ttl, renew, drift time.Duration, member string) lease.Options {
	return lease.Options{Limit: l, Partitions: p, TTL: ttl, Renew: renew, Drift: drift, Member: member}
}

// TestFleetRefused is the table of refused fleet settings: each with the
// line of its field and the reason, lease.New's own where it decides.
func TestFleetRefused(t *testing.T) {
	t.Parallel()
	set := func(old, new string) string {
		if !strings.Contains(fleetGood, old) {
			t.Fatalf("%q is not in the file", old)
		}
		return strings.Replace(fleetGood, old, new, 1)
	}
	also := func(file, old, new string) string {
		if !strings.Contains(file, old) {
			t.Fatalf("%q is not in the file", old)
		}
		return strings.Replace(file, old, new, 1)
	}
	ttl := "      ttl: 2s\n"
	long := strings.Repeat("l", 120)
	cases := []struct {
		name, file string
		line       int
		reason     string
	}{
		{"drift zero", set(ttl, ttl+"      drift: 0s\n"), 12, "a drift margin of zero assumes perfect clocks"},
		{"drift negative", set(ttl, ttl+"      drift: -1s\n"), 12, "drift margin -1s: must not be negative"},
		{"drift without a value", set(ttl, ttl+"      drift:\n"), 12, "drift has no value"},
		{"drift not a duration", set(ttl, ttl+"      drift: 100\n"), 12, "a number needs its unit"},
		{"partitions above the quota", set("partitions: 8", "partitions: 64"), 10, "partitions 64 exceed the quota 50"},
		{"partitions above the burst", set("quota: 50, window: 1s}", "quota: 50, window: 1s, burst: 4}"), 10, "partitions 8 exceed the burst 4"},
		{"partitions negative", set("partitions: 8", "partitions: -1"), 10, "partitions -1: want 1 to 1024"},
		{"partitions too many", set("partitions: 8", "partitions: 2000"), 10, "partitions 2000: want 1 to 1024"},
		{"renew at half the ttl", set(ttl, ttl+"      renew: 1s\n"), 12, "less than half the TTL"},
		{"renew negative", set(ttl, ttl+"      renew: -1s\n"), 12, "must be positive and less than half the TTL"},
		{"ttl too short", set("ttl: 2s", "ttl: 30ms"), 11, "at least 50ms"},
		{"ttl not whole milliseconds", set("ttl: 2s", "ttl: 100500us"), 11, "a whole number of milliseconds"},
		{"ttl negative", set("ttl: 2s", "ttl: -1s"), 11, "ttl -1s: must be positive"},
		{"no such limit", set("limit: per_second", "limit: per_hour"), 9, `limit "per_hour": the target has no limit of that name (it has per_second, per_minute)`},
		{"a sliding window named", also(set("limit: per_second", "limit: per_minute"), "{name: per_minute, quota", "{name: per_minute, algorithm: sliding_window, quota"), 9, "a leased limit is a token_bucket or gcra, not sliding_window"},
		{"a sliding window the fastest", also(set("      limit: per_second\n", ""), "{name: per_second, quota", "{name: per_second, algorithm: sliding_window, quota"), 8, "a leased limit is a token_bucket or gcra, not sliding_window"},
		{"no limits", also(set("    limits:\n      - {name: per_second, quota: 50, window: 1s}\n      - {name: per_minute, quota: 1000, window: 1m}\n", ""), "      limit: per_second\n", ""), 5, "the target has no limits to share"},
		{"a group name too long", also(set("limit: per_second", "limit: "+long), "{name: per_second,", "{name: "+long+","), 9, "more than 128: shorten the target's or the limit's name"},
		{"a target's fleet without the section", strings.Split(fleetGood, "fleet:\n  redis")[0], 8, "the top-level fleet section, which is missing"},
		{"the section without redis", set("  redis: {addrs: ['127.0.0.1:6379']}\n", ""), 14, "fleet.redis is required"},
		{"an unknown field in the block", set(ttl, ttl+"      tll: 1s\n"), 12, `unknown field "tll" in a target's fleet block`},
		{"an unknown field in the section", set("  prefix:", "  membre: x\n  prefix:"), 16, `unknown field "membre" in fleet`},
		{"an unknown field under redis", set("{addrs: ['127.0.0.1:6379']}", "{addrs: ['127.0.0.1:6379'], pasword_file: x}"), 15, `unknown field "pasword_file" in fleet.redis`},
		{"a block not a mapping", set("    fleet:\n      limit: per_second\n      partitions: 8\n      ttl: 2s\n", "    fleet: 5\n"), 8, "a mapping (limit, partitions, ttl, renew, drift) is needed here"},
		{"redis not a mapping", set("{addrs: ['127.0.0.1:6379']}", "5"), 15, "a mapping (addrs, password_file, tls, sentinel…) is needed here"},
		{"a redis URL", set("'127.0.0.1:6379'", "'redis://127.0.0.1:6379'"), 15, "fleet.redis.addrs[0]: a URL"},
		{"a redis user without password", set("{addrs: ['127.0.0.1:6379']}", "\n    username: u"), 16, `fleet.redis.username: "u" needs its password`},
		{"two redis passwords", set("{addrs: ['127.0.0.1:6379']}", "\n    password_file: a\n    password_env: B"), 17, "fleet.redis.password_env: the password is given twice"},
		{"a bad member", set("  prefix:", "  member: 'relay one'\n  prefix:"), 16, `fleet.member: member "relay one": byte 5 is not a letter, digit or one of _-.:/`},
		{"a member too long", set("  prefix:", "  member: "+strings.Repeat("m", 65)+"\n  prefix:"), 16, "want 1 to 64 bytes"},
		{"a prefix with braces", set(`prefix: "sluice:lease:"`, `prefix: "a{b}"`), 16, `fleet.prefix: prefix "a{b}": at most 64 bytes, without { or }`},
	}
	for _, c := range cases {
		_, err := config.Parse("relay.yaml", []byte(c.file))
		var e *config.Error
		if !errors.As(err, &e) || e.Line != c.line || !strings.Contains(e.Reason, c.reason) {
			t.Errorf("%s: %v (want line %d saying %q)", c.name, err, c.line, c.reason)
		}
	}
}

// TestFleetRedisFiles: the password file is read by RedisDialOptions (at
// start, and by sluice check), and its refusal names its line.
func TestFleetRedisFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	file := strings.Replace(fleetGood, "{addrs: ['127.0.0.1:6379']}", "\n    addrs: ['127.0.0.1:6379']\n    password_file: "+missing, 1)
	f, err := config.Parse("relay.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.RedisDialOptions(time.Now())
	var e *config.Error
	if !errors.As(err, &e) || e.Line != 17 || !strings.Contains(e.Reason, "fleet.redis.password_file") {
		t.Fatalf("%v: want line 17 naming fleet.redis.password_file", err)
	}
	if err := os.WriteFile(missing, []byte("a-redis-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := f.RedisDialOptions(time.Now())
	if err != nil || o.Password != "a-redis-password" {
		t.Fatalf("%v, %v", o, err)
	}
}
