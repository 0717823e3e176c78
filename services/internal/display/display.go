// Package display is how conch shows untrusted text — an approval's
// command, cwd, agent, resolved paths, session — to the human who decides
// on it. Every surface (the CLI, `conch chat`, chat notifications, the
// session-mode text and the web page) uses Escape, so the same command
// reads the same everywhere, and what is shown is what would run.
package display

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with everything a human could not see, or would see
// as something else, written as a visible escape. Nothing is dropped or
// shortened, and the escapes are unambiguous because a backslash is
// itself escaped:
//
//   - `\\` for a backslash, `\n` for a newline, `\t` for a tab;
//   - `\xNN` for the other C0 controls and DEL (NN < 0x80) and for each
//     byte of invalid UTF-8 (NN >= 0x80), as in a Go string literal;
//   - `\uNNNN` (BMP) or `\UNNNNNNNN` for every other character that is
//     not plainly visible: C1 controls, format characters (bidi
//     embeddings, overrides and isolates, LRM/RLM/ALM, zero-width
//     characters, U+FEFF, soft hyphen, tags), other default-ignorable
//     characters (variation selectors, Hangul fillers), line and
//     paragraph separators, spaces other than U+0020, private-use
//     characters, noncharacters, unassigned code points and U+FFFD.
func Escape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
			i++
			continue
		}
		i += size
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r > 0xffff && hidden(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		case hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// visible are the categories shown as they are: letters, marks, numbers,
// punctuation and symbols. Anything else — controls (Cc), format (Cf),
// private use (Co), separators other than the ASCII space (Zs, Zl, Zp)
// and unassigned code points (Cn, which no table lists) — is escaped.
var visible = []*unicode.RangeTable{unicode.L, unicode.M, unicode.N, unicode.P, unicode.S}

// hidden reports whether r must be escaped to be seen for what it is.
func hidden(r rune) bool {
	switch {
	case r == ' ':
		return false
	case r == utf8.RuneError, // stands for bytes that were lost
		r&0xfffe == 0xfffe, r >= 0xfdd0 && r <= 0xfdef: // noncharacters
		return true
	}
	// Default-ignorable characters that are letters or marks (Hangul
	// fillers, variation selectors, the combining grapheme joiner) render
	// as nothing too.
	return !unicode.In(r, visible...) || unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}
