package policy

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// Limits on what the engine judges; longer input is refused rather than
// judged partially.
const (
	// MaxCommandBytes is the longest command line judged, the exec tool's
	// own limit.
	MaxCommandBytes = 1 << 20
	// maxSegments is the most simple commands one line may hold.
	maxSegments = 256
	// maxDepth bounds shells nested with -c.
	maxDepth = 4
)

// Config is what the engine judges against besides the command.
type Config struct {
	// Allowlist are the agent's patterns.
	Allowlist []Entry
	// Deny are rules no mode, allowlist entry or approval overrides: a
	// command running a program they match is refused, on every host.
	Deny []Entry
	// SafeBins are the safe bin names; nil means DefaultSafeBins.
	SafeBins []string
	// SafeBinDirs are the dirs safe bins are trusted from; nil means
	// DefaultSafeBinDirs.
	SafeBinDirs []string
	// Home expands a leading ~ in patterns and is where a bare cd goes.
	Home string
	// AutoAllowSkills lets the commands of moved tools run without an
	// allowlist entry.
	AutoAllowSkills bool
	// SkillDirs are the dirs holding the moved tools' commands
	// (docs/reference/tools.md); a binary directly in one is a skill.
	SkillDirs []string
}

// Engine judges commands. It is safe for concurrent use.
type Engine struct {
	entries  []compiledEntry
	deny     []compiledEntry
	safe     map[string]*profile
	safeDirs map[string]bool
	skills   map[string]bool // skill dirs, when auto-allowed
	home     string
}

// New returns an engine for cfg. Invalid allowlist patterns match nothing.
func New(cfg Config) *Engine {
	e := &Engine{
		entries:  compileEntries(cfg.Allowlist, cfg.Home),
		deny:     compileEntries(cfg.Deny, cfg.Home),
		safe:     map[string]*profile{},
		safeDirs: map[string]bool{},
		skills:   map[string]bool{},
		home:     cfg.Home,
	}
	bins := cfg.SafeBins
	if bins == nil {
		bins = DefaultSafeBins
	}
	for _, b := range bins {
		b = strings.ToLower(strings.TrimSpace(b))
		if b == "" || strings.Contains(b, "/") || !recordable("/"+b) {
			// A shell, an interpreter or a wrapper is never a safe bin.
			continue
		}
		if p, ok := profiles[b]; ok {
			e.safe[b] = p
		} else {
			e.safe[b] = bareProfile
		}
	}
	dirs := cfg.SafeBinDirs
	if dirs == nil {
		dirs = DefaultSafeBinDirs
	}
	for _, d := range dirs {
		e.safeDirs[path.Clean(d)] = true
	}
	if cfg.AutoAllowSkills {
		for _, d := range cfg.SkillDirs {
			e.skills[path.Clean(d)] = true
		}
	}
	return e
}

// Request is one command to judge.
type Request struct {
	// Command is the line as /bin/sh -c would receive it.
	Command string
	// Cwd is the absolute working directory it starts in.
	Cwd string
	// Env are the variables the request sets.
	Env map[string]string
	// Settings are the effective settings (see execpolicy.Effective).
	Settings Settings
	// Resolver finds binaries as the shell would on the target host.
	Resolver Resolver
}

// Evaluate judges req. It never fails: what it cannot judge is denied.
func (e *Engine) Evaluate(req Request) (res Result) {
	s := req.Settings
	res = Result{Settings: s}
	defer func() {
		// A syntax tree the walker does not expect is a command it cannot
		// judge: deny it rather than crash the service.
		if r := recover(); r != nil {
			res = Result{Settings: s, Decision: Deny, Reason: ErrNotAllowed + ": command could not be judged"}
		}
	}()
	deny := func(reason string) Result {
		res.Decision, res.Reason = Deny, reason
		return res
	}
	if s.Security == SecurityUnset || s.Security == SecurityDeny {
		return deny(ErrNotAllowed)
	}
	if err := CheckEnv(req.Env); err != nil {
		return deny(ErrNotAllowed + " (" + err.Error() + ")")
	}
	if len(req.Command) > MaxCommandBytes {
		return deny(fmt.Sprintf("%s: command longer than %d bytes", ErrNotAllowed, MaxCommandBytes))
	}
	if strings.TrimSpace(req.Command) == "" {
		return deny(ErrNotAllowed + ": empty command")
	}
	if !path.IsAbs(req.Cwd) {
		return deny(ErrNotAllowed + ": working directory must be absolute")
	}
	if tok, bad := controlChar(req.Command); bad {
		return deny(ErrUnsupportedToken + tok)
	}
	f, err := parse(req.Command)
	if err != nil {
		return deny(err.Error())
	}
	if tok, bad := misread(req.Command, f); bad {
		return deny(refuse(tok).Error())
	}
	resolver := req.Resolver
	if resolver == nil {
		resolver = PathResolver{Path: SplitPath(DefaultPath)}
	}
	a := &analyzer{e: e, r: resolver, env: req.Env, p: &printer{}, full: s.Security == SecurityFull}
	a.stmts(f.Stmts, []string{path.Clean(req.Cwd)})
	res.Segments, res.Programs = a.segs, a.programs
	if a.denied != "" {
		return deny(a.denied)
	}
	if s.Security == SecurityFull && len(e.deny) > 0 {
		// Deny rules hold in full mode too, so what runs must be what was
		// checked against them: the plan, as in allowlist mode. What the
		// policy cannot judge cannot be checked, and is refused.
		if a.refused != "" {
			return deny(a.refused + " (deny rules apply: only commands the policy can judge run)")
		}
		if s.Ask == AskAlways {
			res.Decision, res.Reason, res.Plan = AskHuman, "ask is always", a.p.b.String()
			return res
		}
		res.Decision, res.Reason, res.Plan = Allow, "security is full; no deny rule matches", a.p.b.String()
		return res
	}
	if s.Security == SecurityFull {
		for i := range res.Segments {
			// Not judged: a miss's reason would contradict the verdict.
			res.Segments[i].Decision, res.Segments[i].Reason = Allow, "security is full"
		}
		if s.Ask == AskAlways {
			res.Decision, res.Reason = AskHuman, "ask is always"
			return res
		}
		res.Decision, res.Reason = Allow, "security is full"
		return res
	}
	if a.refused != "" {
		return deny(a.refused)
	}
	if len(res.Segments) == 0 {
		return deny(ErrNotAllowed + ": no command")
	}
	for _, seg := range res.Segments {
		if seg.Decision != Allow {
			if s.Ask == AskOff {
				return deny(ErrNotAllowed)
			}
			res.Decision, res.Reason, res.Plan = AskHuman, "allowlist miss: "+seg.Reason, a.p.b.String()
			return res
		}
	}
	if s.Ask == AskAlways {
		res.Decision, res.Reason, res.Plan = AskHuman, "ask is always", a.p.b.String()
		return res
	}
	res.Decision, res.Reason, res.Plan = Allow, "allowlist", a.p.b.String()
	return res
}

// Fallback is the verdict when no human answered a pending approval in
// time: fallback deny refuses, allowlist allows only what the allowlist
// alone allows, full allows.
func Fallback(res Result, fallback Security) Result {
	out := res
	out.Segments = slices.Clone(res.Segments)
	switch fallback {
	case SecurityFull:
		if res.Decision != Deny {
			out.Decision, out.Reason = Allow, "no answer in time; fallback full"
			return out
		}
	case SecurityAllowlist:
		ok := res.Decision != Deny && len(res.Segments) > 0
		for _, s := range res.Segments {
			ok = ok && s.Decision == Allow
		}
		if ok {
			out.Decision, out.Reason = Allow, "no answer in time; fallback allowlist"
			return out
		}
	}
	out.Decision, out.Reason = Deny, ErrTimeout
	return out
}

// parsers are reused: a parser allocates sizeable buffers. They keep
// comments, so that a line continuation in one can be found (continuation.go).
var parsers = sync.Pool{New: func() any {
	return syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true))
}}

// parse parses a command line as bash would read it.
func parse(src string) (*syntax.File, error) {
	p := parsers.Get().(*syntax.Parser)
	defer parsers.Put(p)
	return p.Parse(strings.NewReader(src), "")
}

// misread names a construct of src, parsed as f, that the parser is known
// to read otherwise than the shells; the command is then refused.
func misread(src string, f *syntax.File) (string, bool) {
	if tok, bad := continuation(src, f); bad {
		return tok, true
	}
	return commentInWord(src, f)
}

// commentInWord finds a comment the parser began inside a word. A shell
// begins one only where a token begins, after a blank, a newline or an
// operator; the parser also ends a here-document's quoted delimiter at a
// # ("<<'E'#x" is the delimiter E#x to a shell, E and a comment to it).
func commentInWord(src string, f *syntax.File) (string, bool) {
	bad := false
	syntax.Walk(f, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.Comment); ok && !bad {
			if i := int(c.Hash.Offset()); i > 0 && !strings.ContainsRune(" \t\n"+operatorChars, rune(src[i-1])) {
				bad = true
			}
		}
		return !bad
	})
	if bad {
		return "# inside a word", true
	}
	return "", false
}

// controlChar finds a control character other than tab and newline, which
// terminals hide and shells treat inconsistently.
func controlChar(s string) (string, bool) {
	for _, r := range s {
		if (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f {
			q := strconv.QuoteRune(r)
			return q[1 : len(q)-1], true
		}
	}
	return "", false
}

// analyzer walks a parsed command in execution order, tracking the set of
// directories each statement may run in.
type analyzer struct {
	e       *Engine
	r       Resolver
	segs    []Segment
	refused string
	// denied is the refusal of a deny rule: it wins over every mode.
	denied string
	depth  int
	// env are the variables the request sets: a "$NAME" of one of them
	// is judged, and printed, as its value.
	env map[string]string
	// p prints the plan of the statements being judged.
	p *printer
	// callEnv are the assignments the programs of the current simple
	// command need in the plan, each a profile's whole prefix
	// (gitAssignments, safeBinAssignments).
	callEnv []string
	// head is the binary the current simple command's program word
	// resolved to, when it is one binary in every directory.
	head string
	// innerPlans are the plans of sh -c strings, by the word they replace.
	innerPlans map[*word]string
	// callStart is the first segment of the current simple command.
	callStart int
	// programs are the names resolved so far.
	programs []Program
	// full is set under security full, where the plan is judged for the
	// deny rules only: writing files and printing are the mode's to
	// allow, so the plan also carries the redirections and the echo and
	// printf builtins allowlist mode refuses. None of them runs a program
	// a rule could match.
	full bool
}

// binary is a program name resolved: the path the shell runs and the file
// it really is, symlinks followed.
type binary struct{ path, real string }

// resolve resolves name in every directory the command may run in and
// notes what it found. It reports false, after adding the miss, when the
// name resolves to nothing in one of them.
func (a *analyzer) resolve(name string, argv []string, cwds []string) ([]binary, bool) {
	var bins []binary
	for _, d := range cwds {
		p, err := a.r.LookPath(name, d)
		if err != nil {
			a.add(Segment{Argv: argv, Decision: AskHuman, Reason: ErrNotAllowed + " (" + name + ": not found)"})
			return nil, false
		}
		if slices.ContainsFunc(bins, func(b binary) bool { return b.path == p }) {
			continue
		}
		b := binary{path: p, real: a.realPath(p)}
		bins = append(bins, b)
		if len(a.programs) < maxSegments {
			a.programs = append(a.programs, Program{Name: name, Path: b.path, RealPath: b.real})
		}
	}
	return bins, true
}

func (a *analyzer) refuse(r *refusal) {
	if a.refused == "" {
		a.refused = r.Error()
	}
}

func (a *analyzer) fail(reason string) {
	if a.refused == "" {
		a.refused = reason
	}
}

func (a *analyzer) add(s Segment) {
	if len(a.segs) >= maxSegments {
		a.fail(fmt.Sprintf("%s: more than %d commands", ErrNotAllowed, maxSegments))
		return
	}
	a.segs = append(a.segs, s)
}

func union(a, b []string) []string {
	// Most chains never cd: both sets are the same single directory.
	if len(b) == 0 || (len(a) == 1 && len(b) == 1 && a[0] == b[0]) {
		return a
	}
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func (a *analyzer) stmts(list []*syntax.Stmt, cwds []string) []string {
	for _, st := range list {
		if a.refused != "" {
			return cwds
		}
		s, f := a.stmt(st, cwds)
		a.p.endLine()
		cwds = union(s, f)
	}
	return cwds
}

// stmt judges one statement and returns the directories the shell is in
// after it succeeds and after it fails.
func (a *analyzer) stmt(st *syntax.Stmt, cwds []string) (succ, fail []string) {
	switch {
	case st.Background:
		a.refuse(refuse("&"))
		return cwds, cwds
	case st.Coprocess:
		a.refuse(refuse("|&"))
		return cwds, cwds
	case st.Disown:
		a.refuse(refuse("&|"))
		return cwds, cwds
	}
	// redirs are the statement's redirections as the plan prints them, in
	// order: a here-document's body, or an operator and its target.
	var redirs []planRedirect
	for _, r := range st.Redirs {
		if (r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc) && r.N == nil && r.Word != nil && quotedHeredoc(r.Word) {
			body, ok := heredocBody(r.Hdoc, r.Op == syntax.DashHdoc)
			if !ok {
				a.refuse(refuse(r.Op.String()))
				return cwds, cwds
			}
			redirs = append(redirs, planRedirect{heredoc: true, text: body})
			continue
		}
		if a.full {
			if text, ok := fileRedirect(r); ok {
				redirs = append(redirs, planRedirect{text: text})
				continue
			}
		}
		tok := r.Op.String()
		if r.N != nil {
			tok = r.N.Value + tok
		}
		a.refuse(refuse(tok))
		return cwds, cwds
	}
	if st.Cmd == nil {
		if len(st.Redirs) > 0 {
			// Redirections without a command do nothing a plan could
			// say as plainly; they are refused rather than re-printed.
			a.refuse(refuse(st.Redirs[0].Op.String()))
		}
		return cwds, cwds
	}
	if st.Negated {
		a.p.b.WriteString("! ")
	}
	succ, fail = a.cmd(st.Cmd, cwds)
	for _, r := range redirs {
		if r.heredoc {
			a.p.heredoc(r.text)
		} else {
			a.p.b.WriteString(" " + r.text)
		}
	}
	if st.Negated {
		succ, fail = fail, succ
	}
	return succ, fail
}

// heredocBody returns the text of a quoted here-document as the shell
// feeds it. The parser keeps the leading tabs <<- removes, and the tabs
// before the closing delimiter as a last, unterminated line.
func heredocBody(w *syntax.Word, dash bool) (string, bool) {
	if w == nil {
		return "", true
	}
	var b strings.Builder
	for _, p := range w.Parts {
		l, ok := p.(*syntax.Lit)
		if !ok {
			return "", false
		}
		b.WriteString(l.Value)
	}
	body := b.String()
	if !dash {
		return body, true
	}
	lines := strings.SplitAfter(body, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimLeft(l, "\t")
	}
	return strings.Join(lines, ""), true
}

func (a *analyzer) cmd(c syntax.Command, cwds []string) (succ, fail []string) {
	switch c := c.(type) {
	case *syntax.CallExpr:
		return a.call(c, cwds)
	case *syntax.BinaryCmd:
		switch c.Op {
		case syntax.AndStmt:
			s1, f1 := a.stmt(c.X, cwds)
			a.p.b.WriteString(" && ")
			s2, f2 := a.stmt(c.Y, s1)
			return s2, union(f1, f2)
		case syntax.OrStmt:
			s1, f1 := a.stmt(c.X, cwds)
			a.p.b.WriteString(" || ")
			s2, f2 := a.stmt(c.Y, f1)
			return union(s1, s2), f2
		case syntax.Pipe:
			// Every stage runs in a subshell: a cd there changes nothing.
			a.stmt(c.X, cwds)
			a.p.b.WriteString(" | ")
			a.stmt(c.Y, cwds)
			return cwds, cwds
		}
		a.refuse(refuse(c.Op.String()))
	case *syntax.Subshell:
		a.refuse(refuse("("))
	case *syntax.Block:
		a.refuse(refuse("{"))
	case *syntax.IfClause:
		a.refuse(refuse("if"))
	case *syntax.WhileClause:
		if c.Until {
			a.refuse(refuse("until"))
		} else {
			a.refuse(refuse("while"))
		}
	case *syntax.ForClause:
		if c.Select {
			a.refuse(refuse("select"))
		} else {
			a.refuse(refuse("for"))
		}
	case *syntax.CaseClause:
		a.refuse(refuse("case"))
	case *syntax.FuncDecl:
		name := "function"
		if c.Name != nil {
			name = c.Name.Value + "()"
		}
		a.refuse(refuse(name))
	case *syntax.ArithmCmd:
		a.refuse(refuse("(("))
	case *syntax.TestClause:
		a.refuse(refuse("[["))
	case *syntax.DeclClause:
		name := "declare"
		if c.Variant != nil {
			name = c.Variant.Value
		}
		a.refuse(refuse(name))
	case *syntax.LetClause:
		a.refuse(refuse("let"))
	case *syntax.TimeClause:
		a.refuse(refuse("time"))
	case *syntax.CoprocClause:
		a.refuse(refuse("coproc"))
	default:
		a.refuse(refuse(fmt.Sprintf("%T", c)))
	}
	return cwds, cwds
}

func (a *analyzer) call(c *syntax.CallExpr, cwds []string) (succ, fail []string) {
	if len(c.Assigns) > 0 {
		name := "="
		if c.Assigns[0].Name != nil {
			name = c.Assigns[0].Name.Value + "="
		}
		a.refuse(refuse(name))
		return cwds, cwds
	}
	words := make([]word, len(c.Args))
	for i, w := range c.Args {
		ww, r := evalWord(w)
		if r != nil {
			a.refuse(r)
			return cwds, cwds
		}
		words[i] = a.expand(ww)
	}
	if len(words) == 1 && words[0].literal() && words[0].val == "cd" && a.e.home != "" {
		// A bare cd goes where the engine judged it goes, whatever HOME
		// the shell has.
		words = append(words, lit(a.e.home))
	}
	outer, head, start := a.callEnv, a.head, a.callStart
	a.callEnv, a.head, a.callStart = nil, "", len(a.segs)
	succ, fail = a.argv(words, cwds, true)
	if a.head != "" {
		words[0] = lit(a.head)
	}
	for i := range words {
		if plan, ok := a.innerPlans[&words[i]]; ok {
			words[i] = lit(plan)
		}
	}
	a.p.call(a.callEnv, words)
	a.callEnv, a.head, a.callStart = outer, head, start
	return succ, fail
}

// expand gives a "$NAME" of a variable the request sets its value: the
// plan passes that value itself, so it is what is judged.
func (a *analyzer) expand(w word) word {
	if !w.quotedVar {
		return w
	}
	var b wordBuilder
	vars := false
	for _, p := range w.parts {
		if p.kind == partVar {
			if v, ok := a.env[p.text]; ok {
				b.add(partLit, v)
				continue
			}
			vars = true
		}
		b.add(p.kind, p.text)
	}
	w.parts, w.val, w.quotedVar = b.parts(), b.value(), vars
	return w
}

// setEnv records the assignments a program of the current simple command
// needs.
func (a *analyzer) setEnv(prefix string) {
	if !slices.Contains(a.callEnv, prefix) {
		a.callEnv = append(a.callEnv, prefix)
	}
}

// nonLiteralToken names what would expand in w.
func nonLiteralToken(w word) string {
	switch {
	case w.quotedVar:
		if i := strings.IndexByte(w.val, '$'); i >= 0 {
			end := i + 1
			for end < len(w.val) && (w.val[end] == '_' || w.val[end] >= 'a' && w.val[end] <= 'z' || w.val[end] >= 'A' && w.val[end] <= 'Z' || w.val[end] >= '0' && w.val[end] <= '9') {
				end++
			}
			return w.val[i:end]
		}
		return "$"
	case w.tilde:
		return "~"
	case w.brace:
		return "{"
	case w.glob:
		if i := strings.IndexAny(w.val, "*?["); i >= 0 {
			return w.val[i : i+1]
		}
	}
	return "*"
}

func values(ws []word) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.val
	}
	return out
}

// argv judges one simple command given as words; top is set when they are
// a statement's own, whose program word the plan may replace by its binary.
func (a *analyzer) argv(words []word, cwds []string, top bool) (succ, fail []string) {
	if len(words) == 0 || a.refused != "" {
		return cwds, cwds
	}
	if !words[0].literal() {
		a.refuse(refuse(nonLiteralToken(words[0])))
		return cwds, cwds
	}
	name := words[0].val
	argv := values(words)
	if shellBuiltins[name] {
		return a.builtin(name, words, argv, cwds)
	}
	bins, ok := a.resolve(name, argv, cwds)
	if !ok {
		return cwds, cwds
	}
	if top && len(bins) == 1 {
		a.head = bins[0].path
	}
	for _, b := range bins {
		a.program(b, words, argv, cwds)
	}
	return cwds, cwds
}

func (a *analyzer) builtin(name string, words []word, argv []string, cwds []string) (succ, fail []string) {
	seg := Segment{Argv: argv, Decision: Allow, Reason: "builtin " + name}
	switch name {
	case "pwd", "true", "false", ":":
		a.add(seg)
		return cwds, cwds
	case "echo", "printf":
		if !a.full {
			break
		}
		for _, w := range words[1:] {
			if !w.literal() {
				a.refuse(refuse(nonLiteralToken(w)))
				return cwds, cwds
			}
		}
		if name == "printf" && len(words) > 1 && strings.HasPrefix(words[1].val, "-") {
			// bash's printf -v assigns a variable, which a "${NAME}"
			// the plan leaves to the shell would then read.
			a.refuse(refuse("printf " + words[1].val))
			return cwds, cwds
		}
		a.add(seg)
		return cwds, cwds
	case "cd":
		args := words[1:]
		if len(args) > 1 {
			a.refuse(refuse("cd " + args[1].val))
			return cwds, cwds
		}
		target := a.e.home
		if len(args) == 1 {
			if !args[0].literal() {
				a.refuse(refuse(nonLiteralToken(args[0])))
				return cwds, cwds
			}
			target = args[0].val
			if strings.HasPrefix(target, "-") {
				a.refuse(refuse("cd " + target))
				return cwds, cwds
			}
		}
		if target == "" {
			a.refuse(refuse("cd"))
			return cwds, cwds
		}
		var out []string
		for _, d := range cwds {
			t := target
			if !path.IsAbs(t) {
				t = path.Join(d, t)
			}
			t = path.Clean(t)
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
		a.add(seg)
		return out, cwds
	case "exec", "command":
		rest := words[1:]
		if len(rest) > 0 && strings.HasPrefix(rest[0].val, "-") {
			a.refuse(refuse(name + " " + rest[0].val))
			return cwds, cwds
		}
		a.add(Segment{Argv: argv, Decision: Allow, Reason: "wrapper " + name + ": judged by what it runs"})
		if len(rest) == 0 {
			return cwds, cwds
		}
		return a.argv(rest, cwds, false)
	}
	a.refuse(refuse(name))
	return cwds, cwds
}

// program judges a resolved binary run with words.
func (a *analyzer) program(b binary, words []word, argv []string, cwds []string) {
	args := argv[1:]
	p, real := b.path, b.real
	base := kindName(b)
	// kindPath carries the deciding name to the helpers that take paths.
	kindPath := "/" + base
	miss := func(why string) {
		a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: real, Decision: AskHuman, Reason: ErrNotAllowed + " (" + why + ")",
			Recordable: recordable(p) && recordable(real) && recordable(kindPath)})
	}
	if stdinRunners[base] {
		// What it runs is completed at run time from its input.
		a.fail(ErrNotAllowed + " (" + base + " builds commands from what it reads at run time, which the policy cannot judge)")
		return
	}
	if rule, denied := matchEntries(a.e.deny, p, args); denied || real != p {
		if !denied {
			rule, denied = matchEntries(a.e.deny, real, args)
		}
		if denied {
			a.denied = fmt.Sprintf("%s (deny rule %s)", ErrNotAllowed, rule)
			a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: real, Decision: Deny, Reason: a.denied})
			return
		}
	}
	id, listed := matchEntries(a.e.entries, p, args)
	if !listed && real != p && !multiCall[progName(real)] {
		// The binary that runs is the link's target.
		id, listed = matchEntries(a.e.entries, real, args)
	}
	if !listed || profiled(base) {
		// Options are judged on the values the program receives: an
		// argument that expands at run time could be any of them.
		for _, w := range words[1:] {
			if !w.literal() {
				a.refuse(refuse(nonLiteralToken(w)))
				return
			}
		}
	}
	if wrappers[base] {
		inner, why, ok := unwrap(base, words[1:])
		if !ok {
			a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: real, Decision: AskHuman, Reason: ErrNotAllowed + " (" + why + ")"})
			return
		}
		if inner != nil {
			a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: real, Decision: Allow, Reason: "wrapper " + base + ": judged by what it runs"})
			if len(inner) > 0 && inner[0].val == "env" && base == "env" {
				a.refuse(refuse("env env"))
				return
			}
			// Wrappers exec a binary: no builtins, no functions.
			a.depth++
			if a.depth > maxDepth*4 {
				a.fail(ErrNotAllowed + ": wrappers nested too deep")
				return
			}
			a.argvExec(inner, cwds)
			a.depth--
			return
		}
	}
	switch {
	case multiCall[base] || isRunner(base):
		miss(base + " runs programs the policy cannot follow")
		return
	case isShell(kindPath):
		a.shell(b, words, argv, cwds)
		return
	}
	if isInterpreter(kindPath) {
		if flag, ok := hasInlineCode(kindPath, args); ok {
			miss(base + " " + flag + " runs inline code")
			return
		}
	}
	if base == "find" {
		for _, w := range args {
			if findExec[w] {
				a.fail(ErrNotAllowed + " (find " + w + " runs a command on names found at run time, which the policy cannot judge)")
				return
			}
		}
	}
	if listed {
		if base == "git" {
			if why, ok := judgeGit(args); !ok {
				miss(why)
				return
			}
			a.setEnv(gitAssignments)
		} else if flag, ok := hasHookFlag(kindPath, args); ok {
			miss(base + " " + flag + " runs another program")
			return
		}
		a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: real, Decision: Allow, Reason: "allowlist", EntryID: id})
		return
	}
	if prof, ok := a.e.safe[base]; ok && a.e.safeDirs[path.Dir(p)] {
		if err := checkSafeArgs(base, prof, args); err != nil {
			miss(err.Error())
			return
		}
		a.setEnv(safeBinAssignments)
		a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: real, Decision: Allow, Reason: "safe bin"})
		return
	}
	if a.e.skills[path.Dir(p)] {
		a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: real, Decision: Allow, Reason: "skill"})
		return
	}
	miss(p + " is not in the allowlist")
}

// realPath is p with its symlinks resolved where the resolver knows them.
func (a *analyzer) realPath(p string) string {
	if rp, ok := a.r.(interface{ RealPath(string) string }); ok {
		return rp.RealPath(p)
	}
	return p
}

// kindName is the name that decides how a binary is judged: the name of
// what a symlink finally points to (a link named "x" to /bin/sh is a
// shell), except for multi-call binaries, which act as the name they were
// started under.
func kindName(b binary) string {
	base := progName(b.path)
	real := progName(b.real)
	if multiCall[real] && !multiCall[base] {
		return base
	}
	return real
}

// argvExec judges words run by exec(2) from a wrapper: a builtin name there
// is looked up on PATH like any program, except the few the shell would
// not find as binaries, which are refused.
func (a *analyzer) argvExec(words []word, cwds []string) {
	if len(words) == 0 {
		return
	}
	if !words[0].literal() {
		a.refuse(refuse(nonLiteralToken(words[0])))
		return
	}
	argv := values(words)
	bins, _ := a.resolve(words[0].val, argv, cwds)
	for _, b := range bins {
		a.program(b, words, argv, cwds)
	}
}

// shell judges sh -c STRING by the commands in STRING; a shell running a
// script or stdin cannot be judged.
func (a *analyzer) shell(b binary, words []word, argv []string, cwds []string) {
	p := b.path
	base := progName(p)
	miss := func(why string) {
		a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: b.real, Decision: AskHuman, Reason: ErrNotAllowed + " (" + why + ")"})
	}
	hasC := false
	i := 1
	for ; i < len(words); i++ {
		v := words[i].val
		if !words[i].literal() {
			a.refuse(refuse(nonLiteralToken(words[i])))
			return
		}
		if v == "--" {
			i++
			break
		}
		if !strings.HasPrefix(v, "-") || len(v) < 2 {
			break
		}
		for _, c := range v[1:] {
			switch c {
			case 'c':
				hasC = true
			case 'e', 'u', 'x', 'f':
			default:
				miss(base + " -" + string(c) + " is not judged")
				return
			}
		}
	}
	if !hasC || i >= len(words) {
		miss(base + " runs a script or stdin the policy cannot judge")
		return
	}
	for _, w := range words[i:] {
		if !w.literal() {
			a.refuse(refuse(nonLiteralToken(w)))
			return
		}
	}
	if a.depth >= maxDepth {
		a.fail(ErrNotAllowed + ": shells nested too deep")
		return
	}
	inner := words[i].val
	if tok, bad := controlChar(inner); bad {
		a.refuse(refuse(tok))
		return
	}
	f, err := parse(inner)
	if err != nil {
		a.fail(err.Error())
		return
	}
	if tok, bad := misread(inner, f); bad {
		a.refuse(refuse(tok))
		return
	}
	a.add(Segment{Argv: argv, ResolvedPath: p, RealPath: b.real, Decision: Allow, Reason: base + " -c: judged by what it runs"})
	n := len(a.segs)
	a.depth++
	// The inner shell runs the plan of what was judged inside, never the
	// string it was given.
	outer := a.p
	a.p = &printer{}
	a.stmts(f.Stmts, cwds)
	if a.innerPlans == nil {
		a.innerPlans = map[*word]string{}
	}
	plan := a.p.b.String()
	a.innerPlans[&words[i]] = plan
	a.p = outer
	// The shell's segment, and those of the wrappers it runs under, show
	// the string the shell is given: the plan, not the text it replaced.
	// A wrapper's argv ends with the shell's (what it runs is the rest of
	// its words).
	for k := a.callStart; k < n; k++ {
		if sa := a.segs[k].Argv; len(sa) >= len(argv) && slices.Equal(sa[len(sa)-len(argv):], argv) {
			sa = slices.Clone(sa)
			sa[len(sa)-len(argv)+i] = plan
			a.segs[k].Argv = sa
		}
	}
	a.depth--
	// allow-always records the inner program only when the inner command
	// is one plain program call; a chain or pipeline records nothing.
	if !(len(f.Stmts) == 1 && isCall(f.Stmts[0].Cmd)) {
		for i := n; i < len(a.segs); i++ {
			a.segs[i].Recordable = false
		}
	}
}

func isCall(c syntax.Command) bool {
	_, ok := c.(*syntax.CallExpr)
	return ok
}
