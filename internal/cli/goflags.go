package cli

import (
	"strings"
	"unicode"

	"github.com/spf13/cobra"
)

// longFlags respells the one-dash flags of args (-config x, -quota=2: Go's
// flag package's spelling, sluice's before cobra) as pflag's --config x,
// --quota=2, so that command lines written for either work. A one-dash
// word is a flag when it stands where a flag may (not after --, not as the
// value of the flag before it) and its name has at least two characters,
// the first a letter: -h and -v stay one-letter shorthands, and -1 or -5s
// stay values. The flags of the command args name decide which flags take
// a value; shell completion requests (cobra's __complete) are left alone.
func longFlags(root *cobra.Command, args []string) []string {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		return args
	}
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "--") {
			if len(name) < 2 || !unicode.IsLetter(rune(name[0])) {
				continue
			}
			out[len(out)-1] = "-" + a
		}
		// --name value: the value is not a flag, whatever it looks like.
		if f := cmd.Flags().Lookup(name); f != nil && f.NoOptDefVal == "" && !hasValue && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}
