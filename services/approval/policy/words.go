package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// word is a shell word after quote removal, with what would still expand
// when the shell runs it.
type word struct {
	val string
	// glob: an unquoted *, ? or [; tilde: an unquoted leading ~; brace: an
	// unquoted {; quotedVar: a simple "$NAME" inside double quotes.
	glob, tilde, brace, quotedVar bool
}

// literal reports whether the word means exactly its value.
func (w word) literal() bool { return !w.glob && !w.tilde && !w.brace && !w.quotedVar }

// refusal is a construct the engine cannot judge; its message is the spec's.
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
			if !strings.ContainsAny(p.Value, "\\*?[{~") {
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
	var b strings.Builder
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			unquotedLit(&b, &out, p.Value)
		case *syntax.SglQuoted:
			if p.Dollar {
				return out, refuse("$'")
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return out, refuse(`$"`)
			}
			for _, dp := range p.Parts {
				switch q := dp.(type) {
				case *syntax.Lit:
					doubleQuotedLit(&b, q.Value)
				case *syntax.ParamExp:
					if !simpleParam(q) {
						return out, refuse("${")
					}
					out.quotedVar = true
					b.WriteString("$" + q.Param.Value)
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
	out.val = b.String()
	if out.brace {
		// Only {a,b} and {x..y} expand; a lone {} (find's placeholder)
		// is literal. Judge from the first unquoted brace on.
		rest := out.val[strings.IndexByte(out.val, '{')+1:]
		out.brace = strings.Contains(rest, "}") && (strings.Contains(rest, ",") || strings.Contains(rest, ".."))
	}
	return out, nil
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

// unquotedLit appends an unquoted literal, removing backslashes and line
// continuations and noting what the shell would still expand.
func unquotedLit(b *strings.Builder, w *word, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					b.WriteByte(s[i])
				}
			}
			continue
		}
		switch c {
		case '*', '?', '[':
			w.glob = true
		case '{':
			w.brace = true
		case '~':
			// bash expands a tilde at the start of a word and after = or
			// : in words that look like assignments; any unquoted one is
			// treated as expanding.
			w.tilde = true
		}
		b.WriteByte(c)
	}
}

// doubleQuotedLit appends a literal inside double quotes, where a backslash
// escapes only $ ` " \ and newline.
func doubleQuotedLit(b *strings.Builder, s string) {
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
