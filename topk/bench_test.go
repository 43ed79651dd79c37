package topk

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// benchKeys returns n distinct tenant keys, made before the timer starts.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%07d", i)
	}
	return keys
}

// full returns a sketch of k counters, all taken.
func full(b *testing.B, k int, keys []string) *Sketch {
	s := mustNew(b, k)
	for _, key := range keys[:k] {
		s.Add(key, 1)
	}
	return s
}

// The anchor of each benchmark is an exact, unbounded map[string]float64
// doing the same updates: what counting costs without the sketch.

// One hot key on a full sketch of 1000: a counted key, no allocation.
func BenchmarkAddHotKey(b *testing.B) {
	keys := benchKeys(1000)
	b.Run("sketch", func(b *testing.B) {
		s := full(b, 1000, keys)
		b.ReportAllocs()
		for b.Loop() {
			s.Add("tenant-0000500", 1)
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[string]float64{}
		for _, key := range keys {
			m[key]++
		}
		b.ReportAllocs()
		for b.Loop() {
			m["tenant-0000500"]++
		}
	})
}

// A stream of new keys (2^20 distinct, in turn) on a full sketch of 1000:
// every Add replaces the lightest counter and copies its key.
func BenchmarkAddNewKeys(b *testing.B) {
	keys := benchKeys(1 << 20)
	b.Run("sketch", func(b *testing.B) {
		s := full(b, 1000, keys)
		b.ReportAllocs()
		i := 1000 // the first key not counted
		for b.Loop() {
			s.Add(keys[i&(1<<20-1)], 1)
			i++
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[string]float64{}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m[keys[i&(1<<20-1)]]++
			i++
		}
	})
}

// Many goroutines on one sketch of 1000: one mutex, so this measures its
// contention, on a mix of 90% counted keys and 10% new ones.
func BenchmarkAddParallel(b *testing.B) {
	keys := benchKeys(1 << 20)
	s := full(b, 1000, keys)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1 << 16)
		for pb.Next() {
			i++
			if i%10 == 0 {
				s.Add(keys[i&(1<<20-1)], 1)
			} else {
				s.Add(keys[i%100], 1)
			}
		}
	})
}

// Top(10) of a full sketch of 1000.
func BenchmarkTop(b *testing.B) {
	keys := benchKeys(1 << 20)
	s := full(b, 1000, keys)
	for i, key := range keys[:100_000] {
		s.Add(key, float64(1+i%7))
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Top(10)
	}
}
