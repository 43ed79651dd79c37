package memstore

import "hash/maphash"

// ident identifies a key's state: a 128-bit keyed hash of the limit's
// name and parameters and the key. The store never keeps raw keys. Two
// distinct states share an ident with probability about n²/2^129 for n
// states (below 1e-20 for a billion); the seeds are random per store, so an
// attacker cannot aim for a collision. hi also places the state: its top
// bits pick the shard, its low 32 bits the home slot, bits 32-38 the
// control tag.
type ident struct{ hi, lo uint64 }

// limitID is what a limit contributes to an ident: its name and the
// fingerprint of its parameters, so that a changed limit finds fresh state.
type limitID struct {
	name        string
	fingerprint uint64
}

// hashLimit hashes a limit's identity with the store's limit seeds.
func hashLimit(seeds *identSeeds, id limitID) [2]uint64 {
	return [2]uint64{maphash.Comparable(seeds.limit[0], id), maphash.Comparable(seeds.limit[1], id)}
}

// identSeeds are a store's hash seeds: keys and limits hash with seeds of
// their own, so that no (limit, key) pair mirrors another.
type identSeeds struct {
	key, limit [2]maphash.Seed
}

func newIdentSeeds() identSeeds {
	return identSeeds{
		key:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		limit: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
	}
}

// identify hashes key under a limit whose identity hashes to limitHash.
// Each half xors two independent seeded hashes: uniform, and independent of
// the other half.
func identify(seeds *identSeeds, limitHash [2]uint64, key string) ident {
	return ident{
		hi: maphash.String(seeds.key[0], key) ^ limitHash[0],
		lo: maphash.String(seeds.key[1], key) ^ limitHash[1],
	}
}

func (id ident) tag() uint8 { return 0x80 | uint8(id.hi>>32)&0x7f }

// home maps id to a slot index in [0, size) (Lemire's fast range).
func (id ident) home(size int) int { return int((id.hi & 0xffffffff) * uint64(size) >> 32) }

// table is an open-addressing hash table with linear probing holding the
// states of one algorithm. A control array of one byte per slot (0 for
// empty, else 0x80 | 7 bits of the ident) lets a probe skip slots without
// touching them; slots hold the ident, the reset second and the state
// inline, and no pointer for the fixed-size states, so the garbage
// collector never scans them. The table grows by a quarter when its load
// passes maxLoad: the load stays within [0.7, 0.875], which with a 16-byte
// state is 47 to 59 bytes per key.
//
// A table is not safe for concurrent use; its shard's lock guards it.
type table[S any] struct {
	ctrl    []uint8
	slots   []slot[S]
	n       int
	scratch S // the state of a key being decided before it is inserted
}

type slot[S any] struct {
	id    ident
	reset uint32 // second (of the store's clock) from which the state is fresh again
	state S
}

const (
	minSize = 8
	maxLoad = 0.875
)

// find returns the slot of id, or, when it is absent, -1 and the empty slot
// where it would go (-1 when the table has none).
func (t *table[S]) find(id ident) (at, free int) {
	size := len(t.ctrl)
	if size == 0 {
		return -1, -1
	}
	tg := id.tag()
	for i := id.home(size); ; {
		c := t.ctrl[i]
		if c == 0 {
			return -1, i
		}
		if c == tg && t.slots[i].id == id {
			return i, -1
		}
		if i++; i == size {
			i = 0
		}
	}
}

// insert puts id at the free slot that find returned (-1: look for it),
// growing the table first when it is full enough. It returns the slot.
func (t *table[S]) insert(id ident, free int) *slot[S] {
	if float64(t.n+1) > maxLoad*float64(len(t.ctrl)) {
		t.resize(max(minSize, len(t.ctrl)*5/4+1))
		free = -1
	}
	if free < 0 {
		free = t.freeSlot(id)
	}
	t.ctrl[free] = id.tag()
	t.slots[free] = slot[S]{id: id}
	t.n++
	return &t.slots[free]
}

func (t *table[S]) freeSlot(id ident) int {
	i := id.home(len(t.ctrl))
	for t.ctrl[i] != 0 {
		if i++; i == len(t.ctrl) {
			i = 0
		}
	}
	return i
}

// remove empties slot i, shifting back the entries of its probe run that
// would no longer be found (backward-shift deletion: no tombstones).
func (t *table[S]) remove(i int) {
	size := len(t.ctrl)
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		if t.ctrl[j] == 0 {
			break
		}
		// The entry at j may move to i if its home is not in (i, j].
		k := t.slots[j].id.home(size)
		if i <= j && (k <= i || k > j) || i > j && (k <= i && k > j) {
			t.ctrl[i], t.slots[i] = t.ctrl[j], t.slots[j]
			i = j
		}
	}
	t.ctrl[i] = 0
	t.slots[i] = slot[S]{} // let any state memory go
	t.n--
}

// resize moves every entry into a table of the given size.
func (t *table[S]) resize(size int) {
	old, oldCtrl := t.slots, t.ctrl
	t.ctrl, t.slots = make([]uint8, size), make([]slot[S], size)
	for i, c := range oldCtrl {
		if c != 0 {
			j := t.freeSlot(old[i].id)
			t.ctrl[j], t.slots[j] = c, old[i]
		}
	}
}

// shrink makes an oversized table smaller after deletions.
func (t *table[S]) shrink() {
	if len(t.ctrl) > minSize && t.n < len(t.ctrl)/4 {
		if t.n == 0 {
			t.ctrl, t.slots = nil, nil
			return
		}
		t.resize(max(minSize, int(float64(t.n)/0.7)+1))
	}
}
