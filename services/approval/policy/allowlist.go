package policy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Entry is one allowlist or deny-list pattern.
type Entry struct {
	// ID identifies the entry for bookkeeping (lastUsedAt and friends)
	// and in a deny rule's refusal.
	ID string
	// Pattern is a case-insensitive glob on the resolved binary path.
	Pattern string
	// ArgPattern, when set, is a glob the program's arguments must also
	// match, joined by single spaces (argv after the program): `*` is any
	// run of characters, spaces and slashes included, `?` any one
	// character; case-sensitive, like the arguments themselves.
	ArgPattern string
}

// ValidateArgPattern checks that p is a well-formed argument glob.
func ValidateArgPattern(p string) error {
	if strings.ContainsAny(p, "\x00\n\r") {
		return errors.New("argPattern holds a control character")
	}
	_, err := compileArgPattern(p)
	return err
}

// compileArgPattern turns an argument glob into an anchored regexp: `*`
// any run, `?` one character, `[...]` a class, `\x` the literal x.
func compileArgPattern(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^(?s:")
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			if i+1 == len(p) {
				return nil, fmt.Errorf("argPattern %q ends in a lone backslash", p)
			}
			i++
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		case '[':
			j := strings.IndexByte(p[i+1:], ']')
			if j < 0 {
				return nil, fmt.Errorf("argPattern %q has an unclosed [", p)
			}
			class := p[i+1 : i+1+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, "\\", "\\\\") + "]")
			i += j + 1
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	b.WriteString(")$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("argPattern %q is not a valid glob", p)
	}
	return re, nil
}

// ValidatePattern checks that p can match a resolved binary path: it must
// be absolute or start with "~/" (a bare name such as "rg" is refused with
// ErrPatternNotBinary) and be a well-formed glob.
func ValidatePattern(p string) error {
	if p != strings.TrimSpace(p) || p == "" {
		return errors.New(ErrPatternNotBinary)
	}
	if !strings.HasPrefix(p, "/") && p != "~" && !strings.HasPrefix(p, "~/") {
		return errors.New(ErrPatternNotBinary)
	}
	if strings.ContainsAny(p, "\x00\n\r") {
		return fmt.Errorf("%s: pattern holds a control character", ErrPatternNotBinary)
	}
	if !doublestar.ValidatePattern(strings.ToLower(p)) {
		return fmt.Errorf("%s: %q is not a valid glob", ErrPatternNotBinary, p)
	}
	return nil
}

// compiledEntry is an entry ready to match: lowercased, home expanded.
type compiledEntry struct {
	id      string
	pattern string
	// args, when set, the arguments must match too.
	args *regexp.Regexp
	// prefix is the literal start of the pattern, before any glob
	// character: a cheap filter before matching.
	prefix string
}

func compileEntries(entries []Entry, home string) []compiledEntry {
	out := make([]compiledEntry, 0, len(entries))
	for _, e := range entries {
		if ValidatePattern(e.Pattern) != nil {
			// An invalid stored pattern matches nothing rather than
			// everything.
			continue
		}
		var args *regexp.Regexp
		if e.ArgPattern != "" {
			var err error
			if args, err = compileArgPattern(e.ArgPattern); err != nil {
				continue
			}
		}
		p := e.Pattern
		if p == "~" || strings.HasPrefix(p, "~/") {
			if home == "" || !strings.HasPrefix(home, "/") {
				continue
			}
			p = path.Join(home, p[1:])
			if strings.HasSuffix(e.Pattern, "/") {
				p += "/"
			}
		}
		// A trailing slash names a directory: every binary directly in it.
		if strings.HasSuffix(p, "/") {
			p += "*"
		}
		lp := strings.ToLower(p)
		prefix := lp
		if i := strings.IndexAny(lp, "*?[{\\"); i >= 0 {
			prefix = lp[:i]
		}
		out = append(out, compiledEntry{id: e.ID, pattern: lp, prefix: prefix, args: args})
	}
	return out
}

// matchEntries returns the entry matching the resolved path p run with
// args, if any.
func matchEntries(entries []compiledEntry, p string, args []string) (string, bool) {
	lp := strings.ToLower(p)
	joined := strings.Join(args, " ")
	for _, e := range entries {
		if !strings.HasPrefix(lp, e.prefix) {
			continue
		}
		// Patterns were validated when compiled.
		if doublestar.MatchUnvalidated(e.pattern, lp) && (e.args == nil || e.args.MatchString(joined)) {
			return e.id, true
		}
	}
	return "", false
}

// ExactPattern returns the pattern that matches exactly the path p, with
// glob metacharacters escaped; allow-always records binaries with it.
func ExactPattern(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '*', '?', '[', ']', '{', '}', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
