package policy

import (
	"path"
	"regexp"
	"strings"
)

// shells run a command string with -c and are judged by what it runs; they
// are never recorded by allow-always.
var shells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true,
	"fish": true, "csh": true, "tcsh": true, "rbash": true, "yash": true, "posh": true,
}

// interpreters run code given inline (-c, -e …) or from a script file; that
// code cannot be judged, so inline code is never allowed without a human,
// and they are never recorded by allow-always. A version suffix
// (python3.12, perl5.36) names the same interpreter.
var interpreters = map[string]bool{
	"python": true, "pypy": true, "perl": true, "ruby": true, "irb": true, "node": true, "nodejs": true,
	"deno": true, "bun": true, "php": true, "lua": true, "luajit": true, "tclsh": true, "wish": true,
	"awk": true, "gawk": true, "mawk": true, "nawk": true, "busybox": true, "toybox": true, "osascript": true,
	"pwsh": true, "powershell": true, "rscript": true, "julia": true, "guile": true, "racket": true,
	"sbcl": true, "ghci": true, "runghc": true, "scala": true, "groovy": true, "jshell": true, "java": true,
	"expect": true, "gdb": true, "sqlite": true, "psql": true, "mysql": true, "vim": true, "vi": true,
	"nvim": true, "emacs": true, "ex": true, "ed": true, "sed": true, "m": true, "make": true,
}

// interpreterName strips a version suffix of digits and dots.
func interpreterName(n string) string {
	return strings.TrimRight(n, "0123456789.")
}

// multiCall are binaries that act as many programs; never recorded.
var multiCall = map[string]bool{"busybox": true, "toybox": true, "coreutils": true}

// runners start another program in a way the engine does not follow (a
// different user, root, namespaces, another personality or loader, a
// terminal, tracing, a remote host); never allowed without a human,
// whatever the allowlist says, and never recorded by allow-always.
var runners = map[string]bool{
	"sudo": true, "sudoedit": true, "doas": true, "su": true, "sg": true, "newgrp": true, "runuser": true,
	"pkexec": true, "chroot": true, "schroot": true, "unshare": true, "nsenter": true, "ip": true,
	"strace": true, "ltrace": true, "perf": true, "rr": true, "valgrind": true, "catchsegv": true,
	"script": true, "watch": true, "flock": true, "setpriv": true, "capsh": true, "systemd-run": true,
	"systemd-nspawn": true, "ssh-agent": true, "dbus-run-session": true, "dbus-launch": true,
	"firejail": true, "bwrap": true, "proot": true, "fakeroot": true, "fakechroot": true, "faketime": true,
	"time": true, "chrt": true, "taskset": true, "ionice": true, "setsid": true, "eatmydata": true,
	"prlimit": true, "setarch": true, "linux32": true, "linux64": true, "i386": true, "x86_64": true,
	"uname26": true, "choom": true, "numactl": true, "cgexec": true, "nocache": true, "trickle": true,
	"torsocks": true, "torify": true, "proxychains": true, "proxychains4": true, "tsocks": true,
	"sshpass": true, "ssh": true, "rsh": true, "mosh": true, "screen": true, "tmux": true, "at": true,
	"batch": true, "run-parts": true, "xvfb-run": true, "chpst": true, "setuidgid": true, "envdir": true,
	"softlimit": true, "tini": true, "dumb-init": true, "unbuffer": true, "ld.so": true,
}

// stdinRunners complete the command they run with what they read at run
// time; no argv can be judged, so they are refused outright.
var stdinRunners = map[string]bool{"xargs": true, "parallel": true}

// isRunner also knows the dynamic loaders, which run any program given
// as an argument under a versioned name (ld-linux-x86-64.so.2).
func isRunner(n string) bool {
	return runners[n] || strings.HasPrefix(n, "ld-linux") || strings.HasPrefix(n, "ld-musl")
}

// profiled reports whether the engine looks inside a program's arguments
// (a wrapper, a shell, an interpreter, a runner or a tool with hook
// options): those must be the values the program receives, never words
// that expand at run time.
func profiled(base string) bool {
	_, hooks := hookFlags[base]
	_, safe := profiles[base]
	return wrappers[base] || shells[base] || interpreters[interpreterName(base)] || multiCall[base] ||
		isRunner(base) || stdinRunners[base] || hooks || safe || base == "find" || base == "git"
}

// hookFlags are options of common tools that run another program or load
// code; an allowlisted tool given one of them needs a human. Long names are
// matched with GNU's abbreviation rule.
var hookFlags = map[string]struct {
	short string
	long  []string
}{
	"tar":    {short: "IF", long: []string{"to-command", "use-compress-program", "checkpoint-action", "info-script", "new-volume-script", "rsh-command", "rmt-command"}},
	"rsync":  {short: "e", long: []string{"rsh", "rsync-path"}},
	"ssh":    {short: "oFS", long: nil},
	"scp":    {short: "oFS", long: nil},
	"sftp":   {short: "oFSD", long: nil},
	"zip":    {short: "T", long: []string{"unzip-command"}},
	"sort":   {short: "", long: []string{"compress-program"}},
	"less":   {short: "", long: nil},
	"man":    {short: "Ph", long: []string{"pager", "html"}},
	"curl":   {short: "K", long: []string{"config"}},
	"wget":   {short: "e", long: []string{"execute", "use-askpass"}},
	"npm":    {short: "", long: []string{"script-shell"}},
	"docker": {short: "", long: nil},
}

// findExec are find's actions that run a program; what they run is judged.
var findExec = map[string]bool{"-exec": true, "-execdir": true, "-ok": true, "-okdir": true}

// progName is the name a binary is known by: the base name of its path.
func progName(p string) string { return strings.ToLower(path.Base(p)) }

func isShell(p string) bool       { return shells[progName(p)] }
func isInterpreter(p string) bool { return interpreters[interpreterName(progName(p))] }

// recordable reports whether allow-always may add p to an allowlist.
func recordable(p string) bool {
	n := progName(p)
	return p != "" && !shells[n] && !interpreters[interpreterName(n)] && !multiCall[n] && !isRunner(n) && !wrappers[n] && !stdinRunners[n]
}

// hasHookFlag reports the first argument that is a hook option of prog.
func hasHookFlag(prog string, args []string) (string, bool) {
	h, ok := hookFlags[progName(prog)]
	if !ok {
		return "", false
	}
	if progName(prog) == "tar" && len(args) > 0 && !strings.HasPrefix(args[0], "-") && strings.ContainsAny(args[0], h.short) {
		// tar reads a first argument without a dash as a cluster of
		// options (tar xIf …).
		return args[0], true
	}
	for _, a := range args {
		if a == "--" {
			return "", false
		}
		switch {
		case strings.HasPrefix(a, "--"):
			n, _, _ := strings.Cut(a[2:], "=")
			if n == "" {
				continue
			}
			for _, l := range h.long {
				// GNU tools take any unambiguous prefix.
				if strings.HasPrefix(l, n) {
					return a, true
				}
			}
		case len(a) > 1 && a[0] == '-' && h.short != "":
			if strings.ContainsAny(a[1:], h.short) {
				return a, true
			}
		}
	}
	return "", false
}

// shellBuiltins are names the shell runs itself (or special-cases) rather
// than looking up on PATH; all but cd, pwd, true, false and : (allowed by
// analyzer.builtin) and the wrappers exec and command are refused.
var shellBuiltins = map[string]bool{
	".": true, "source": true, "eval": true, "exec": true, "command": true, "builtin": true,
	"trap": true, "export": true, "set": true, "unset": true, "alias": true, "unalias": true,
	"read": true, "readonly": true, "declare": true, "typeset": true, "local": true, "let": true,
	"shift": true, "return": true, "exit": true, "break": true, "continue": true, "enable": true,
	"hash": true, "type": true, "ulimit": true, "umask": true, "wait": true, "jobs": true,
	"fg": true, "bg": true, "kill": true, "disown": true, "suspend": true, "times": true,
	"shopt": true, "complete": true, "compgen": true, "compopt": true, "mapfile": true,
	"readarray": true, "printf": true, "echo": true, "test": true, "[": true, "[[": true,
	"getopts": true, "fc": true, "history": true, "dirs": true, "pushd": true, "popd": true,
	"help": true, "logout": true, "caller": true, "bind": true, "coproc": true, "select": true,
	"function": true, "time": true, "newgrp": true, "cd": true, "pwd": true, "true": true,
	"false": true, ":": true,
}

// wrappers run the program named in their arguments; they are unwrapped and
// judged by what they run.
var wrappers = map[string]bool{
	"env": true, "nice": true, "nohup": true, "timeout": true, "stdbuf": true,
}

// inlineCode are the flags with which interpreters run code given on the
// command line (short letters, matched inside clusters, and long names).
var inlineCode = []struct {
	re    *regexp.Regexp
	short string
	long  []string
}{
	{regexp.MustCompile(`^(python|pypy)[0-9.]*$`), "c", nil},
	{regexp.MustCompile(`^perl[0-9.]*$`), "eE", nil},
	{regexp.MustCompile(`^(ruby|irb)[0-9.]*$`), "e", nil},
	{regexp.MustCompile(`^(node|nodejs|deno|bun)[0-9.]*$`), "ep", []string{"eval", "print"}},
	{regexp.MustCompile(`^php[0-9.]*$`), "rB", []string{"run"}},
	{regexp.MustCompile(`^(lua|luajit)[0-9.]*$`), "e", nil},
	{regexp.MustCompile(`^(pwsh|powershell)$`), "cC", []string{"command"}},
	{regexp.MustCompile(`^(osascript|julia|racket|rscript|gawk|awk|mawk|nawk)$`), "e", []string{"eval", "source", "exec"}},
	{regexp.MustCompile(`^(guile|psql)$`), "c", []string{"command"}},
	{regexp.MustCompile(`^(vim|vi|nvim|ex)$`), "c", []string{"cmd"}},
	{regexp.MustCompile(`^(emacs|sbcl)$`), "", []string{"eval", "load"}},
	{regexp.MustCompile(`^(gdb)$`), "x", []string{"ex", "eval-command", "command"}},
	{regexp.MustCompile(`^(mysql)$`), "e", []string{"execute"}},
	{regexp.MustCompile(`^sqlite3$`), "", []string{"cmd"}},
}

// hasInlineCode reports the argument with which interpreter prog would run
// code from the command line.
func hasInlineCode(prog string, args []string) (string, bool) {
	n := progName(prog)
	for _, ic := range inlineCode {
		if !ic.re.MatchString(n) {
			continue
		}
		for _, a := range args {
			if a == "--" {
				break
			}
			switch {
			case strings.HasPrefix(a, "--"):
				name, _, _ := strings.Cut(a[2:], "=")
				for _, l := range ic.long {
					if name != "" && strings.HasPrefix(l, name) {
						return a, true
					}
				}
			case strings.HasPrefix(a, "-") && len(a) > 1:
				// Single-dash long options (-cmd, -command, -eval).
				for _, l := range ic.long {
					if a[1:] == l {
						return a, true
					}
				}
				if ic.short != "" && strings.ContainsAny(a[1:], ic.short) {
					return a, true
				}
			case strings.HasPrefix(a, "+") && (n == "vim" || n == "vi" || n == "nvim" || n == "ex"):
				return a, true
			}
		}
	}
	return "", false
}
