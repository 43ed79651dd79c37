package ratelimitheader

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// lim is a Limit without a partition key.
func lim(name string, r int64, reset time.Duration) Limit {
	return Limit{Name: name, Remaining: r, Reset: reset}
}

// The draft's example key "cHsdsRa894==" has non-zero pad bits; its
// canonical form is "cHsdsRa89w==".
var draftKey = []byte("p{\x1d\xb1\x16\xbc\xf7")

func TestParseLimits(t *testing.T) {
	t.Parallel()
	huge := time.Duration(maxSeconds) * time.Second
	tests := []struct {
		name string
		in   []string
		want []Limit
	}{
		{"absent", nil, nil},
		{"only blank lines", []string{"", " \t "}, nil},
		{"draft example", []string{`"default";r=50;t=30`}, []Limit{lim("default", 50, 30*time.Second)}},
		{"draft example without reset", []string{`"default";r=999;pk=:dHJpYWwxMjEzMjM=:`},
			[]Limit{{Name: "default", Remaining: 999, Reset: NoReset, PartitionKey: []byte("trial121323")}}},
		{"draft example with key", []string{`"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`},
			[]Limit{{Name: "default", Remaining: 300000000, Reset: time.Minute, PartitionKey: []byte("App-999")}}},
		{"several members", []string{`"a";r=1;t=2, "b";r=0`}, []Limit{lim("a", 1, 2*time.Second), lim("b", 0, NoReset)}},
		{"several lines", []string{`"a";r=1;t=2`, `"b";r=0, "c";r=5;t=0`}, []Limit{lim("a", 1, 2*time.Second), lim("b", 0, NoReset), lim("c", 5, 0)}},
		{"blank lines among them", []string{"", `"a";r=1`, "  ", `"b";r=2`}, []Limit{lim("a", 1, NoReset), lim("b", 2, NoReset)}},
		{"whitespace and tabs", []string{"  \"a\";r=1 ,\t\"b\";r=2\t"}, []Limit{lim("a", 1, NoReset), lim("b", 2, NoReset)}},
		{"unknown parameters ignored", []string{`"a";acme-burst=5;r=1;flag;note="x";t=3;*x=:YQ==:`}, []Limit{lim("a", 1, 3*time.Second)}},
		{"Token name", []string{`default;r=5`}, []Limit{lim("default", 5, NoReset)}},
		{"Token name with colon and slash", []string{`a:b/c;r=5`}, []Limit{lim("a:b/c", 5, NoReset)}},
		{"escaped name", []string{`"a\"b\\c";r=1`}, []Limit{lim(`a"b\c`, 1, NoReset)}},
		{"leading zeros", []string{`"a";r=007;t=0030`}, []Limit{lim("a", 7, 30*time.Second)}},
		{"largest integers", []string{`"a";r=999999999999999;t=999999999999999`}, []Limit{lim("a", 999999999999999, huge)}},
		{"duplicate names: first kept", []string{`"a";r=1`, `"a";r=0;t=9`}, []Limit{lim("a", 1, NoReset)}},
		{"duplicate names: first valid kept", []string{`"a";r=-1, "a";r=3`}, []Limit{lim("a", 3, NoReset)}},
		{"last of repeated parameters wins (RFC 9651)", []string{`"a";r=1;r=2`}, []Limit{lim("a", 2, NoReset)}},

		// Members skipped, the others kept.
		{"missing r", []string{`"a";t=5, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"negative r", []string{`"a";r=-1, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"negative t", []string{`"a";r=1;t=-1, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"decimal r", []string{`"a";r=1.5, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"string r", []string{`"a";r="1", "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"boolean r", []string{`"a";r, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"decimal t", []string{`"a";r=1;t=2.5, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"string pk", []string{`"a";r=1;pk="k", "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"Integer name", []string{`5;r=1, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"Byte Sequence name", []string{`:YQ==:;r=1, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"Boolean name", []string{`?1;r=1, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"Inner List", []string{`("a" "b");r=1, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"Date name", []string{`@1659578233;r=1, "b";r=1`}, []Limit{lim("b", 1, NoReset)}},
		{"nothing usable", []string{`"a";t=1, 7`}, nil},

		// Byte Sequences (RFC 9651 §4.2.7).
		{"pk without padding", []string{`"a";r=1;pk=:dHJpYWwxMjEzMjM:`}, []Limit{{Name: "a", Remaining: 1, Reset: NoReset, PartitionKey: []byte("trial121323")}}},
		{"pk without padding, two missing", []string{`"a";r=1;pk=:YQ:`}, []Limit{{Name: "a", Remaining: 1, Reset: NoReset, PartitionKey: []byte("a")}}},
		{"pk with too much padding", []string{`"a";r=1;pk=:YQ===:`}, []Limit{{Name: "a", Remaining: 1, Reset: NoReset, PartitionKey: []byte("a")}}},
		{"pk with non-zero pad bits (the draft's example)", []string{`"a";r=1;pk=:cHsdsRa894==:`}, []Limit{{Name: "a", Remaining: 1, Reset: NoReset, PartitionKey: draftKey}}},
		{"pk with neither padding nor zero pad bits", []string{`"a";r=1;pk=:cHsdsRa894:`}, []Limit{{Name: "a", Remaining: 1, Reset: NoReset, PartitionKey: draftKey}}},
		{"empty pk", []string{`"a";r=1;pk=::`}, []Limit{{Name: "a", Remaining: 1, Reset: NoReset, PartitionKey: []byte{}}}},
		{"colon in a String and a Token left alone", []string{`"x:YQ:";r=1;pk=:YQ:, t:YQ;r=2`},
			[]Limit{{Name: "x:YQ:", Remaining: 1, Reset: NoReset, PartitionKey: []byte("a")}, lim("t:YQ", 2, NoReset)}},
		{"backslash in a Display String is no escape", []string{`"a";note=%"x\";r=1;pk=:YQ:`}, []Limit{{Name: "a", Remaining: 1, Reset: NoReset, PartitionKey: []byte("a")}}},
		{"unpadded keys in two lines", []string{`"a";r=1;pk=:YQ:`, `"b";r=2;pk=:Yg:`},
			[]Limit{{Name: "a", Remaining: 1, Reset: NoReset, PartitionKey: []byte("a")}, {Name: "b", Remaining: 2, Reset: NoReset, PartitionKey: []byte("b")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLimits(tt.in)
			if err != nil {
				t.Fatalf("ParseLimits(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseLimits(%q)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseLimitsMalformed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []string
		want error
	}{
		{"trailing comma", []string{`"a";r=1,`}, ErrMalformed},
		{"unterminated String", []string{`"a;r=1`}, ErrMalformed},
		{"non-ASCII in a String", []string{`"é";r=1`}, ErrMalformed},
		{"upper-case parameter key", []string{`"a";R=1`}, ErrMalformed},
		{"Integer of 16 digits", []string{`"a";r=1000000000000000`}, ErrMalformed},
		{"space before a parameter", []string{`"a" ;r=1`}, ErrMalformed},
		{"Dictionary syntax", []string{`limit=100, remaining=50`}, ErrMalformed},
		{"pk of impossible length", []string{`"a";r=1;pk=:YWJjZ:`}, ErrMalformed},
		{"pk in base64url", []string{`"a";r=1;pk=:a-b_:`}, ErrMalformed},
		{"pk padding in the middle", []string{`"a";r=1;pk=:YQ==YQ==:`}, ErrMalformed},
		{"unterminated pk", []string{`"a";r=1;pk=:YQ==`}, ErrMalformed},
		{"a line splitting a member", []string{`"a";r=1;pk=:Yg`, `=:`}, ErrMalformed},
		{"one bad line spoils the field", []string{`"a";r=1`, `"b";r=`}, ErrMalformed},
		{"too large", []string{strings.Repeat(" ", MaxFieldSize-6) + `"a";r=1`}, ErrTooLarge},
		{"too large in total", []string{strings.Repeat(" ", MaxFieldSize/2) + `"a";r=1`, strings.Repeat(" ", MaxFieldSize/2) + `"b";r=1`}, ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLimits(tt.in)
			if !errors.Is(err, tt.want) || got != nil {
				t.Errorf("ParseLimits(%.60q) = %+v, %v; want nil, %v", tt.in, got, err, tt.want)
			}
			if _, err := ParsePolicies(tt.in); !errors.Is(err, tt.want) {
				t.Errorf("ParsePolicies(%.60q) error %v; want %v", tt.in, err, tt.want)
			}
		})
	}
}

func TestParseErrorMessages(t *testing.T) {
	t.Parallel()
	_, err := ParseLimits([]string{`"a";r=1,`})
	if want := "ratelimitheader: malformed field: RateLimit is not a Structured Field List: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("ParseLimits error %v; want it to start %q", err, want)
	}
	_, err = ParsePolicies([]string{strings.Repeat("x", MaxFieldSize+1)})
	if want := "ratelimitheader: field too large: RateLimit-Policy: 16385 bytes in 1 lines, more than the 16384 read"; err == nil || err.Error() != want {
		t.Errorf("ParsePolicies error %v; want %q", err, want)
	}
}

func TestParseBounds(t *testing.T) {
	t.Parallel()
	var members []string
	var want []Limit
	for i := range 100 {
		members = append(members, fmt.Sprintf(`"p%d";r=%d`, i, i))
		if i < MaxMembers {
			want = append(want, lim(fmt.Sprintf("p%d", i), int64(i), NoReset))
		}
	}
	got, err := ParseLimits([]string{strings.Join(members, ", ")})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseLimits(100 members) = %d limits, %v; want the first %d", len(got), err, MaxMembers)
	}
	// Exactly MaxFieldSize bytes is read.
	v := strings.Repeat(" ", MaxFieldSize-len(`"a";r=1`)) + `"a";r=1`
	if got, err := ParseLimits([]string{v}); err != nil || len(got) != 1 {
		t.Errorf("ParseLimits(%d bytes) = %+v, %v; want one limit", len(v), got, err)
	}
	// Duplicates do not count towards MaxMembers.
	members = members[:0]
	for range 100 {
		members = append(members, `"same";r=1`)
	}
	members = append(members, `"other";r=2`)
	got, err = ParseLimits(members)
	if want := []Limit{lim("same", 1, NoReset), lim("other", 2, NoReset)}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseLimits(100 duplicates, then another) = %+v, %v; want %+v", got, err, want)
	}
}

func TestParsePolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []string
		want []Policy
	}{
		{"absent", nil, nil},
		{"draft example", []string{`"burst";q=100;w=60,"daily";q=1000;w=86400`},
			[]Policy{{Name: "burst", Quota: 100, Window: time.Minute}, {Name: "daily", Quota: 1000, Window: 24 * time.Hour}}},
		{"draft example with key", []string{`"peruser";q=100;w=60;pk=:cHsdsRa894==:`},
			[]Policy{{Name: "peruser", Quota: 100, Window: time.Minute, PartitionKey: draftKey}}},
		{"draft example with unit and key", []string{`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`},
			[]Policy{{Name: "peruser", Quota: 65535, Unit: "content-bytes", Window: 10 * time.Second, PartitionKey: []byte("\xb1\xd7\xe3,\x95\x0eP")}}},
		{"draft FAQ example, two lines, unknown parameter", []string{`"sliding";q=100;w=60;burst=1000`, `"fixed";q=5000;w=3600;burst=0`},
			[]Policy{{Name: "sliding", Quota: 100, Window: time.Minute}, {Name: "fixed", Quota: 5000, Window: time.Hour}}},
		{"no window", []string{`"c";q=8;qu="concurrent-requests"`}, []Policy{{Name: "c", Quota: 8, Unit: "concurrent-requests"}}},
		{"Token unit", []string{`"a";q=1;qu=requests`}, []Policy{{Name: "a", Quota: 1, Unit: "requests"}}},
		{"zero quota", []string{`"a";q=0`}, []Policy{{Name: "a", Quota: 0}}},
		{"huge window clamped", []string{`"a";q=1;w=999999999999999`}, []Policy{{Name: "a", Quota: 1, Window: time.Duration(maxSeconds) * time.Second}}},
		{"duplicate names: first kept", []string{`"a";q=1, "b";q=2, "a";q=3`}, []Policy{{Name: "a", Quota: 1}, {Name: "b", Quota: 2}}},
		{"missing q", []string{`"a";w=60, "b";q=1`}, []Policy{{Name: "b", Quota: 1}}},
		{"negative q", []string{`"a";q=-5, "b";q=1`}, []Policy{{Name: "b", Quota: 1}}},
		{"zero window (draft -09 on: greater than zero)", []string{`"a";q=1;w=0, "b";q=1`}, []Policy{{Name: "b", Quota: 1}}},
		{"negative window", []string{`"a";q=1;w=-60, "b";q=1`}, []Policy{{Name: "b", Quota: 1}}},
		{"decimal window", []string{`"a";q=1;w=1.5, "b";q=1`}, []Policy{{Name: "b", Quota: 1}}},
		{"Integer unit", []string{`"a";q=1;qu=1, "b";q=1`}, []Policy{{Name: "b", Quota: 1}}},
		{"String pk", []string{`"a";q=1;pk="x", "b";q=1`}, []Policy{{Name: "b", Quota: 1}}},
		{"-06 policies have no names", []string{`100;w=60, 1000;w=3600`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParsePolicies(tt.in)
			if err != nil {
				t.Fatalf("ParsePolicies(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParsePolicies(%q)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestRepadByteSequences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		changed  bool
	}{
		{`"a";pk=:YQ==:`, `"a";pk=:YQ==:`, false},
		{`"a";pk=:YQ:`, `"a";pk=:YQ==:`, true},
		{`"a";pk=:YWI:, :YQ:`, `"a";pk=:YWI=:, :YQ==:`, true},
		{`(:YQ: :YQ:)`, `(:YQ==: :YQ==:)`, true},
		{`"a:YQ:";x=t:YQ`, `"a:YQ:";x=t:YQ`, false},
		{`"a":YQ:"`, `"a":YQ:"`, false},
		{`%"a";pk=:YQ:`, `%"a";pk=:YQ==:`, true},
		{`x=:YQ`, `x=:YQ`, false},
		{`x=:Y:`, `x=:Y:`, false},
		{`x=:Y-Q:`, `x=:Y-Q:`, false},
		{`x=:YQ=YQ:`, `x=:YQ=YQ:`, false},
	}
	for _, tt := range tests {
		got, changed := repadByteSequences(tt.in)
		if got != tt.want || changed != tt.changed {
			t.Errorf("repadByteSequences(%s) = %s, %v; want %s, %v", tt.in, got, changed, tt.want, tt.changed)
		}
	}
}
