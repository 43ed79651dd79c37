package redisscript

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
)

// Script is a Lua script of another package (the fleet's lease and bucket
// scripts) run the way the store runs its own: EVALSHA, and the script
// itself only after a NOSCRIPT reply — the call did not run, so sending it
// again is no replay. Never any other retry. A Script is a value, safe for
// concurrent use.
type Script struct{ src, sha string }

// NewScript returns src as a Script.
func NewScript(src string) Script {
	sum := sha1.Sum([]byte(src))
	return Script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Run runs the script on c with keys and args.
func (s Script) Run(ctx context.Context, c Client, keys, args []string) ([]int64, error) {
	reply, err := c.EvalSHA(ctx, s.sha, keys, args)
	if re := (*ReplyError)(nil); errors.As(err, &re) && re.NoScript() {
		reply, err = c.Eval(ctx, s.src, keys, args)
	}
	return reply, err
}
