package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"
)

// The decision script: one Lua file per algorithm (lua/<algorithm>.lua,
// each a transcription of internal/algo), a prelude of exact integer
// helpers and a dispatcher, composed once into the one script every call
// runs with EVALSHA, so that a decision over several limits of mixed
// algorithms is still one atomic call.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// scriptProtocol is the version of the script's KEYS/ARGV/reply layout; it
// must match PROTOCOL in lua/prelude.lua.
const scriptProtocol = 1

// scriptParams is the number of ARGV entries per key (NPARAMS).
const scriptParams = 12

var luaOrder = []string{
	"prelude", "tokenbucket", "gcra", "fixedwindow", "slidinglog",
	"slidingwindow", "leakybucket", "concurrency", "main",
}

// script is the composed source and its SHA1 (what EVALSHA names).
var script, scriptSHA = compose()

func compose() (string, string) {
	var b strings.Builder
	for _, name := range luaOrder {
		src, err := luaFiles.ReadFile("lua/" + name + ".lua")
		if err != nil {
			panic("redisstore: missing embedded script " + name + ": " + err.Error()) // a build defect
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	sum := sha1.Sum([]byte(b.String()))
	return b.String(), hex.EncodeToString(sum[:])
}
