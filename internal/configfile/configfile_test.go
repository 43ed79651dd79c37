package configfile_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/configfile"
)

func TestErrorText(t *testing.T) {
	for _, c := range []struct {
		e    configfile.Error
		want string
	}{
		{configfile.Error{File: "a.yaml", Line: 3, Reason: "unknown field \"x\""}, `a.yaml:3: unknown field "x"`},
		{configfile.Error{File: "a.yaml", Reason: "larger than 1 MiB"}, "a.yaml: larger than 1 MiB"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
	e := &configfile.Error{File: "a.yaml", Reason: "unreadable", Err: fs.ErrNotExist}
	if !errors.Is(e, fs.ErrNotExist) {
		t.Fatal("the cause is not unwrapped")
	}
}

func TestYAMLLine(t *testing.T) {
	var v struct{ A int }
	for _, c := range []struct {
		doc  string
		want int
	}{
		{"a: 1\nb: [", 2},
		{"a: 1\n\na: x\n", 3},
	} {
		err := yaml.Unmarshal([]byte(c.doc), &v)
		if err == nil {
			t.Fatalf("%q decoded", c.doc)
		}
		if got := configfile.YAMLLine(err); got != c.want {
			t.Errorf("%q: line %d (%v), want %d", c.doc, got, err, c.want)
		}
	}
	if got := configfile.YAMLLine(errors.New("no place named")); got != 0 {
		t.Errorf("line %d for an error without one", got)
	}
}

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct{ addr, err string }{
		{"127.0.0.1:8080", ""},
		{":0", ""},
		{"[::1]:65535", ""},
		{"localhost:6379", ""},
		{"localhost", "host:port, e.g. 127.0.0.1:8080 or [::1]:8080"},
		{"127.0.0.1:", "host:port, e.g. 127.0.0.1:8080 or [::1]:8080"},
		{"::1:80", "an IPv6 address goes in brackets with a port, e.g. [::1]:8080"},
		{"127.0.0.1:99999", "the port must be a number from 0 to 65535"},
		{"127.0.0.1:http", "the port must be a number from 0 to 65535"},
	} {
		err := configfile.CheckAddr(c.addr)
		if got := fmt.Sprint(err); c.err == "" && err != nil || c.err != "" && got != c.err {
			t.Errorf("%q: %v, want %q", c.addr, err, c.err)
		}
	}
}
