package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// sessionIDBytes is the length of a session ID before its base64url
// encoding (43 characters in the cookie).
const sessionIDBytes = 32

// sessions is the console's logins: a bounded in-memory map from a
// session's key to its expiry. The cookie holds a random ID; the map
// holds HMAC-SHA256(token, ID), so that a console over another token
// knows none of this one's sessions, and the map alone lets no one in.
// Expired sessions are dropped lazily (when met, and before an eviction);
// when the map is full, a new session evicts the one that ends first,
// which is the oldest, every session having the same life.
//
// The zero value is not usable; newSessions makes one. It is safe for
// concurrent use.
type sessions struct {
	token []byte // keys the HMAC of IDs
	limit int    // at most this many sessions

	mu   sync.Mutex
	ends map[[sha256.Size]byte]time.Time // guarded by mu
}

func newSessions(token []byte, limit int) *sessions {
	return &sessions{token: token, limit: limit, ends: make(map[[sha256.Size]byte]time.Time)}
}

// begin starts a session that ends at expires, at the instant now, and
// returns its ID: 32 bytes of crypto/rand, base64url without padding.
func (s *sessions) begin(now, expires time.Time) string {
	raw := make([]byte, sessionIDBytes)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails
	id := base64.RawURLEncoding.EncodeToString(raw)
	key := s.key(raw)

	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ends) >= s.limit {
		s.dropExpiredLocked(now)
	}
	for len(s.ends) >= s.limit {
		s.dropFirstLocked()
	}
	s.ends[key] = expires
	return id
}

// valid reports whether id is a session that has not ended at now. An
// expired one is dropped.
func (s *sessions) valid(id string, now time.Time) bool {
	key, ok := s.parse(id)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	end, ok := s.ends[key]
	if ok && !now.Before(end) {
		delete(s.ends, key)
		return false
	}
	return ok
}

// end ends the session id at once; an unknown ID is a no-op.
func (s *sessions) end(id string) {
	key, ok := s.parse(id)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ends, key)
}

// parse decodes a cookie's ID into its key; ok is false for anything that
// is not 32 bytes in canonical base64url (Strict: one ID, one spelling).
func (s *sessions) parse(id string) (key [sha256.Size]byte, ok bool) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(id)
	if err != nil || len(raw) != sessionIDBytes {
		return key, false
	}
	return s.key(raw), true
}

func (s *sessions) key(raw []byte) (key [sha256.Size]byte) {
	m := hmac.New(sha256.New, s.token)
	m.Write([]byte("sluice relay console session\x00"))
	m.Write(raw)
	m.Sum(key[:0])
	return key
}

// dropExpiredLocked drops the sessions ended at now. s.mu must be held.
func (s *sessions) dropExpiredLocked(now time.Time) {
	for key, end := range s.ends {
		if !now.Before(end) {
			delete(s.ends, key)
		}
	}
}

// dropFirstLocked drops the session that ends first. s.mu must be held.
func (s *sessions) dropFirstLocked() {
	var first [sha256.Size]byte
	var firstEnd time.Time
	found := false
	for key, end := range s.ends {
		if !found || end.Before(firstEnd) {
			first, firstEnd, found = key, end, true
		}
	}
	delete(s.ends, first)
}
