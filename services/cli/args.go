package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// UsageError is a command line that could not be understood: one line
// saying what and how to get help. It is an ErrUsage (exit code 2).
type UsageError struct {
	// Cmd is the command refused ("conch sandbox exec"), when known.
	Cmd string
	Msg string
}

// Error is the message, one line, after the command when known.
func (e *UsageError) Error() string {
	if e.Cmd == "" {
		return e.Msg
	}
	return e.Cmd + ": " + e.Msg
}

// Is makes a UsageError an ErrUsage.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

// parseFlags parses fs's flags wherever they stand among args, before or
// after the positional arguments, and returns those in order; everything
// after "--" is positional. cmd ("conch sandbox exec") names the command
// in a bad flag's one-line error.
func parseFlags(fs *flag.FlagSet, cmd string, args []string) ([]string, error) {
	// The flag package would print the error and every flag's usage; the
	// error alone, with a suggestion, is said once by the caller.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, FlagError(fs, cmd, err)
		}
		rest := fs.Args()
		// Parse stops at "--", which it consumes, or at a positional.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	return pos, nil
}

// FlagError turns an error of fs.Parse into a one-line UsageError naming
// cmd, with the closest flag fs has when the flag is unknown. Help asked
// for (flag.ErrHelp) is returned as it is.
func FlagError(fs *flag.FlagSet, cmd string, err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	help := fmt.Sprintf("see '%s --help'", cmd)
	msg := err.Error()
	if i := strings.Index(msg, "flag provided but not defined: -"); i >= 0 {
		name := strings.TrimLeft(msg[i+len("flag provided but not defined: "):], "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := Suggest(name, names); s != "" {
			return &UsageError{Cmd: cmd, Msg: fmt.Sprintf("unknown flag %s; did you mean %s? (%s)", flagName(name), flagName(s), help)}
		}
		return &UsageError{Cmd: cmd, Msg: fmt.Sprintf("unknown flag %s (%s)", flagName(name), help)}
	}
	if _, after, ok := strings.Cut(msg, "parse flags: "); ok {
		msg = after
	}
	return &UsageError{Cmd: cmd, Msg: fmt.Sprintf("%s (%s)", msg, help)}
}

// UnknownCommand is the error for word, no command of parent ("conch
// sandbox"), whose commands are cmds: one line, with the closest command.
func UnknownCommand(parent, word string, cmds []string) error {
	if s := Suggest(word, cmds); s != "" {
		return &UsageError{Cmd: parent, Msg: fmt.Sprintf("unknown command %q; did you mean %q? (see '%s --help')", word, s, parent)}
	}
	return &UsageError{Cmd: parent, Msg: fmt.Sprintf("unknown command %q (see '%s --help')", word, parent)}
}

// flagName writes a flag as it is typed: -m, --server.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// Suggest returns the candidate closest to word, when one is close enough
// to be what was meant (a prefix of at least two characters, or at most
// two edits away, fewer for short words), else "".
func Suggest(word string, candidates []string) string {
	word = strings.ToLower(word)
	best, bestDist := "", -1
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	for _, c := range sorted {
		d := editDistance(word, strings.ToLower(c))
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := 2
	if len(word) <= 3 {
		limit = 1
	}
	if bestDist >= 0 && bestDist <= limit && bestDist < len(word) {
		return best
	}
	if len(word) >= 2 {
		for _, c := range sorted {
			if strings.HasPrefix(strings.ToLower(c), word) {
				return c
			}
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// usageEntry is one command of a group's usage text: its name ("allowlist
// add"), its synopsis ("allowlist add AGENT PATTERN") and what it does.
type usageEntry struct{ name, synopsis, doc string }

// usageEntries reads the "Commands" section of a group's usage text: a
// line indented by two spaces starts an entry, its synopsis and its doc
// parted by two spaces or more; a line indented further goes on with the
// doc.
func usageEntries(usage string) []usageEntry {
	var entries []usageEntry
	in := false
	for line := range strings.Lines(usage) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "Commands"):
			in = true
			continue
		case !in:
			continue
		case strings.TrimSpace(line) == "":
			return entries
		case strings.HasPrefix(line, "   ") && len(entries) > 0:
			e := &entries[len(entries)-1]
			e.doc = strings.TrimSpace(e.doc + " " + strings.TrimSpace(line))
			continue
		}
		text := strings.TrimSpace(line)
		synopsis, doc := text, ""
		if i := strings.Index(text, "  "); i >= 0 {
			synopsis, doc = text[:i], strings.TrimSpace(text[i:])
		}
		var name []string
		for _, w := range strings.Fields(synopsis) {
			if w != strings.ToLower(w) || strings.ContainsAny(w, "[]<>|()-") {
				break
			}
			name = append(name, w)
		}
		entries = append(entries, usageEntry{name: strings.Join(name, " "), synopsis: synopsis, doc: doc})
	}
	return entries
}
