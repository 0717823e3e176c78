package policy

import (
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Line continuations: a backslash-newline is one the engine reads as the
// shells do, or the command is refused.
//
// A shell removes a backslash-newline before it reads anything else, except
// inside single quotes, comments and the bodies of quoted here-documents,
// where it is two literal characters. The text on both sides then forms
// tokens together. mvdan/sh follows that in most places but not in all of
// them, and dash, bash and the parser were found to disagree on:
//
//   - a comment: the parser ends it at "\⏎" and reads the next line as more
//     words of the same command ("ok #\⏎bad" is "ok bad"); a shell ends it
//     at the newline and runs the next line as a command of its own;
//   - "$\⏎(", "$\⏎{", "$\⏎'" and "$\⏎\"": the parser reads a literal $
//     and the text after it; a shell reads a command substitution, a
//     parameter expansion, an ANSI-C string (bash) or a locale string;
//   - a here-document's delimiter: the parser keeps the backslash and
//     judges the delimiter quoted, a shell removes it and may find it
//     unquoted, its body expanded;
//   - "$(\⏎(": the parser reads a subshell in a command substitution, a
//     shell the arithmetic expansion "$((";
//   - the body of a quoted <<- here-document: the parser reads a
//     backslash-newline before a line of leading tabs otherwise than dash,
//     which strips the tabs and may find the delimiter there.
//
// Rather than follow each of those, the engine accepts a backslash-newline
// only where every reader agrees it changes nothing but the line count:
//
//   - between the words and operators of a command, after an unquoted
//     blank, or after an operator when what follows cannot continue it:
//     the way a long command is continued on the next line;
//   - inside single quotes and in the body of a quoted << here-document,
//     where it is literal in every shell;
//   - inside double quotes, except right after a $, where the text on both
//     sides is data.
//
// Everywhere else — in a comment, an unquoted word, a parameter expansion,
// a $'…' string, a here-document's delimiter, unquoted body or <<- body,
// right after a $, inside an operator — the command is refused in every mode, as
// control characters are: what the engine would report, and a human
// approve, might not be what the shell runs.

// reading is how a backslash-newline is read where it stands.
type reading struct {
	// refused names the construct when every reader's agreement cannot be
	// shown; it is final.
	refused string
	// where is the innermost place the backslash-newline is in.
	where place
}

// place is where in a command a backslash-newline stands.
type place int8

const (
	// betweenTokens is a command's text outside its words, also inside
	// $( ) or $(( )).
	betweenTokens place = iota
	inWord
	inDoubleQuotes
	// literal is single quotes and a quoted here-document's body.
	literal
)

// enter moves r into node n, which holds the backslash-newline.
func (r reading) enter(n syntax.Node, delimiters, bodies, dashBodies map[*syntax.Word]bool) reading {
	if r.refused != "" {
		return r
	}
	switch n := n.(type) {
	case *syntax.Comment:
		r.refused = "backslash-newline in a comment"
	case *syntax.Word:
		quoted, body := bodies[n]
		switch {
		case delimiters[n]:
			r.refused = "backslash-newline in a here-document delimiter"
		case body && !quoted:
			r.refused = "backslash-newline in an unquoted here-document"
		case dashBodies[n]:
			r.refused = "backslash-newline in a <<- here-document"
		case body:
			r.where = literal
		default:
			r.where = inWord
		}
	case *syntax.SglQuoted:
		if n.Dollar {
			r.refused = "backslash-newline in $'"
		} else {
			r.where = literal
		}
	case *syntax.DblQuoted:
		r.where = inDoubleQuotes
	case *syntax.ParamExp:
		r.refused = "backslash-newline in a parameter expansion"
	case *syntax.CmdSubst, *syntax.ArithmExp, *syntax.ProcSubst:
		r.where = betweenTokens
	}
	return r
}

// refusal names the construct when the backslash-newline at i of src,
// read as r, is not one every reader agrees on; "" when it is.
func (r reading) refusal(src string, i int) string {
	switch {
	case r.refused != "":
		return r.refused
	case r.where == literal:
		return ""
	case i > 0 && src[i-1] == '$':
		return "backslash-newline after $"
	case r.where == inWord:
		return "backslash-newline in a word"
	case r.where == inDoubleQuotes:
		return ""
	}
	// Between tokens it must follow a blank, which ends every token, or
	// an operator that what comes next cannot continue ("|\⏎|" is ||,
	// "<<\⏎-" is <<-); neither may be escaped itself ("a\ \⏎b" is one
	// word to a shell).
	if i == 0 || (i > 1 && src[i-2] == '\\') {
		return "backslash-newline not after a blank or an operator"
	}
	switch prev := src[i-1]; {
	case prev == ' ' || prev == '\t':
		return ""
	case strings.IndexByte(operatorChars, prev) >= 0:
		if i+2 < len(src) && strings.IndexByte(operatorChars+"-", src[i+2]) >= 0 {
			return "backslash-newline inside an operator"
		}
		return ""
	}
	return "backslash-newline not after a blank or an operator"
}

// operatorChars are the characters the shells' operators are made of.
const operatorChars = "&|;<>()"

// continuation finds a backslash-newline in src, parsed as f with its
// comments, that the parser and the shells may read differently, and
// names it.
func continuation(src string, f *syntax.File) (string, bool) {
	var at []int
	for i := 0; i+1 < len(src); i++ {
		if src[i] == '\\' && src[i+1] == '\n' {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return "", false
	}
	readings := make([]reading, len(at))
	delimiters, bodies, dashBodies := map[*syntax.Word]bool{}, map[*syntax.Word]bool{}, map[*syntax.Word]bool{}
	// Walk enters the nodes holding an offset from the outermost in: each
	// one narrows the reading of the backslash-newlines inside it.
	syntax.Walk(f, func(n syntax.Node) bool {
		if n == nil {
			return true
		}
		if rd, ok := n.(*syntax.Redirect); ok && (rd.Op == syntax.Hdoc || rd.Op == syntax.DashHdoc) {
			delimiters[rd.Word] = true
			if rd.Hdoc != nil {
				bodies[rd.Hdoc] = quotedHeredoc(rd.Word)
				dashBodies[rd.Hdoc] = rd.Op == syntax.DashHdoc
			}
		}
		from, end := int(n.Pos().Offset()), int(n.End().Offset())
		k, _ := slices.BinarySearch(at, from)
		for ; k < len(at) && at[k] < end; k++ {
			readings[k] = readings[k].enter(n, delimiters, bodies, dashBodies)
		}
		return true
	})
	for k, i := range at {
		if tok := readings[k].refusal(src, i); tok != "" {
			return tok, true
		}
	}
	return "", false
}
