package topk

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"unsafe"
)

func mustNew(t testing.TB, k int) *Sketch {
	t.Helper()
	s, err := New(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k       int
		wantErr string // "" for success
	}{
		{k: 1},
		{k: 1000},
		{k: MaxK},
		{k: 0, wantErr: "topk: invalid k: k is 0, must be from 1 to 1048576"},
		{k: -3, wantErr: "topk: invalid k: k is -3, must be from 1 to 1048576"},
		{k: MaxK + 1, wantErr: "topk: invalid k: k is 1048577, must be from 1 to 1048576"},
	} {
		s, err := New(tc.k)
		if tc.wantErr == "" {
			if err != nil || s == nil {
				t.Errorf("New(%d) = %v, %v; want a sketch", tc.k, s, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrInvalidK) || s != nil {
			t.Errorf("New(%d) = %v, %v; want nil, %q wrapping ErrInvalidK", tc.k, s, err, tc.wantErr)
		}
	}
}

// A stream on k=2, checked by hand after every step.
func TestAddByHand(t *testing.T) {
	t.Parallel()
	s := mustNew(t, 2)
	for i, step := range []struct {
		key    string
		weight float64
		want   []Entry
		total  float64
	}{
		{"a", 1, []Entry{{"a", 1, 0}}, 1},
		{"b", 2, []Entry{{"b", 2, 0}, {"a", 1, 0}}, 3},
		// Full: c replaces the lightest, a (1), and inherits its count.
		{"c", 1, []Entry{{"b", 2, 0}, {"c", 2, 1}}, 4},
		// b and c tie at 2: the smaller key, b, is replaced.
		{"a", 3, []Entry{{"a", 5, 2}, {"c", 2, 1}}, 7},
		{"c", 1, []Entry{{"a", 5, 2}, {"c", 3, 1}}, 8},
		{"d", 0.5, []Entry{{"a", 5, 2}, {"d", 3.5, 3}}, 8.5},
		// Ignored weights change nothing.
		{"e", 0, []Entry{{"a", 5, 2}, {"d", 3.5, 3}}, 8.5},
		{"a", -1, []Entry{{"a", 5, 2}, {"d", 3.5, 3}}, 8.5},
		{"a", math.NaN(), []Entry{{"a", 5, 2}, {"d", 3.5, 3}}, 8.5},
		{"a", math.Inf(1), []Entry{{"a", 5, 2}, {"d", 3.5, 3}}, 8.5},
		{"e", math.Inf(-1), []Entry{{"a", 5, 2}, {"d", 3.5, 3}}, 8.5},
		// d overtakes a; the empty string is a key like any other.
		{"d", 2, []Entry{{"d", 5.5, 3}, {"a", 5, 2}}, 10.5},
		{"", 1, []Entry{{"", 6, 5}, {"d", 5.5, 3}}, 11.5},
	} {
		s.Add(step.key, step.weight)
		if got := s.Top(10); !slices.Equal(got, step.want) {
			t.Fatalf("step %d, Add(%q, %v): Top = %v, want %v", i, step.key, step.weight, got, step.want)
		}
		if got := s.Total(); got != step.total {
			t.Fatalf("step %d: Total = %v, want %v", i, got, step.total)
		}
	}
	// True weights: a 4, b 2, c 2, d 2.5, "" 1. d: 5.5−3 ≤ 2.5 ≤ 5.5; "": 6−5 ≤ 1 ≤ 6.
}

func TestTop(t *testing.T) {
	t.Parallel()
	s := mustNew(t, 8)
	for _, kw := range []struct {
		key string
		w   float64
	}{{"c", 2}, {"a", 2}, {"e", 1}, {"b", 3}, {"d", 2}} {
		s.Add(kw.key, kw.w)
	}
	all := []Entry{{"b", 3, 0}, {"a", 2, 0}, {"c", 2, 0}, {"d", 2, 0}, {"e", 1, 0}}
	for _, tc := range []struct {
		n    int
		want []Entry
	}{
		{-1, nil},
		{0, nil},
		{1, all[:1]},
		{2, all[:2]},
		{3, all[:3]}, // ties by key
		{4, all[:4]},
		{5, all},
		{6, all},
		{math.MaxInt, all},
	} {
		if got := s.Top(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Top(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if got := mustNew(t, 3).Top(3); got != nil {
		t.Errorf("empty Top(3) = %v, want nil", got)
	}
}

func TestTotalOverflowIgnored(t *testing.T) {
	t.Parallel()
	s := mustNew(t, 2)
	s.Add("a", math.MaxFloat64)
	s.Add("b", math.MaxFloat64) // would make Total +Inf
	s.Add("a", 1)               // absorbed by rounding, but not ignored
	want := []Entry{{"a", math.MaxFloat64, 0}}
	if got := s.Top(2); !slices.Equal(got, want) {
		t.Errorf("Top = %v, want %v", got, want)
	}
	if got := s.Total(); got != math.MaxFloat64 {
		t.Errorf("Total = %v, want MaxFloat64", got)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	s := mustNew(t, 2)
	for _, key := range []string{"a", "b", "c", "a"} {
		s.Add(key, 1)
	}
	s.Reset()
	if got, total := s.Top(5), s.Total(); got != nil || total != 0 {
		t.Fatalf("after Reset: Top = %v, Total = %v; want nil, 0", got, total)
	}
	s.Add("x", 1)
	s.Add("y", 2)
	s.Add("z", 4)
	want := []Entry{{"z", 5, 1}, {"y", 2, 0}}
	if got := s.Top(5); !slices.Equal(got, want) {
		t.Errorf("Top = %v, want %v", got, want)
	}
}

// Add copies a new key: a key sliced from a buffer that is then reused
// keeps its value.
func TestAddCopiesKey(t *testing.T) {
	t.Parallel()
	s := mustNew(t, 2)
	buf := []byte("tenant-1")
	s.Add(unsafeString(buf), 1)
	copy(buf, "tenant-2")
	if got := s.Top(1); len(got) != 1 || got[0].Key != "tenant-1" {
		t.Errorf("Top = %v, want tenant-1", got)
	}
}

func TestAllocs(t *testing.T) {
	s := mustNew(t, 100)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", i)
		s.Add(keys[i], 1)
	}
	if got := testing.AllocsPerRun(1000, func() { s.Add(keys[999], 1) }); got != 0 {
		t.Errorf("Add of a counted key: %v allocations, want 0", got)
	}
	i := 0
	if got := testing.AllocsPerRun(1000, func() { i++; s.Add(keys[i%len(keys)], 1) }); got > 1 {
		t.Errorf("Add of new keys on a full sketch: %v allocations, want at most 1", got)
	}
}

// Concurrent adds lose nothing: the total and the conservation of weight
// are exact with integer weights.
func TestConcurrentAdd(t *testing.T) {
	t.Parallel()
	const goroutines, adds = 16, 2000
	s := mustNew(t, 10)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range adds {
				s.Add(fmt.Sprintf("t%d", (g*i)%37), float64(1+i%3))
				if i%100 == 0 {
					_ = s.Top(3)
				}
			}
		})
	}
	wg.Wait()
	want := 0.0
	for i := range adds {
		want += goroutines * float64(1+i%3)
	}
	if got := s.Total(); got != want {
		t.Errorf("Total = %v, want %v", got, want)
	}
	sum := 0.0
	entries := s.Top(math.MaxInt)
	for _, e := range entries {
		sum += e.Count
	}
	if sum != want || len(entries) != 10 {
		t.Errorf("%d entries with counts summing to %v, want 10 summing to %v", len(entries), sum, want)
	}
}

// unsafeString aliases b, as a zero-copy parser's keys do.
func unsafeString(b []byte) string { return unsafe.String(&b[0], len(b)) }
