package httplimit

import "testing"

func TestPattern(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern string
		yes     []string
		no      []string
	}{
		{"", []string{"/", "/a", "/a/b/"}, nil},
		{"/", []string{"/", "/a", "/a/b/"}, nil},
		{"/health", []string{"/health"}, []string{"/", "/health/", "/healthz", "/health/x", "/x/health"}},
		{"/api/", []string{"/api/", "/api/x", "/api/x/y/"}, []string{"/api", "/apix", "/", "/x/api/"}},
		{"/users/{id}", []string{"/users/1", "/users/abc"}, []string{"/users", "/users/", "/users/1/", "/users/1/orders"}},
		{"/users/{id}/orders", []string{"/users/1/orders"}, []string{"/users//orders", "/users/1/orders/", "/users/1", "/users/1/order"}},
		{"/files/{path...}", []string{"/files/", "/files/a", "/files/a/b/c"}, []string{"/files", "/filesx/a"}},
		{"/{rest...}", []string{"/", "/a", "/a/b"}, []string{""}},
		{"/{a}/{b}/", []string{"/x/y/", "/x/y/z"}, []string{"/x/y", "/x//", "//y/"}},
	} {
		p, err := compilePattern(c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		for _, path := range c.yes {
			if !p.match(path) {
				t.Errorf("%q does not match %q", c.pattern, path)
			}
		}
		for _, path := range c.no {
			if p.match(path) {
				t.Errorf("%q matches %q", c.pattern, path)
			}
		}
	}
}

func TestPatternRefused(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"api", "/a//b", "/{}", "/{a}{b}", "/a{b}", "/{x...}/y", "/{x}/{x}", "/{x...}/"} {
		if _, err := compilePattern(p); err == nil {
			t.Errorf("%q: accepted", p)
		}
	}
	for _, m := range [][]string{{"get"}, {""}, {"GE T"}} {
		if _, err := compileMethods(m); err == nil {
			t.Errorf("methods %q: accepted", m)
		}
	}
}

func TestPatternDoesNotAllocate(t *testing.T) {
	p, _ := compilePattern("/users/{id}/orders/")
	if n := testing.AllocsPerRun(100, func() { p.match("/users/42/orders/7") }); n != 0 {
		t.Fatalf("%v allocations per match", n)
	}
}
