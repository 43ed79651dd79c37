package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpWidth is the width the flags' descriptions are wrapped to.
const helpWidth = 100

// writeHelp writes c's help to w: its usage line, what it does, its
// subcommands by group, its flags with their defaults, and where to read
// more.
func writeHelp(w io.Writer, c *cobra.Command) {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n", c.UseLine())
	if c.Long != "" {
		fmt.Fprintf(&b, "%s\n", strings.TrimRight(c.Long, "\n"))
	} else {
		fmt.Fprintf(&b, "%s.\n", c.Short)
	}
	writeCommands(&b, c)
	if c.HasAvailableLocalFlags() {
		fmt.Fprintf(&b, "\nFlags:\n%s", flagUsages(c.LocalFlags()))
	}
	if c.HasAvailableInheritedFlags() {
		fmt.Fprintf(&b, "\nGlobal flags:\n%s", c.InheritedFlags().FlagUsagesWrapped(helpWidth))
	}
	if c.HasAvailableSubCommands() {
		path := strings.TrimPrefix(c.CommandPath(), c.Root().Name())
		fmt.Fprintf(&b, "\nRun '%s help%s <command>' (or '%s <command> --help') for a command's help.\n", c.Root().Name(), path, c.CommandPath())
	}
	_, _ = io.WriteString(w, b.String())
}

// writeCommands lists c's subcommands, under their groups' titles; those of
// no group of c's come last.
func writeCommands(b *strings.Builder, c *cobra.Command) {
	cmds := listed(c)
	width := 0
	for _, sub := range cmds {
		width = max(width, len(sub.Name()))
	}
	rest := "Commands:"
	if len(c.Groups()) > 0 {
		rest = "Other commands:"
	}
	section := func(title string, in func(*cobra.Command) bool) {
		for _, sub := range cmds {
			if in(sub) {
				if title != "" {
					fmt.Fprintf(b, "\n%s\n", title)
					title = ""
				}
				fmt.Fprintf(b, "  %-*s  %s\n", width, sub.Name(), sub.Short)
			}
		}
	}
	for _, g := range c.Groups() {
		section(g.Title, func(sub *cobra.Command) bool { return sub.GroupID == g.ID })
	}
	section(rest, func(sub *cobra.Command) bool { return !c.ContainsGroup(sub.GroupID) })
}

// listed are the subcommands c's help lists: the available ones and help.
func listed(c *cobra.Command) []*cobra.Command {
	var cmds []*cobra.Command
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() || sub.Name() == "help" {
			cmds = append(cmds, sub)
		}
	}
	return cmds
}

// newHelpCmd is `sluice help [command]`: the command's help on stdout.
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "print a command's help",
		Long:  "Prints the help of a command (of sluice itself without one): what it does, its flags and their defaults.",
		ValidArgsFunction: func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			c, _, err := root.Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, sub := range listed(c) {
				if strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			c, rest, err := root.Find(args)
			if err != nil {
				return usage(err)
			}
			if len(rest) > 0 {
				return unknownCommand(c, rest[0])
			}
			c.InitDefaultHelpFlag()
			c.InitDefaultVersionFlag()
			return c.Help()
		},
	}
}

// flagUsages lists fs's flags, under the titles of their groups (see
// inGroup) when they have some, in groupOrder; flags of no group come
// first.
func flagUsages(fs *pflag.FlagSet) string {
	order := []string{""}
	groups := map[string]*pflag.FlagSet{}
	fs.VisitAll(func(f *pflag.Flag) {
		g := ""
		if a := f.Annotations[groupAnnotation]; len(a) > 0 {
			g = a[0]
		}
		if groups[g] == nil {
			groups[g] = pflag.NewFlagSet(g, pflag.ContinueOnError)
		}
		groups[g].AddFlag(f)
	})
	if len(groups) == 1 && groups[""] != nil {
		return fs.FlagUsagesWrapped(helpWidth)
	}
	var b strings.Builder
	for _, name := range append(order, groupOrder...) {
		if g := groups[name]; g != nil {
			if name != "" {
				fmt.Fprintf(&b, "\n%s:\n", name)
			}
			b.WriteString(g.FlagUsagesWrapped(helpWidth))
		}
	}
	return b.String()
}
