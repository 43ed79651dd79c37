package ratelimitheader

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"pgregory.net/rapid"
)

func TestFormatPolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []Policy
		want string
	}{
		{"none", nil, ""},
		{"draft example", []Policy{{Name: "default", Quota: 100, Window: 10 * time.Second}}, `"default";q=100;w=10`},
		{"two", []Policy{
			{Name: "permin", Quota: 50, Window: time.Minute},
			{Name: "perhr", Quota: 1000, Window: time.Hour},
		}, `"permin";q=50;w=60, "perhr";q=1000;w=3600`},
		{"every parameter, in draft order", []Policy{
			{Name: "peruser", Quota: 65535, Unit: "content-bytes", Window: 10 * time.Second, PartitionKey: []byte("App-999")},
		}, `"peruser";q=65535;qu="content-bytes";w=10;pk=:QXBwLTk5OQ==:`},
		{"no window", []Policy{{Name: "conc", Quota: 8, Unit: "concurrent-requests"}}, `"conc";q=8;qu="concurrent-requests"`},
		{"explicit default unit is written", []Policy{{Name: "a", Quota: 1, Unit: "requests"}}, `"a";q=1;qu="requests"`},
		{"window rounded up: 1ms", []Policy{{Name: "a", Quota: 1, Window: time.Millisecond}}, `"a";q=1;w=1`},
		{"window rounded up: 1.5s", []Policy{{Name: "a", Quota: 1, Window: 1500 * time.Millisecond}}, `"a";q=1;w=2`},
		{"window exact: 60s", []Policy{{Name: "a", Quota: 1, Window: 60 * time.Second}}, `"a";q=1;w=60`},
		{"zero quota", []Policy{{Name: "a", Quota: 0}}, `"a";q=0`},
		{"largest quota", []Policy{{Name: "a", Quota: 999_999_999_999_999}}, `"a";q=999999999999999`},
		{"escaped name", []Policy{{Name: `a"b\c`, Quota: 1}}, `"a\"b\\c";q=1`},
		{"empty name", []Policy{{Name: "", Quota: 1}}, `"";q=1`},
		{"empty partition key", []Policy{{Name: "a", Quota: 1, PartitionKey: []byte{}}}, `"a";q=1;pk=::`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := FormatPolicies(tt.in)
			if err != nil {
				t.Fatalf("FormatPolicies(%+v): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("FormatPolicies(%+v)\n got %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatPoliciesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []Policy
		want string // in the error message
	}{
		{"newline in name", []Policy{{Name: "a\nb", Quota: 1}}, `policies[0].Name "a\nb": byte 0x0a at offset 1`},
		{"non-ASCII name", []Policy{{Name: "ok", Quota: 1}, {Name: "café", Quota: 1}}, `policies[1].Name "café": byte 0xc3 at offset 3`},
		{"DEL in name", []Policy{{Name: "\x7f", Quota: 1}}, `byte 0x7f at offset 0`},
		{"non-ASCII unit", []Policy{{Name: "a", Quota: 1, Unit: "bytés"}}, `policies[0].Unit "bytés" (policy "a")`},
		{"negative quota", []Policy{{Name: "a", Quota: -1}}, `policies[0].Quota -1 (policy "a"): outside 0 to 999999999999999`},
		{"quota too large", []Policy{{Name: "a", Quota: 1_000_000_000_000_000}}, `Quota 1000000000000000`},
		{"negative window", []Policy{{Name: "a", Quota: 1, Window: -time.Second}}, `policies[0].Window -1s (policy "a"): negative`},
		{"duplicate name", []Policy{{Name: "a", Quota: 1}, {Name: "b", Quota: 1}, {Name: "a", Quota: 2}}, `policies[2].Name "a": also the name of policies[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := FormatPolicies(tt.in)
			if !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("FormatPolicies(%+v) = %q, %v; want an error wrapping ErrInvalidValue", tt.in, got, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("FormatPolicies(%+v) error\n got %v\nwant it to contain %s", tt.in, err, tt.want)
			}
		})
	}
}

func TestFormatLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []Limit
		want string
	}{
		{"none", nil, ""},
		{"draft example", []Limit{{Name: "default", Remaining: 50, Reset: 30 * time.Second}}, `"default";r=50;t=30`},
		{"no reset", []Limit{{Name: "default", Remaining: 999, Reset: NoReset, PartitionKey: []byte("trial121323")}}, `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`},
		{"any negative reset is absent", []Limit{{Name: "a", Remaining: 1, Reset: -time.Hour}}, `"a";r=1`},
		{"reset 0 is written", []Limit{{Name: "a", Remaining: 1, Reset: 0}}, `"a";r=1;t=0`},
		{"reset 1ns is 1, not 0", []Limit{{Name: "a", Remaining: 0, Reset: 1}}, `"a";r=0;t=1`},
		{"reset 1ms is 1", []Limit{{Name: "a", Remaining: 0, Reset: time.Millisecond}}, `"a";r=0;t=1`},
		{"reset 1s is 1", []Limit{{Name: "a", Remaining: 0, Reset: time.Second}}, `"a";r=0;t=1`},
		{"reset 1.001s is 2", []Limit{{Name: "a", Remaining: 0, Reset: 1001 * time.Millisecond}}, `"a";r=0;t=2`},
		{"largest reset", []Limit{{Name: "a", Remaining: 0, Reset: 1<<63 - 1}}, `"a";r=0;t=9223372037`},
		{"negative remaining is 0", []Limit{{Name: "a", Remaining: -3, Reset: NoReset}}, `"a";r=0`},
		{"huge remaining is clamped", []Limit{{Name: "a", Remaining: 1 << 62, Reset: NoReset}}, `"a";r=999999999999999`},
		{"several", []Limit{
			{Name: "burst", Remaining: 12, Reset: 40 * time.Second},
			{Name: "daily", Remaining: 880, Reset: time.Hour, PartitionKey: []byte("user")},
		}, `"burst";r=12;t=40, "daily";r=880;t=3600;pk=:dXNlcg==:`},
		{"escaped name", []Limit{{Name: `\"`, Remaining: 1, Reset: NoReset}}, `"\\\"";r=1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := FormatLimits(tt.in)
			if err != nil {
				t.Fatalf("FormatLimits(%+v): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("FormatLimits(%+v)\n got %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatLimitsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []Limit
		want string
	}{
		{"tab in name", []Limit{{Name: "a\tb"}}, `limits[0].Name "a\tb": byte 0x09 at offset 1`},
		{"UTF-8 name", []Limit{{Name: "ok"}, {Name: "日本"}}, `limits[1].Name "日本": byte 0xe6 at offset 0`},
		{"duplicate name", []Limit{{Name: "x"}, {Name: "x"}}, `limits[1].Name "x": also the name of limits[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := FormatLimits(tt.in)
			if !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("FormatLimits(%+v) = %q, %v; want an error wrapping ErrInvalidValue", tt.in, got, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("FormatLimits(%+v) error\n got %v\nwant it to contain %s", tt.in, err, tt.want)
			}
		})
	}
}

// marshalPolicies is FormatPolicies through httpsfv, the reference.
func marshalPolicies(ps []Policy) (string, error) {
	var l httpsfv.List
	for _, p := range ps {
		it := httpsfv.NewItem(p.Name)
		it.Params.Add("q", p.Quota)
		if p.Unit != "" {
			it.Params.Add("qu", p.Unit)
		}
		if p.Window > 0 {
			it.Params.Add("w", ceilSeconds(p.Window))
		}
		if p.PartitionKey != nil {
			it.Params.Add("pk", p.PartitionKey)
		}
		l = append(l, it)
	}
	return httpsfv.Marshal(l)
}

// marshalLimits is FormatLimits through httpsfv, the reference.
func marshalLimits(ls []Limit) (string, error) {
	var l httpsfv.List
	for _, x := range ls {
		it := httpsfv.NewItem(x.Name)
		it.Params.Add("r", clampRemaining(x.Remaining))
		if x.Reset >= 0 {
			it.Params.Add("t", ceilSeconds(x.Reset))
		}
		if x.PartitionKey != nil {
			it.Params.Add("pk", x.PartitionKey)
		}
		l = append(l, it)
	}
	return httpsfv.Marshal(l)
}

// The hand-written formatters give httpsfv's bytes exactly, on any valid
// input, and refuse exactly the names httpsfv refuses.
func TestFormatMatchesHTTPSFV(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ps := genPolicies(t, true)
		got, err := FormatPolicies(ps)
		want, werr := marshalPolicies(ps)
		if (err != nil) != (werr != nil) || got != want {
			t.Fatalf("FormatPolicies(%+v) = %q, %v\nhttpsfv.Marshal gives %q, %v", ps, got, err, want, werr)
		}
		ls := genLimits(t, true)
		got, err = FormatLimits(ls)
		want, werr = marshalLimits(ls)
		if (err != nil) != (werr != nil) || got != want {
			t.Fatalf("FormatLimits(%+v) = %q, %v\nhttpsfv.Marshal gives %q, %v", ls, got, err, want, werr)
		}
	})
}

func TestSet(t *testing.T) {
	t.Parallel()
	ps := []Policy{
		{Name: "burst", Quota: 100, Window: time.Minute},
		{Name: "conc", Quota: 8, Unit: "concurrent-requests"},
		{Name: "daily", Quota: 1000, Window: 24 * time.Hour, PartitionKey: []byte("u")},
	}
	tests := []struct {
		name string
		v    Version
		ps   []Policy
		ls   []Limit
		want http.Header
	}{
		{"draft-11", Draft11, ps, []Limit{{Name: "burst", Remaining: 3, Reset: 1500 * time.Millisecond}}, http.Header{
			"Ratelimit-Policy": {`"burst";q=100;w=60, "conc";q=8;qu="concurrent-requests", "daily";q=1000;w=86400;pk=:dQ==:`},
			"Ratelimit":        {`"burst";r=3;t=2`},
			"Other":            {"kept"},
		}},
		{"draft-11, limits only", Draft11, nil, []Limit{{Name: "a", Remaining: 0, Reset: NoReset}}, http.Header{
			"Ratelimit": {`"a";r=0`},
			"Other":     {"kept"},
		}},
		{"draft-06: least remaining wins", Draft06, ps, []Limit{
			{Name: "burst", Remaining: 40, Reset: 20 * time.Second},
			{Name: "daily", Remaining: 7, Reset: 3 * time.Hour},
		}, http.Header{
			"Ratelimit-Policy":    {"100;w=60, 1000;w=86400"},
			"Ratelimit-Limit":     {"1000"},
			"Ratelimit-Remaining": {"7"},
			"Ratelimit-Reset":     {"10800"},
			"Other":               {"kept"},
		}},
		{"draft-06: a tie goes to the longest reset", Draft06, ps, []Limit{
			{Name: "burst", Remaining: 0, Reset: 20 * time.Second},
			{Name: "daily", Remaining: -5, Reset: 30 * time.Second},
			{Name: "conc", Remaining: 0, Reset: NoReset},
		}, http.Header{
			"Ratelimit-Policy":    {"100;w=60, 1000;w=86400"},
			"Ratelimit-Limit":     {"1000"},
			"Ratelimit-Remaining": {"0"},
			"Ratelimit-Reset":     {"30"},
			"Other":               {"kept"},
		}},
		{"draft-06: no policy of that name, no reset", Draft06, nil, []Limit{{Name: "x", Remaining: 2, Reset: NoReset}}, http.Header{
			"Ratelimit-Remaining": {"2"},
			"Other":               {"kept"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{"Other": {"kept"}, "Ratelimit": {"stale"}, "Ratelimit-Limit": {"stale"}, "Ratelimit-Reset": {"stale"}}
			if tt.v == Draft11 {
				delete(h, "Ratelimit-Limit")
				delete(h, "Ratelimit-Reset")
			} else {
				delete(h, "Ratelimit")
			}
			if err := Set(h, tt.v, tt.ps, tt.ls); err != nil {
				t.Fatalf("Set: %v", err)
			}
			if !reflect.DeepEqual(h, tt.want) {
				t.Errorf("Set(%v) wrote\n got %v\nwant %v", tt.v, h, tt.want)
			}
		})
	}
}

func TestSetErrors(t *testing.T) {
	t.Parallel()
	for _, v := range []Version{Draft11, Draft06} {
		h := http.Header{}
		err := Set(h, v, []Policy{{Name: "a", Quota: -1}}, []Limit{{Name: "a"}})
		if !errors.Is(err, ErrInvalidValue) || len(h) != 0 {
			t.Errorf("Set(%v) with a negative quota: err %v, header %v; want ErrInvalidValue and nothing written", v, err, h)
		}
		err = Set(h, v, nil, []Limit{{Name: "é"}})
		if !errors.Is(err, ErrInvalidValue) || len(h) != 0 {
			t.Errorf("Set(%v) with a bad name: err %v, header %v; want ErrInvalidValue and nothing written", v, err, h)
		}
	}
	h := http.Header{}
	err := Set(h, Version(9), nil, nil)
	if !errors.Is(err, ErrInvalidValue) || !strings.Contains(err.Error(), "unknown Version 9") {
		t.Errorf("Set(Version(9)) = %v; want ErrInvalidValue naming the version", err)
	}
}

func TestVersionString(t *testing.T) {
	t.Parallel()
	for v, want := range map[Version]string{Draft11: "draft-11", Draft06: "draft-06", 7: "Version(7)"} {
		if got := v.String(); got != want {
			t.Errorf("Version(%d).String() = %q, want %q", int(v), got, want)
		}
	}
}
