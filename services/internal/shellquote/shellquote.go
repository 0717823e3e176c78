// Package shellquote owns how conch writes a string as one word of a POSIX
// shell script: between single quotes, with each single quote inside it
// closing the quotes, escaped, and reopening them, as in
//
//	'it'\''s'
//
// Inside single quotes no shell (dash, bash, busybox) interprets anything,
// so the word is the string's bytes, whatever they are, except a NUL,
// which no shell word can hold and which callers refuse before quoting.
package shellquote

import "strings"

// Append appends s to b as one single-quoted word.
func Append(b *strings.Builder, s string) {
	b.WriteByte('\'')
	for {
		i := strings.IndexByte(s, '\'')
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		b.WriteString(`'\''`)
		s = s[i+1:]
	}
	b.WriteString(s)
	b.WriteByte('\'')
}

// Quote returns s as one single-quoted word.
func Quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	Append(&b, s)
	return b.String()
}
