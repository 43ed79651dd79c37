package redisscript

import "github.com/sluicehq/sluice"

// What the external tests need of the package's insides.

// OpUndo is the op of an undo, as a Client sees it in ARGV[3].
const OpUndo = string(opUndo)

// ScriptOf returns the source and SHA1 of the script that decides calls
// whose limits all use algorithm a.
func ScriptOf(a sluice.Algorithm) (src, sha string) {
	return perAlgorithm[a].src, perAlgorithm[a].sha
}

// StateKey returns the Redis key of key's state under l, and its hash
// slot.
func (s *Store) StateKey(l sluice.Limit, key string) (string, uint16, error) {
	c, err := s.compile(l)
	if err != nil {
		return "", 0, err
	}
	k, slot := s.keys.stateKey(c.limitPart, key)
	return k, slot, nil
}
