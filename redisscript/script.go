package redisscript

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
)

// The decision scripts. Each algorithm is two Lua fragments, a
// transcription of its internal/algo file: lua/<algorithm>.decide.lua and
// lua/<algorithm>.undo.lua. Go splices them into lua/main.lua, after
// lua/head.lua (and lua/bigint.lua for the sliding window counter): one
// script per algorithm, which a call whose limits share an algorithm runs
// (the usual case, and the leanest), and one with every algorithm for the
// others. Fragments are plain statements, not functions: Redis runs a
// script's top level at every call, and each closure or table it creates
// costs (splicing made decisions a third faster than calling per-algorithm
// functions).
//
//go:embed lua/*.lua
var luaFiles embed.FS

// scriptProtocol is the version of the scripts' KEYS/ARGV/reply layout; it
// must match PROTOCOL in lua/head.lua.
const (
	scriptProtocol    = 3
	scriptProtocolArg = "3"
)

// scriptParams is the number of ARGV entries per key; replyValues the
// number of reply values per key.
const (
	scriptParams = 13
	replyValues  = 5
)

// headNames are the ops' and flags' names in lua/head.lua, with Go's
// values: the script and Go must agree on them.
var headNames = []string{
	`local OP_DECIDE = "` + string(opDecide) + `"`,
	`local OP_CHARGE = "` + string(opCharge) + `"`,
	`local OP_UNDO = "` + string(opUndo) + `"`,
	`local OP_PEEK = "` + string(opPeek) + `"`,
	`local OP_RESET = "` + string(opReset) + `"`,
	`local OP_BATCH = "` + string(opBatch) + `"`,
	"local ALLOWED = " + strconv.Itoa(flagAllowed),
	"local CLAMPED = " + strconv.Itoa(flagClamped),
	"local UNSPENT = " + strconv.Itoa(flagUnspent),
	"local FAILED = " + strconv.Itoa(flagFailed),
}

var algorithmFiles = [...]string{
	sluice.TokenBucket:   "tokenbucket",
	sluice.GCRA:          "gcra",
	sluice.FixedWindow:   "fixedwindow",
	sluice.SlidingLog:    "slidinglog",
	sluice.SlidingWindow: "slidingwindow",
	sluice.LeakyBucket:   "leakybucket",
	sluice.Concurrency:   "concurrency",
}

// luaScript is a composed script and the SHA1 EVALSHA names it by.
type luaScript struct{ src, sha string }

var (
	// perAlgorithm[a] decides calls whose limits all use algorithm a.
	perAlgorithm [len(algorithmFiles)]luaScript
	// mixed decides any call.
	mixed luaScript
)

func init() {
	head := file("head")
	if !strings.Contains(head, `local PROTOCOL = "`+scriptProtocolArg+`"`) {
		panic("redisscript: lua/head.lua does not speak protocol " + scriptProtocolArg) // a build defect
	}
	for _, name := range headNames {
		if !strings.Contains(head, name) {
			panic("redisscript: lua/head.lua does not say " + name + " as Go does") // a build defect
		}
	}
	all := make([]sluice.Algorithm, len(algorithmFiles))
	for a := range algorithmFiles {
		all[a] = sluice.Algorithm(a)
		perAlgorithm[a] = compose(sluice.Algorithm(a))
	}
	mixed = compose(all...)
}

// scriptFor returns the script for a call on rs.
func scriptFor(rs []request) luaScript {
	a := rs[0].c.ints.Algorithm
	for _, r := range rs[1:] {
		if r.c.ints.Algorithm != a {
			return mixed
		}
	}
	return perAlgorithm[a]
}

func compose(algs ...sluice.Algorithm) luaScript {
	var decide, undo strings.Builder
	bigint := false
	for i, a := range algs {
		cond := "elseif"
		if i == 0 {
			cond = "if"
		}
		fmt.Fprintf(&decide, "%s alg == %d then\n%s\n", cond, a, fragment(a, "decide"))
		fmt.Fprintf(&undo, "%s alg == %d then\n%s\n", cond, a, fragment(a, "undo"))
		bigint = bigint || a == sluice.SlidingWindow
	}
	for _, b := range []*strings.Builder{&decide, &undo} {
		b.WriteString("else\n  error(\"sluice: unknown algorithm \" .. tostring(alg))\nend")
	}
	var src strings.Builder
	src.WriteString(file("head"))
	if bigint {
		src.WriteString(file("bigint"))
	}
	main := strings.ReplaceAll(file("main"), "--@DECIDE@", decide.String())
	src.WriteString(strings.Replace(main, "--@UNDO@", undo.String(), 1))
	sum := sha1.Sum([]byte(src.String()))
	return luaScript{src: src.String(), sha: hex.EncodeToString(sum[:])}
}

func fragment(a sluice.Algorithm, part string) string {
	return file(algorithmFiles[a] + "." + part)
}

func file(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redisscript: missing embedded script " + name + ": " + err.Error()) // a build defect
	}
	return string(b) + "\n"
}
