package memstore

import (
	"testing"

	"pgregory.net/rapid"
)

type payload struct{ V int64 }

// The table behaves as a map of idents under any sequence of inserts and
// removals, with growth and shrinking, including idents crafted to share
// home slots and wrap around the end of the array.
func TestPropTableIsAMap(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		var tb table[payload]
		model := map[ident]int64{}
		// Few distinct homes, among them the last slot: long probe runs
		// that wrap around the end of the array, and shifts across it.
		homes := []uint64{0, 1 << 31, 0xffffffff, 0xf0000000, 0xe0000000}
		genID := rapid.Custom(func(rt *rapid.T) ident {
			return ident{
				hi: rapid.SampledFrom(homes).Draw(rt, "home") | rapid.Uint64Range(0, 3).Draw(rt, "tag")<<32,
				lo: rapid.Uint64Range(1, 40).Draw(rt, "lo"),
			}
		})
		for i := range rapid.IntRange(1, 300).Draw(rt, "ops") {
			id := genID.Draw(rt, "id")
			at, free := tb.find(id)
			v, inModel := model[id]
			if (at >= 0) != inModel {
				rt.Fatalf("op %d: find(%v) = %d, model has it: %v", i, id, at, inModel)
			}
			switch {
			case inModel && tb.slots[at].state.V != v:
				rt.Fatalf("op %d: state %d, model %d", i, tb.slots[at].state.V, v)
			case inModel && rapid.Bool().Draw(rt, "remove"):
				tb.remove(at)
				delete(model, id)
				if rapid.Bool().Draw(rt, "shrink") {
					tb.shrink()
				}
			case !inModel:
				sl := tb.insert(id, free)
				sl.state.V = int64(i)
				model[id] = int64(i)
			}
			if tb.n != len(model) {
				rt.Fatalf("op %d: n = %d, model %d", i, tb.n, len(model))
			}
			if len(tb.ctrl) > 0 && float64(tb.n) > maxLoad*float64(len(tb.ctrl)) {
				rt.Fatalf("op %d: load %d/%d over %v", i, tb.n, len(tb.ctrl), maxLoad)
			}
		}
		for id, v := range model {
			if at, _ := tb.find(id); at < 0 || tb.slots[at].state.V != v {
				rt.Fatalf("%v lost (at %d)", id, at)
			}
		}
		occupied := 0
		for i, c := range tb.ctrl {
			if c != 0 {
				occupied++
				if c != tb.slots[i].id.tag() {
					rt.Fatalf("slot %d: control byte %#x, tag %#x", i, c, tb.slots[i].id.tag())
				}
			}
		}
		if occupied != len(model) {
			rt.Fatalf("%d occupied slots, %d keys", occupied, len(model))
		}
	})
}
