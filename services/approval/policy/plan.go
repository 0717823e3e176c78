package policy

import (
	"slices"
	"strconv"
	"strings"

	"github.com/conch-sh/conch/services/internal/shellquote"
	"mvdan.cc/sh/v3/syntax"
)

// The plan: what runs is what was judged.
//
// The engine parses a command with mvdan/sh; the sandbox runs /bin/sh, which
// is dash, and gateway hosts and nodes run theirs. Two parsers never agree
// on every input (line continuations inside comments, in "$\⏎(", in
// heredoc operators …), so handing the original text to a shell after
// judging it would let the shell run something the engine never saw.
//
// conch therefore never runs judged text. When the engine has judged a
// command's structure (security allowlist, which is also the mode of every
// command an approval was asked for outside security full), it re-prints
// the syntax tree it judged as a canonical script, and the executor runs
// that script instead of the original:
//
//   - every word is single-quoted from the value the engine judged, so the
//     shell performs no expansion the engine did not decide on; the only
//     things left unquoted are the expansions the engine allowed and judged
//     as such: glob characters in the arguments of allowlisted programs, a
//     leading ~, and "${NAME}" of a variable whose value it could not know;
//   - a program word that resolved to one binary is printed as that
//     binary's absolute path, so no PATH entry written in the meantime can
//     put another program in its place;
//   - the operators are the five every POSIX shell reads alike: ! && || |
//     and a newline between statements;
//   - a quoted here-document is re-printed with a delimiter that does not
//     occur in its body, its body as judged (tabs of <<- already removed);
//   - the command string of sh -c is replaced by the canonical plan of what
//     the engine judged inside it;
//   - variables a program's profile needs (git's locked configuration, the
//     empty HOME of safe bins) are set as prefix assignments;
//   - under security full, where the plan is there for the deny rules,
//     redirections of a one-digit descriptor to a quoted path or to
//     another descriptor, and the echo and printf builtins, which write
//     and print as the mode allows and run no program a rule could match.
//
// That subset of the shell language has one reading in dash, bash and
// every other POSIX shell, so the shell cannot run anything but the judged
// plan. The alternative, executing the plan in the sandbox's agent
// without a shell, would need a second implementation of pipelines,
// exit statuses, cd and here-documents on every host (sandbox, gateway,
// node); the canonical script keeps one executor path and is what
// exec-policy:evaluate shows. security full without deny rules runs the
// command as written: nothing was judged, so there is no plan.

// printWord appends w as the plan spells it.
func printWord(b *strings.Builder, w word) {
	if w.parts == nil || (!w.glob && !w.tilde && !w.quotedVar) {
		shellquote.Append(b, w.val)
		return
	}
	// Neighbouring literal parts are quoted together, so that a word has
	// one spelling however it was quoted in the command.
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			shellquote.Append(b, text.String())
			text.Reset()
		}
	}
	// tilde is set after a leading ~: a tilde prefix ends at the first
	// unquoted /, and ~'/x' (the / quoted) is one prefix no shell expands.
	tilde := false
	for _, p := range w.parts {
		switch {
		case p.kind == partGlob && w.glob:
			// Only * ? [ ] are ever in a glob part.
			flush()
			b.WriteString(p.text)
		case p.kind == partTilde:
			flush()
			b.WriteByte('~')
			tilde = true
			continue
		case p.kind == partVar:
			flush()
			b.WriteString(`"${` + p.text + `}"`)
		case tilde && p.kind == partLit && strings.HasPrefix(p.text, "/"):
			b.WriteByte('/')
			text.WriteString(p.text[1:])
		default:
			text.WriteString(p.text)
		}
		tilde = false
	}
	flush()
}

// heredocDelimiter returns a delimiter no line of body equals.
func heredocDelimiter(body string) string {
	lines := strings.Split(body, "\n")
	for n := 0; ; n++ {
		d := "CONCH_EOF"
		if n > 0 {
			d += "_" + strconv.Itoa(n)
		}
		if !slices.Contains(lines, d) {
			return d
		}
	}
}

// planRedirect is a redirection of a statement as the plan prints it:
// a quoted here-document's body, or an operator with its target.
type planRedirect struct {
	heredoc bool
	text    string
}

// fileRedirect returns r as the plan prints it when it only opens or
// duplicates a file descriptor the way every POSIX shell reads alike: a
// descriptor of one digit (dash reads "10>" as a word and ">"), one of
// the POSIX operators (not bash's &> or <<<), and a target that means
// exactly its value (bash expands a glob there, dash does not).
func fileRedirect(r *syntax.Redirect) (string, bool) {
	var b strings.Builder
	if r.N != nil {
		if len(r.N.Value) != 1 || r.N.Value[0] < '0' || r.N.Value[0] > '9' {
			return "", false
		}
		b.WriteString(r.N.Value)
	}
	if r.Word == nil {
		return "", false
	}
	w, bad := evalWord(r.Word)
	if bad != nil || !w.literal() || w.val == "" {
		return "", false
	}
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrIn, syntax.RdrInOut, syntax.RdrClob:
		b.WriteString(r.Op.String() + " ")
		shellquote.Append(&b, w.val)
	case syntax.DplIn, syntax.DplOut:
		// Only a descriptor or - (close); bash reads ">&file" as &>.
		if w.val != "-" && (len(w.val) != 1 || w.val[0] < '0' || w.val[0] > '9') {
			return "", false
		}
		b.WriteString(r.Op.String() + w.val)
	default:
		return "", false
	}
	return b.String(), true
}

// printer builds a plan as the analyzer walks the tree in execution order.
type printer struct {
	b strings.Builder
	// hdocs are the bodies of the current line's here-documents, written
	// after its newline.
	hdocs []string
}

func (p *printer) heredoc(body string) {
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	d := heredocDelimiter(body)
	p.b.WriteString(" <<'" + d + "'")
	p.hdocs = append(p.hdocs, body+d+"\n")
}

// endLine ends a statement of a list and writes its here-documents.
func (p *printer) endLine() {
	p.b.WriteByte('\n')
	for _, h := range p.hdocs {
		p.b.WriteString(h)
	}
	p.hdocs = p.hdocs[:0]
}

// assignments renders env as the prefix assignments of a simple command,
// in name order. Profiles render theirs once, at start.
func assignments(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		// Names are the engine's own constants: plain identifiers.
		b.WriteString(k + "=")
		shellquote.Append(&b, env[k])
		b.WriteByte(' ')
	}
	return b.String()
}

// call appends one simple command: the assignments its programs' profiles
// need, then the words.
func (p *printer) call(prefixes []string, words []word) {
	for _, pre := range prefixes {
		p.b.WriteString(pre)
	}
	for i, w := range words {
		if i > 0 {
			p.b.WriteByte(' ')
		}
		printWord(&p.b, w)
	}
}
