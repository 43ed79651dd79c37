package redisscript

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// Keys. A state lives at
//
//	<prefix>:<len(name)>:<name>:<fingerprint>:{<tag>}
//
// where the fingerprint is the 16 hex digits of the limit's parameters (a
// changed limit finds fresh state) and the tag is "<len(key)>:<key>", or,
// with Options.KeyHMAC, 22 base64url characters of HMAC-SHA256(key) so that
// no raw identity is ever stored in Redis. Lengths make the encoding
// injective whatever bytes names and keys hold. The tag is the key's Redis
// Cluster hash tag: the states of one key under several limits share a
// hash slot, so one script decides them together.
type keyer struct {
	prefix string
	hmacs  *sync.Pool // of hash.Hash, nil without KeyHMAC
}

func newKeyer(prefix string, secret []byte) keyer {
	k := keyer{prefix: prefix}
	if len(secret) > 0 {
		secret = append([]byte(nil), secret...)
		k.hmacs = &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}
	}
	return k
}

// limitPart is the key's prefix for a limit: computed once per limit.
func (k keyer) limitPart(name string, fingerprint uint64) string {
	return fmt.Sprintf("%s:%d:%s:%016x:", k.prefix, len(name), name, fingerprint)
}

// stateKey returns the Redis key of key's state under the limit whose key
// prefix is limitPart, and its hash slot (one allocation).
func (k keyer) stateKey(limitPart, key string) (string, uint16) {
	var b strings.Builder
	if k.hmacs != nil {
		tag := k.hmac(key)
		b.Grow(len(limitPart) + len(tag) + 2)
		b.WriteString(limitPart)
		b.WriteByte('{')
		b.WriteString(tag)
	} else {
		var n [20]byte
		b.Grow(len(limitPart) + len(key) + 8)
		b.WriteString(limitPart)
		b.WriteByte('{')
		b.Write(strconv.AppendInt(n[:0], int64(len(key)), 10))
		b.WriteByte(':')
		b.WriteString(key)
	}
	b.WriteByte('}')
	s := b.String()
	return s, slot(s[len(limitPart)+1 : len(s)-1])
}

// hmac returns the hash tag of key under KeyHMAC.
func (k keyer) hmac(key string) string {
	h := k.hmacs.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	tag := base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:16])
	k.hmacs.Put(h)
	return tag
}

// slot is the Redis Cluster hash slot of a key whose hash tag is tag: the
// CRC16 (XMODEM) of the tag, modulo 16384. Redis takes the tag between the
// first '{' and the first '}' after it; a key containing '}' is tagged by
// its part before it, consistently.
func slot(tag string) uint16 {
	if i := strings.IndexByte(tag, '}'); i > 0 {
		tag = tag[:i]
	}
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^tag[i]]
	}
	return crc & 16383
}

var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
