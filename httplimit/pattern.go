package httplimit

import (
	"fmt"
	"net/http"
	"strings"
)

// pattern is a compiled path pattern (see Match.Path).
type pattern struct {
	segs   []segment
	prefix bool // a trailing "/" or "{name...}": the rest may be anything
	any    bool // "" or "/": every path
}

type segment struct {
	lit      string
	wildcard bool // {name}: one non-empty segment
}

// compilePattern parses a Match.Path.
func compilePattern(p string) (pattern, error) {
	if p == "" || p == "/" {
		return pattern{any: true}, nil
	}
	if p[0] != '/' {
		return pattern{}, fmt.Errorf("path pattern %q: must start with /", p)
	}
	var pt pattern
	parts := strings.Split(p[1:], "/")
	if parts[len(parts)-1] == "" { // "/api/": a prefix
		pt.prefix = true
		parts = parts[:len(parts)-1]
	}
	names := map[string]bool{}
	for i, s := range parts {
		if !strings.ContainsAny(s, "{}") {
			if s == "" {
				return pattern{}, fmt.Errorf("path pattern %q: empty segment", p)
			}
			pt.segs = append(pt.segs, segment{lit: s})
			continue
		}
		if s[0] != '{' || s[len(s)-1] != '}' || strings.Count(s, "{") != 1 || strings.Count(s, "}") != 1 {
			return pattern{}, fmt.Errorf("path pattern %q: segment %q: a wildcard is a whole segment, {name} or {name...}", p, s)
		}
		name, rest := strings.CutSuffix(s[1:len(s)-1], "...")
		if name == "" || names[name] {
			return pattern{}, fmt.Errorf("path pattern %q: segment %q: wildcard names must be non-empty and distinct", p, s)
		}
		names[name] = true
		if rest {
			if i != len(parts)-1 || pt.prefix {
				return pattern{}, fmt.Errorf("path pattern %q: {%s...} must be the last segment", p, name)
			}
			pt.prefix = true
			continue
		}
		pt.segs = append(pt.segs, segment{wildcard: true})
	}
	return pt, nil
}

// match reports whether path matches. It does not allocate.
func (pt *pattern) match(path string) bool {
	if pt.any {
		return true
	}
	if path == "" || path[0] != '/' {
		return false
	}
	if len(pt.segs) == 0 { // "/{rest...}"
		return true
	}
	rest, ended := path[1:], false
	for _, s := range pt.segs {
		if ended {
			return false // the path ends before the pattern does
		}
		seg := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			seg, rest = rest[:j], rest[j+1:]
		} else {
			rest, ended = "", true
		}
		if s.wildcard && seg == "" || !s.wildcard && seg != s.lit {
			return false
		}
	}
	// An exact pattern wants the path to end with its last segment; a
	// prefix pattern wants a "/" after it (then anything).
	return ended != pt.prefix
}

// methodSet is a set of methods; the zero value holds every method.
type methodSet struct {
	all     bool
	methods []string
}

func compileMethods(ms []string) (methodSet, error) {
	if len(ms) == 0 {
		return methodSet{all: true}, nil
	}
	var set methodSet
	for _, m := range ms {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t/") {
			return methodSet{}, fmt.Errorf("method %q: an HTTP method is an upper-case token, e.g. GET", m)
		}
		set.methods = append(set.methods, m)
		if m == http.MethodGet {
			set.methods = append(set.methods, http.MethodHead) // as http.ServeMux does
		}
	}
	return set, nil
}

func (s *methodSet) match(m string) bool {
	if s.all {
		return true
	}
	for _, x := range s.methods {
		if x == m {
			return true
		}
	}
	return false
}
