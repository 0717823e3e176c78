package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// RunFunc runs a client command: the command line after its name, the
// standard streams. Help asked for (-h, --help, help) is printed on
// stdout, without a key or a server, and returned as flag.ErrHelp, which
// conch exits 0 on, as it does for the server commands.
type RunFunc func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error

// Command is a client command of conch, as conch --help lists it and the
// CLI reference (docs/reference/cli.md) documents it.
type Command struct {
	// Name is the word after conch: "gateways".
	Name string
	// Summary is its line in conch --help.
	Summary string
	// Run runs it.
	Run   RunFunc
	group *group
}

// Commands are conch's client commands, in the order conch --help lists
// them.
func Commands() []Command {
	noStdin := func(run func(context.Context, []string, io.Writer, io.Writer) error) RunFunc {
		return func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
			return run(ctx, args, stdout, stderr)
		}
	}
	var cmds []Command
	for _, c := range []struct {
		g   *group
		run RunFunc
	}{
		{loginGroup, Login},
		{logoutGroup, noStdin(Logout)},
		{approvalsGroup, noStdin(Approvals)},
		{auditGroup, noStdin(Audit)},
		{chatGroup, Chat},
		{filesGroup, noStdin(Files)},
		{gatewaysGroup, noStdin(Gateways)},
		{mcpGroup, MCP},
		{nodesGroup, noStdin(Nodes)},
		{sandboxGroup, RunSandbox},
		{snapshotsGroup, noStdin(Snapshots)},
		{templatesGroup, Templates},
	} {
		cmds = append(cmds, Command{Name: c.g.name, Summary: c.g.summary, Run: c.run, group: c.g})
	}
	return cmds
}

// LookupCommand returns the client command named name.
func LookupCommand(name string) (Command, bool) {
	for _, c := range Commands() {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}

// Subcommands are the command lines after c's name that have a help of
// their own, in the order c's usage lists them: each command ("create",
// "allowlist add"), preceded by the first word of those of two words
// ("allowlist"). A command that is no group has none.
func (c Command) Subcommands() []string {
	var subs []string
	for _, e := range c.group.commands() {
		if first, _, two := strings.Cut(e.name, " "); two && !slices.Contains(subs, first) {
			subs = append(subs, first)
		}
		subs = append(subs, e.name)
	}
	return subs
}

// serverUsage is the part of conch --help that lists the commands main
// runs itself: the services and the commands that set a cluster up. It is
// here, beside the client commands Usage lists after it, so that the CLI
// reference shows what conch prints.
const serverUsage = `usage: conch <command> [flags]

Commands:
  dev         run the whole cluster in one process (embedded etcd, scripted model)
  router      run the router service (public HTTP, REST, agent loop)
  executor    run the executor service (sandboxes)
  approval    run the approval service (exec policy, approvals)
  workspace   run the workspace service (persistent workspaces)
  etcd        run one member of a static etcd cluster (embedded etcd)
  etcd-pki    make the etcd CA and the members', root's and each service's certificates (--dir --hosts)
  etcd-auth   make each service an etcd user limited to its keys, then turn etcd's auth on (as root)
  minio-auth  make each service a MinIO user limited to its own bucket (as root)
  secrets     rotate: re-seal every stored secret with the first key of the keyring
  node        pair this machine with a cluster: run the commands addressed to it (--join --name --token)
`

// Usage is conch's usage, which conch --help prints: the server commands,
// then the client commands with their common flags.
func Usage() string {
	var b strings.Builder
	b.WriteString(serverUsage)
	var common []string
	new(Options).newFlagSet("").VisitAll(func(f *flag.Flag) { common = append(common, flagName(f.Name)) })
	fmt.Fprintf(&b, "\nClient commands (common flags: %s):\n", strings.Join(common, ", "))
	for _, c := range Commands() {
		fmt.Fprintf(&b, "  %-10s  %s\n", c.Name, c.Summary)
	}
	b.WriteString(`
Run "conch <command> -h" for the flags of a command, "conch version" for
the build.
`)
	return b.String()
}

// group is a client command with its commands (conch gateways: list, get,
// …) or a command alone (conch chat), and what its help is made of: a
// hand-written usage and the flag set of each command, so that a flag is
// described once, where it is defined.
type group struct {
	// name is the word after conch.
	name string
	// summary is the group's line in conch --help.
	summary string
	// usage is the hand-written usage: the synopsis and the prose, and for
	// a group of commands a "Commands" section (see usageEntries), then
	// notes about them all. It lists no flag: help lists those of the
	// flag sets.
	usage string
	// prose holds, by command name, what a command's help says beyond
	// its line under "Commands".
	prose map[string]string
	// args holds, by command name ("" for a command alone), how many
	// positional arguments the command takes; one missing here takes
	// none.
	args map[string]arity
	// fallback is the command run when the command line names none; ""
	// makes one required.
	fallback string
	// flags returns the flag set of command name ("" for a command alone,
	// and for the flags every command of the group takes), bound to new
	// values. The command itself builds the same set, bound to its own.
	flags func(name string) *flag.FlagSet
}

// arity is how many positional arguments a command takes; max < 0 is no
// limit.
type arity struct{ min, max int }

// full is command name of g as typed: "conch gateways create".
func (g *group) full(name string) string {
	return strings.TrimSpace("conch " + g.name + " " + name)
}

// commands are the commands of g's usage; none for a command alone.
func (g *group) commands() []usageEntry { return usageEntries(g.usage) }

// entry is g's command named name.
func (g *group) entry(name string) (usageEntry, bool) {
	for _, e := range g.commands() {
		if e.name == name {
			return e, true
		}
	}
	return usageEntry{}, false
}

// next are the words that may follow prefix ("", or "allowlist" of
// "allowlist add") in the name of a command of g, in the usage's order.
func (g *group) next(prefix string) []string {
	var words []string
	for _, e := range g.commands() {
		rest, ok := e.name, true
		if prefix != "" {
			rest, ok = strings.CutPrefix(e.name, prefix+" ")
		}
		if w, _, _ := strings.Cut(rest, " "); ok && !slices.Contains(words, w) {
			words = append(words, w)
		}
	}
	return words
}

// takesValue reports whether flag name, as one of g's flag sets defines
// it, is followed by its value as the next argument: it is no bool flag.
func (g *group) takesValue(name string) bool {
	cmds := []string{""}
	for _, e := range g.commands() {
		cmds = append(cmds, e.name)
	}
	for _, cmd := range cmds {
		if f := g.flags(cmd).Lookup(name); f != nil {
			b, ok := f.Value.(interface{ IsBoolFlag() bool })
			return !ok || !b.IsBoolFlag()
		}
	}
	return false
}

// lookup finds, word by word, the command args name: each word is the
// first argument that is neither a flag nor the value of one, so that
// flags may stand before the command too (conch files -o json ls). It
// returns the name as far as args give it ("allowlist" of "allowlist
// add"), the word that named no command ("" when args ran out first), and
// args without the command's words.
func (g *group) lookup(args []string) (name, bad string, rest []string) {
	rest = args
	for {
		if _, ok := g.entry(name); ok {
			return name, "", rest
		}
		i := g.wordIndex(rest)
		if i < 0 {
			return name, "", rest
		}
		if !slices.Contains(g.next(name), rest[i]) {
			return name, rest[i], rest
		}
		name = strings.TrimSpace(name + " " + rest[i])
		rest = slices.Delete(slices.Clone(rest), i, i+1)
	}
}

// wordIndex is the index in args of the first argument that is neither a
// flag nor the value of one, or -1; "--" ends the search. A flag no flag
// set of g defines is taken for one without a value: parsing it will
// refuse it.
func (g *group) wordIndex(args []string) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return -1
		case a == "-" || !strings.HasPrefix(a, "-"):
			return i
		case !strings.Contains(a, "=") && g.takesValue(strings.TrimLeft(a, "-")):
			i++
		}
	}
	return -1
}

// parse reads a command line of g. When it asks for help, parse prints
// that help and returns flag.ErrHelp. Otherwise it returns the command
// the line names (its fallback when it names none; "" for a command
// alone) and its positional arguments, the flags parsed into the set
// flags returns for that command: the command's own values.
func (g *group) parse(stdout io.Writer, args []string, flags func(name string) *flag.FlagSet) (string, []string, error) {
	if wantsHelp(args) {
		g.printHelp(stdout, args)
		return "", nil, flag.ErrHelp
	}
	name, rest, err := g.command(args)
	if err != nil {
		return "", nil, err
	}
	pos, err := parseFlags(flags(name), g.full(name), rest)
	if err != nil {
		return "", nil, err
	}
	n := g.args[name]
	switch {
	case len(pos) >= n.min && (n.max < 0 || len(pos) <= n.max):
		return name, pos, nil
	case n.max == 0:
		return "", nil, &UsageError{Cmd: g.full(name), Msg: fmt.Sprintf("unexpected arguments %q (see '%s --help')", pos, g.full(name))}
	}
	e, _ := g.entry(name)
	return "", nil, &UsageError{Cmd: g.full(name), Msg: fmt.Sprintf("want %s (see '%s --help')", e.synopsis, g.full(name))}
}

// command is the command args name and args without its words. A group
// of commands needs one, or a fallback: a word missing or naming no
// command is a usage error, said before anything is sent anywhere.
func (g *group) command(args []string) (string, []string, error) {
	if len(g.commands()) == 0 {
		return "", args, nil
	}
	name, bad, rest := g.lookup(args)
	if _, ok := g.entry(name); ok {
		return name, rest, nil
	}
	if bad != "" {
		return "", nil, UnknownCommand(g.full(name), bad, g.next(name))
	}
	if name == "" && g.fallback != "" {
		return g.fallback, rest, nil
	}
	return "", nil, &UsageError{Cmd: g.full(name), Msg: fmt.Sprintf("missing command: %s (see '%s --help')", orList(g.next(name)), g.full(name))}
}

// printHelp writes the help of what args name, as far as they name it:
// a command's (its line of the usage as synopsis and summary, its prose,
// the notes of the usage, its flags), that of the first word of commands
// of two (allowlist: the commands it starts), else g's (the usage).
func (g *group) printHelp(w io.Writer, args []string) {
	if len(args) > 0 && args[0] == "help" {
		args = args[1:]
	}
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[:i]
	}
	name, _, _ := g.lookup(args)
	e, isCommand := g.entry(name)
	switch {
	case isCommand:
		fmt.Fprintf(w, "usage: %s %s\n", g.full(""), e.synopsis)
		if e.doc != "" {
			fmt.Fprintf(w, "\n%s\n", strings.Join(wrap(strings.ToUpper(e.doc[:1])+e.doc[1:]+".", summaryWidth), "\n"))
		}
		if p := g.prose[name]; p != "" {
			fmt.Fprintf(w, "\n%s", p)
		}
		for _, note := range g.notes() {
			fmt.Fprintf(w, "\n%s\n", note)
		}
	case name != "":
		fmt.Fprintf(w, "usage: %s <command> [flags]\n\nCommands:\n", g.full(name))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, e := range g.commands() {
			if strings.HasPrefix(e.name, name+" ") {
				fmt.Fprintf(tw, "  %s\t%s\n", e.synopsis, e.doc)
			}
		}
		tw.Flush()
	default:
		fmt.Fprint(w, g.usage)
	}
	flagsOf := ""
	if isCommand {
		flagsOf = name
	}
	printFlags(w, g.flags(flagsOf))
	switch {
	case isCommand:
		fmt.Fprintf(w, "\nRun '%s --help' for all its commands.\n", g.full(""))
	case len(g.commands()) > 0:
		fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's flags.\n", g.full(name))
	}
}

// notes are the paragraphs of g's usage after its commands, which concern
// them all.
func (g *group) notes() []string {
	_, rest, ok := strings.Cut(g.usage, "\nCommands")
	if !ok {
		return nil
	}
	var notes []string
	for _, p := range strings.Split(rest, "\n\n")[1:] {
		if p = strings.Trim(p, "\n"); p != "" {
			notes = append(notes, p)
		}
	}
	return notes
}

// printFlags writes the flags of fs as flag.PrintDefaults does, but each
// named as it is typed (-o, --server), its usage wrapped, in two blocks:
// the command's own under "Flags:", then those Options.AddFlags defines
// under "Common flags:". A block without flags is left out.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	common := new(Options).newFlagSet("")
	isCommon := func(f *flag.Flag) bool {
		c := common.Lookup(f.Name)
		return c != nil && c.Usage == f.Usage
	}
	for _, block := range []struct {
		title  string
		common bool
	}{{"Flags", false}, {"Common flags", true}} {
		var b strings.Builder
		fs.VisitAll(func(f *flag.Flag) {
			if isCommon(f) == block.common {
				writeFlag(&b, f)
			}
		})
		if b.Len() > 0 {
			fmt.Fprintf(w, "\n%s:\n%s", block.title, b.String())
		}
	}
}

// Lines of help made from usage texts are at most so wide: a flag's
// usage, indented by 8, and a command's summary fit in 80 columns.
const (
	flagUsageWidth = 70
	summaryWidth   = 78
)

// writeFlag writes f: its name and the placeholder of its value (the
// usage's `QUOTED` word, else its type), then, below, its usage and its
// default unless that is the zero value.
func writeFlag(b *strings.Builder, f *flag.Flag) {
	placeholder, usage := flag.UnquoteUsage(f)
	b.WriteString("  " + flagName(f.Name))
	if placeholder != "" {
		b.WriteString(" " + placeholder)
	}
	if d := defaultValue(f); d != "" {
		usage += " (default " + d + ")"
	}
	b.WriteString("\n")
	for _, line := range wrap(usage, flagUsageWidth) {
		b.WriteString("        " + line + "\n")
	}
}

// wrap cuts text into lines of at most width bytes, between words; a word
// longer than width stands alone on its line.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		line = strings.TrimPrefix(line+" "+word, " ")
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// defaultValue is f's default as help shows it, quoted for a string; ""
// for the zero value, which goes without saying.
func defaultValue(f *flag.Flag) string {
	switch f.DefValue {
	case "", "false", "0", "0s":
		return ""
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if _, ok := g.Get().(string); ok {
			return strconv.Quote(f.DefValue)
		}
	}
	return f.DefValue
}

// orList joins words as a sentence does: "list, add or rm".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// optionalBool is a bool flag that tells whether the command line gave
// it: value is nil until then, so that an update changes only what was
// asked (--shell=false is not the same as no --shell).
type optionalBool struct{ value *bool }

// IsBoolFlag lets the flag stand without a value: --shell.
func (b *optionalBool) IsBoolFlag() bool { return true }

func (b *optionalBool) String() string {
	if b == nil || b.value == nil {
		return ""
	}
	return strconv.FormatBool(*b.value)
}

func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.value = &v
	return nil
}
