package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// partKind says how a piece of a judged word reaches the program: as its
// text, or expanded by the shell when the plan runs.
type partKind int8

const (
	// partLit is text the program receives as it is.
	partLit partKind = iota
	// partGlob is unquoted text holding pattern characters (* ? [ ]),
	// expanded against file names.
	partGlob
	// partTilde is a leading ~ that expands to the home directory.
	partTilde
	// partVar is a "$NAME" inside double quotes; text is the name.
	partVar
)

// wordPart is one piece of a judged word.
type wordPart struct {
	kind partKind
	text string
}

// word is a shell word after quote removal, with what would still expand
// when the shell runs it.
type word struct {
	val string
	// glob: an unquoted *, ? or [; tilde: an unquoted leading ~ (or one
	// after = or :, which bash expands in words that look like
	// assignments); brace: an unquoted {a,b} or {x..y}; quotedVar: a
	// simple "$NAME" inside double quotes.
	glob, tilde, brace, quotedVar bool
	// parts spell the word for the plan; nil means val is all literal.
	parts []wordPart
}

// literal reports whether the word means exactly its value.
func (w word) literal() bool { return !w.glob && !w.tilde && !w.brace && !w.quotedVar }

// lit returns a word that means exactly s.
func lit(s string) word { return word{val: s} }

// refusal is a construct the engine cannot judge; its message is the policy's.
type refusal struct{ token string }

func (r *refusal) Error() string { return ErrUnsupportedToken + r.token }

func refuse(token string) *refusal { return &refusal{token: token} }

// evalWord removes quotes from w, refusing any part whose value the shell
// computes at run time other than globs, braces, tildes and simple quoted
// variables, which the caller judges by where the word stands.
func evalWord(w *syntax.Word) (word, *refusal) {
	var out word
	if len(w.Parts) == 1 {
		// Fast paths for the common words: a plain literal or one
		// single-quoted string need no copying.
		switch p := w.Parts[0].(type) {
		case *syntax.Lit:
			if !strings.ContainsAny(p.Value, "\\*?[]{~") {
				out.val = p.Value
				return out, nil
			}
		case *syntax.SglQuoted:
			if !p.Dollar {
				out.val = p.Value
				return out, nil
			}
		}
	}
	var b wordBuilder
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			b.unquoted(&out, p.Value, i == 0)
		case *syntax.SglQuoted:
			if p.Dollar {
				return out, refuse("$'")
			}
			b.add(partLit, p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return out, refuse(`$"`)
			}
			for _, dp := range p.Parts {
				switch q := dp.(type) {
				case *syntax.Lit:
					b.add(partLit, doubleQuoted(q.Value))
				case *syntax.ParamExp:
					if !simpleParam(q) {
						return out, refuse("${")
					}
					if !validEnvName(q.Param.Value) {
						// $@, $*, $#, $?, $$, $!, $- and positional
						// parameters have no value the plan can know.
						return out, refuse("$" + q.Param.Value)
					}
					out.quotedVar = true
					b.add(partVar, q.Param.Value)
				case *syntax.CmdSubst:
					return out, refuse(cmdSubstToken(q))
				case *syntax.ArithmExp:
					return out, refuse("$((")
				default:
					return out, refuse(`"`)
				}
			}
		case *syntax.ParamExp:
			if p.Param != nil && p.Short {
				return out, refuse("$" + p.Param.Value)
			}
			return out, refuse("${")
		case *syntax.CmdSubst:
			return out, refuse(cmdSubstToken(p))
		case *syntax.ArithmExp:
			return out, refuse("$((")
		case *syntax.ProcSubst:
			return out, refuse(p.Op.String())
		case *syntax.ExtGlob:
			return out, refuse(p.Op.String())
		case *syntax.BraceExp:
			return out, refuse("{")
		default:
			return out, refuse("?")
		}
	}
	out.parts = b.parts()
	out.val = b.value()
	if out.brace {
		// Only {a,b} and {x..y} expand; a lone {} (find's placeholder)
		// is literal. Judge from the first unquoted brace on.
		rest := out.val[strings.IndexByte(out.val, '{')+1:]
		out.brace = strings.Contains(rest, "}") && (strings.Contains(rest, ",") || strings.Contains(rest, ".."))
	}
	return out, nil
}

// wordBuilder collects a word's parts, merging neighbours of one kind.
// The last part's text grows in tail, so that a word built a byte at a
// time (a megabyte of escaped characters) costs linear time, not
// quadratic; parts returns them whole.
type wordBuilder struct {
	list []wordPart
	tail strings.Builder
	open bool // the last part's text is in tail
}

func (b *wordBuilder) add(k partKind, s string) {
	if s == "" && k != partVar {
		return
	}
	if n := len(b.list); n > 0 && k != partVar && b.list[n-1].kind == k && b.open {
		b.tail.WriteString(s)
		return
	}
	b.close()
	b.list = append(b.list, wordPart{kind: k, text: s})
	if k != partVar {
		b.tail.WriteString(s)
		b.open = true
	}
}

// close ends the growth of the last part.
func (b *wordBuilder) close() {
	if b.open {
		b.list[len(b.list)-1].text = b.tail.String()
		b.tail = strings.Builder{}
		b.open = false
	}
}

// parts returns the word's parts.
func (b *wordBuilder) parts() []wordPart {
	b.close()
	return b.list
}

// value is the word as the engine judges it; a variable keeps its $NAME
// spelling.
func (b *wordBuilder) value() string {
	var s strings.Builder
	for _, p := range b.parts() {
		if p.kind == partVar {
			s.WriteString("$" + p.text)
			continue
		}
		s.WriteString(p.text)
	}
	return s.String()
}

// unquoted adds an unquoted literal, removing backslashes and line
// continuations and noting what the shell would still expand. first says
// the literal starts the word.
func (b *wordBuilder) unquoted(w *word, s string, first bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			if i+1 == len(s) {
				// Only the end of the command leaves a backslash
				// unpaired, and the shells keep it.
				b.add(partLit, `\`)
				continue
			}
			i++
			if s[i] != '\n' {
				b.add(partLit, s[i:i+1])
			}
			continue
		}
		switch c {
		case '*', '?', '[', ']':
			if c != ']' {
				w.glob = true
			}
			b.add(partGlob, s[i:i+1])
			continue
		case '{':
			w.brace = true
		case '~':
			// dash expands only a leading ~; bash also one after = or :
			// in words that look like assignments. Any unquoted one is
			// judged as expanding; only a leading ~ alone or before /
			// expands in the plan, the rest is printed quoted.
			w.tilde = true
			if first && i == 0 && (len(s) == 1 || s[1] == '/') {
				b.add(partTilde, "~")
				continue
			}
		}
		b.add(partLit, s[i:i+1])
	}
}

func cmdSubstToken(c *syntax.CmdSubst) string {
	if c.Backquotes {
		return "`"
	}
	return "$("
}

func simpleParam(p *syntax.ParamExp) bool {
	return p.Param != nil && p.Flags == nil && !p.Excl && !p.Length && !p.Width && !p.IsSet &&
		p.NestedParam == nil && p.Index == nil && len(p.Modifiers) == 0 && p.Slice == nil &&
		p.Repl == nil && p.Names == 0 && p.Exp == nil
}

// doubleQuoted returns a literal inside double quotes after quote removal:
// a backslash escapes only $ ` " \ and newline there.
func doubleQuoted(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '"', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// quotedHeredoc reports whether a here-document's delimiter is quoted, which
// makes its body literal.
func quotedHeredoc(w *syntax.Word) bool {
	for _, p := range w.Parts {
		switch q := p.(type) {
		case *syntax.SglQuoted, *syntax.DblQuoted:
			return true
		case *syntax.Lit:
			if strings.Contains(q.Value, `\`) {
				return true
			}
		}
	}
	return false
}
