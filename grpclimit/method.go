package grpclimit

import (
	"fmt"
	"strings"
)

// methodSet is a compiled Match.Methods.
type methodSet struct {
	all      bool                // no patterns: every method
	exact    map[string]struct{} // "/pkg.Service/Method"
	services []string            // "/pkg.Service/", from "/pkg.Service/*"
}

// compileMethods validates and compiles method patterns.
func compileMethods(patterns []string) (methodSet, error) {
	if len(patterns) == 0 {
		return methodSet{all: true}, nil
	}
	var s methodSet
	for _, p := range patterns {
		service, method, err := splitPattern(p)
		if err != nil {
			return methodSet{}, err
		}
		if method == "*" {
			s.services = append(s.services, "/"+service+"/")
			continue
		}
		if s.exact == nil {
			s.exact = make(map[string]struct{}, len(patterns))
		}
		s.exact[p] = struct{}{}
	}
	return s, nil
}

// splitPattern checks that p is "/pkg.Service/Method" or "/pkg.Service/*"
// — a service of dot-separated identifiers, a method identifier or "*" —
// and returns its two parts.
func splitPattern(p string) (service, method string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", fmt.Errorf("method pattern %q: %s; want \"/package.Service/Method\" or \"/package.Service/*\"", p, why)
	}
	rest, ok := strings.CutPrefix(p, "/")
	if !ok {
		return bad("must start with /")
	}
	service, method, ok = strings.Cut(rest, "/")
	if !ok || strings.Contains(method, "/") {
		return bad("must have exactly two slashes")
	}
	for id := range strings.SplitSeq(service, ".") {
		if !identifier(id) {
			return bad("the service must be identifiers separated by dots")
		}
	}
	if method != "*" && !identifier(method) {
		return bad("the method must be an identifier or *")
	}
	return service, method, nil
}

// identifier reports whether s is a protobuf identifier: a letter or '_',
// then letters, digits and '_'.
func identifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b == '_' || i > 0 && '0' <= b && b <= '9') {
			return false
		}
	}
	return true
}

// match reports whether a call of the full method name m is selected.
func (s *methodSet) match(m string) bool {
	if s.all {
		return true
	}
	if _, ok := s.exact[m]; ok {
		return true
	}
	for _, svc := range s.services {
		if len(m) > len(svc) && strings.HasPrefix(m, svc) && strings.IndexByte(m[len(svc):], '/') < 0 {
			return true
		}
	}
	return false
}
