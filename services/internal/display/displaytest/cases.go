// Package displaytest holds the one table of cases every surface that
// shows an approval to a human is tested with, so they cannot drift apart.
package displaytest

import "unicode/utf8"

// Case is one input and how display.Escape shows it.
type Case struct {
	Name string
	In   string
	Want string
}

// ValidUTF8 reports whether the case can travel as a JSON or protobuf
// string: surfaces behind the REST API never receive invalid UTF-8 (the
// API refuses it before anything is shown), so they skip those cases.
func (c Case) ValidUTF8() bool { return utf8.ValidString(c.In) }

// Cases are the inputs every surface must show escaped, whole and
// unambiguously.
var Cases = []Case{
	{"plain", "ls -la /home/workspace", "ls -la /home/workspace"},
	{"non-ASCII letters stay", "héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
	{"combining mark stays", "cafe\u0301", "cafe\u0301"},
	{"backslash", `a\b`, `a\\b`},
	{"escape-looking text", `echo \u202e \x1b`, `echo \\u202e \\x1b`},
	{"newline", "ls\nrm -rf /", `ls\nrm -rf /`},
	{"carriage return", "ls\rrm -rf /", `ls\x0drm -rf /`},
	{"tab", "a\tb", `a\tb`},
	{"NUL", "x\x00y", `x\x00y`},
	{"terminal escape", "ls\x1b[2K\rrm -rf /", `ls\x1b[2K\x0drm -rf /`},
	{"DEL", "del\x7f", `del\x7f`},
	{"C1 NEL", "c1\u0085control", `c1\u0085control`},
	{"C1 CSI", "c1\u009bcsi", `c1\u009bcsi`},
	{"RLO", "evil\u202etxt.exe", `evil\u202etxt.exe`},
	{"bidi embeddings and pop", "\u202a\u202b\u202c\u202d", `\u202a\u202b\u202c\u202d`},
	{"bidi isolates", "isolate\u2066x\u2067\u2068\u2069", `isolate\u2066x\u2067\u2068\u2069`},
	{"LRM RLM ALM", "\u200e\u200f\u061c", `\u200e\u200f\u061c`},
	{"zero-width", "zero\u200bwidth\u200c\u200d", `zero\u200bwidth\u200c\u200d`},
	{"word joiner and BOM", "a\u2060b\ufeff", `a\u2060b\ufeff`},
	{"soft hyphen", "soft\u00adhyphen", `soft\u00adhyphen`},
	{"Mongolian vowel separator", "a\u180eb", `a\u180eb`},
	{"line separator", "ls\u2028rm", `ls\u2028rm`},
	{"paragraph separator", "ls\u2029rm", `ls\u2029rm`},
	{"no-break space", "rm\u00a0-rf", `rm\u00a0-rf`},
	{"ideographic space", "rm\u3000x", `rm\u3000x`},
	{"private use BMP", "a\ue000b\uf8ff", `a\ue000b\uf8ff`},
	{"private use plane 15", "a\U000f0000b", `a\U000f0000b`},
	{"private use plane 16", "a\U0010fffdb", `a\U0010fffdb`},
	{"tag characters", "a\U000e0001\U000e0041b", `a\U000e0001\U000e0041b`},
	{"variation selector", "a\ufe0fb", `a\ufe0fb`},
	{"Hangul filler", "a\u3164b", `a\u3164b`},
	{"combining grapheme joiner", "a\u034fb", `a\u034fb`},
	{"unassigned", "a\u0378b", `a\u0378b`},
	{"noncharacters", "a\ufdd0\ufffe\uffff\U0001fffeb", `a\ufdd0\ufffe\uffff\U0001fffeb`},
	{"replacement character", "a\ufffdb", `a\ufffdb`},
	{"invalid UTF-8", "invalid\xffutf8\xc3", `invalid\xffutf8\xc3`},
	{"long command is whole", "rm " + long, "rm " + long},
}

var long = func() string {
	b := make([]byte, 0, 8200)
	for len(b) < 8000 {
		b = append(b, "build/very/deep/path/"...)
	}
	return string(append(b, "END"...))
}()
