package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gateway/config"
)

func TestFence(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		want       *config.Fence
	}{
		{"absent", "", nil},
		{"any group", "fence: {}\n", &config.Fence{}},
		{"listed, required", "fence:\n  groups: [openai-tokens, s3/puts]\n  required: true\n", &config.Fence{Groups: []string{"openai-tokens", "s3/puts"}, Required: true}},
		{"bounded", "fence: {max_groups: 16}\n", &config.Fence{MaxGroups: 16}},
	} {
		f, err := config.Parse("t.yaml", []byte(c.yaml+minimal))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := f.Fence
		if (got == nil) != (c.want == nil) || got != nil && (!slices.Equal(got.Groups, c.want.Groups) || got.MaxGroups != c.want.MaxGroups || got.Required != c.want.Required) {
			t.Errorf("%s: fence %+v, want %+v", c.name, got, c.want)
		}
	}
}

// Every refusal of the fence section names the line of the field.
func TestFenceRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, yaml, want string }{
		{"empty", "fence:\n", "bad.yaml:1: fence: present but empty — write fence: {} to check the tokens of any lease group, or leave fence out"},
		{"unknown field", "fence:\n  requierd: true\n", `bad.yaml:2: unknown field "requierd" (did you mean "required"?)`},
		{"not a list", "fence:\n  groups: a\n", `bad.yaml:2: groups: a list is expected, not "a"`},
		{"not a bool", "fence:\n  required: sometimes\n", `bad.yaml:2: required "sometimes": true or false is expected`},
		{"negative bound", "fence:\n  max_groups: -1\n", "bad.yaml:2: fence max_groups -1: must be positive (0 or absent: 1024)"},
		{"bound and list", "fence:\n  groups: [a]\n  max_groups: 4\n", "bad.yaml:3: fence: max_groups with groups: the list is the bound; give one or the other"},
		{"twice", "fence:\n  groups:\n    - a\n    - b\n    - a\n", `bad.yaml:5: fence: group "a" is listed twice (first as groups[0])`},
		{"bad name", "fence:\n  groups:\n    - ok\n    - not ok\n", `bad.yaml:4: fence: group "not ok": byte 3 is not a letter, digit or one of _-.:/`},
		{"long name", "fence:\n  groups: [" + strings.Repeat("g", 129) + "]\n", `bad.yaml:2: fence: group "gggggggggggggggggggggggggggggggggggggggg…": want 1 to 128 bytes`},
	} {
		_, err := config.Parse("bad.yaml", []byte(c.yaml+minimal))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
}
