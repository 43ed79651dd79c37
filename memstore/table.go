package memstore

import (
	"hash/maphash"
	"unsafe"
)

// table is an open-addressing hash table with linear probing, holding the
// states of one algorithm. A control array of one byte per slot (0 for
// empty, else 0x80 | 7 bits of the hash) lets a probe skip non-matching
// slots without touching their keys; slots hold the key reference and the
// state inline. Size grows by half when the load passes maxLoad and halves
// when it falls under a fifth, so the load stays within [0.53, 0.8] while
// growing: with a 16-byte state, 33 bytes per slot make 41 to 62 bytes per
// key.
//
// A table is not safe for concurrent use; its shard's lock guards it.
type table[S any] struct {
	ctrl  []uint8
	slots []slot[S]
	n     int
}

type slot[S any] struct {
	ref   keyRef
	state S
}

// keyRef points at an identity's bytes: the limit name, a 0 byte, then the
// key (names have no 0 byte). It also carries the fingerprint of the limit
// parameters that wrote the state and the state's reset second.
type keyRef struct {
	ptr   *byte
	len   uint16
	fp    uint16 // low bits of algo.Params.Fingerprint
	reset uint32 // second (of the store's clock) from which the state is fresh again
}

const (
	minSize = 8
	maxLoad = 0.8
)

func (r *keyRef) bytes() string { return unsafe.String(r.ptr, r.len) }

func (r *keyRef) is(name, key string) bool {
	b := r.bytes()
	return len(b) == len(name)+1+len(key) && b[len(name)] == 0 && b[:len(name)] == name && b[len(name)+1:] == key
}

// newRef copies name and key into one allocation.
func newRef(name, key string) keyRef {
	b := make([]byte, len(name)+1+len(key))
	copy(b, name)
	copy(b[len(name)+1:], key)
	return keyRef{ptr: unsafe.SliceData(b), len: uint16(len(b))}
}

// hashOf is the hash of an identity from the hash of its name.
func hashOf(seed maphash.Seed, nameHash uint64, key string) uint64 {
	return mix(maphash.String(seed, key) + nameHash)
}

// rehash recomputes the hash of a stored identity.
func (r *keyRef) rehash(seed maphash.Seed) uint64 {
	b := r.bytes()
	for i := 0; i < len(b); i++ {
		if b[i] == 0 {
			return hashOf(seed, maphash.String(seed, b[:i]), b[i+1:])
		}
	}
	panic("memstore: stored identity without a name separator")
}

// mix is the 64-bit finalizer of MurmurHash3: every output bit depends on
// every input bit, so the shard (top bits), the home slot (low 32 bits)
// and the control tag (bits 32-38) are independent.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func tag(h uint64) uint8 { return 0x80 | uint8(h>>32)&0x7f }

// home maps the hash to a slot index in [0, size) (Lemire's fast range).
func home(h uint64, size int) int { return int((h & 0xffffffff) * uint64(size) >> 32) }

// find returns the slot of (name, key), or, when it is absent, -1 and the
// empty slot where it would go.
func (t *table[S]) find(h uint64, name, key string) (at, free int) {
	if len(t.ctrl) == 0 {
		return -1, -1
	}
	tg := tag(h)
	i := home(h, len(t.ctrl))
	for {
		c := t.ctrl[i]
		if c == 0 {
			return -1, i
		}
		if c == tg && t.slots[i].ref.is(name, key) {
			return i, -1
		}
		if i++; i == len(t.ctrl) {
			i = 0
		}
	}
}

// insert puts ref at the free slot that find returned (-1: look for it),
// growing the table first when it is full enough. It returns the slot index.
func (t *table[S]) insert(h uint64, free int, ref keyRef, seed maphash.Seed) int {
	if len(t.ctrl) == 0 || float64(t.n+1) > maxLoad*float64(len(t.ctrl)) {
		t.resize(max(minSize, len(t.ctrl)*3/2+1), seed)
		free = -1
	}
	if free < 0 {
		free = t.freeSlot(h)
	}
	t.ctrl[free] = tag(h)
	t.slots[free] = slot[S]{ref: ref}
	t.n++
	return free
}

func (t *table[S]) freeSlot(h uint64) int {
	i := home(h, len(t.ctrl))
	for t.ctrl[i] != 0 {
		if i++; i == len(t.ctrl) {
			i = 0
		}
	}
	return i
}

// remove empties slot i, shifting back the entries of its probe run that
// would no longer be found (backward-shift deletion: no tombstones).
func (t *table[S]) remove(i int, seed maphash.Seed) {
	size := len(t.ctrl)
	j := i
	for {
		if j++; j == size {
			j = 0
		}
		if t.ctrl[j] == 0 {
			break
		}
		// The entry at j may move to i if its home is not in (i, j].
		k := home(t.slots[j].ref.rehash(seed), size)
		if i <= j && (k <= i || k > j) || i > j && (k <= i && k > j) {
			t.ctrl[i], t.slots[i] = t.ctrl[j], t.slots[j]
			i = j
		}
	}
	t.ctrl[i] = 0
	t.slots[i] = slot[S]{} // let the key and any state memory go
	t.n--
}

// resize rehashes every entry into a table of the given size.
func (t *table[S]) resize(size int, seed maphash.Seed) {
	old, oldCtrl := t.slots, t.ctrl
	t.ctrl, t.slots = make([]uint8, size), make([]slot[S], size)
	for i, c := range oldCtrl {
		if c != 0 {
			h := old[i].ref.rehash(seed)
			j := t.freeSlot(h)
			t.ctrl[j], t.slots[j] = c, old[i]
		}
	}
}

// shrink halves an oversized table after deletions.
func (t *table[S]) shrink(seed maphash.Seed) {
	if len(t.ctrl) > minSize && t.n < len(t.ctrl)/5 {
		if t.n == 0 {
			t.ctrl, t.slots = nil, nil
			return
		}
		t.resize(max(minSize, int(float64(t.n)/maxLoad*1.5)+1), seed)
	}
}
