package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Entry is one allowlist pattern.
type Entry struct {
	// ID identifies the entry for bookkeeping (lastUsedAt and friends).
	ID string
	// Pattern is a case-insensitive glob on the resolved binary path.
	Pattern string
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
		out = append(out, compiledEntry{id: e.ID, pattern: lp, prefix: prefix})
	}
	return out
}

// match returns the entry matching the resolved path p, if any.
func matchEntries(entries []compiledEntry, p string) (string, bool) {
	lp := strings.ToLower(p)
	for _, e := range entries {
		if !strings.HasPrefix(lp, e.prefix) {
			continue
		}
		// Patterns were validated when compiled.
		if doublestar.MatchUnvalidated(e.pattern, lp) {
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
