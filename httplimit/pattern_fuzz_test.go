package httplimit

import (
	"strings"
	"testing"
)

// FuzzPattern: a path pattern either compiles or is refused with a message
// that quotes it; a compiled one answers for every path without panicking,
// and a pattern of literal segments matches exactly its own path (and,
// ending in "/", everything under it).
func FuzzPattern(f *testing.F) {
	for _, p := range []string{"", "/", "/api/", "/health", "/users/{id}/orders", "/files/{path...}", "/a//b", "/{x}{y}", "/{x}/{x}", "/{rest...}/x", "a"} {
		f.Add(p, "/users/7/orders")
	}
	f.Fuzz(func(t *testing.T, p, path string) {
		pt, err := compilePattern(p)
		if err != nil {
			if !strings.Contains(err.Error(), "path pattern") {
				t.Fatalf("refusal without context: %v", err)
			}
			return
		}
		_ = pt.match(path)
		if !strings.ContainsAny(p, "{}") && len(p) > 1 {
			if !pt.match(p) {
				t.Fatalf("%q does not match its own path", p)
			}
			if strings.HasSuffix(p, "/") && !pt.match(p+"x/y") {
				t.Fatalf("%q does not match %q under it", p, p+"x/y")
			}
		}
	})
}
