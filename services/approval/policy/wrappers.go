package policy

import (
	"strings"
)

// wrapperOpts are the options each wrapper may be given: true for those
// that take a value. Anything else makes the wrapper a miss.
var wrapperOpts = map[string]map[string]bool{
	"env":     {},
	"nice":    {"-n": true, "--adjustment": true},
	"nohup":   {},
	"timeout": {"-s": true, "--signal": true, "-k": true, "--kill-after": true, "--preserve-status": false, "--foreground": false, "-v": false, "--verbose": false},
	"stdbuf":  {"-i": true, "-o": true, "-e": true, "--input": true, "--output": true, "--error": true},
	"xargs": {"-0": false, "--null": false, "-r": false, "--no-run-if-empty": false, "-t": false, "--verbose": false,
		"-x": false, "--exit": false, "-n": true, "--max-args": true, "-L": true, "--max-lines": true,
		"-P": true, "--max-procs": true, "-d": true, "--delimiter": true, "-s": true, "--max-chars": true},
}

// unwrap returns the command a wrapper runs. ok is false with a reason when
// the wrapper's own arguments cannot be judged; inner is nil when the
// wrapper runs nothing (bare env prints the environment and is judged as a
// program itself).
func unwrap(base string, args []word) (inner []word, why string, ok bool) {
	opts := wrapperOpts[base]
	i := 0
	for ; i < len(args); i++ {
		w := args[i]
		if !w.literal() {
			return nil, base + " options must be literal", false
		}
		v := w.val
		if v == "--" {
			i++
			break
		}
		if base == "env" && strings.Contains(v, "=") && !strings.HasPrefix(v, "-") {
			return nil, "env sets " + v[:strings.IndexByte(v, '=')+1], false
		}
		if !strings.HasPrefix(v, "-") || v == "-" {
			break
		}
		if base == "nice" && allDigits(v[1:]) {
			continue
		}
		name, _, hasV := strings.Cut(v, "=")
		takes, known := opts[name]
		if !known && !strings.HasPrefix(v, "--") && len(v) > 2 {
			// Attached short value: -n10, -oL.
			if t, k := opts[v[:2]]; k && t {
				continue
			}
		}
		if !known {
			return nil, base + " " + v + " is not judged", false
		}
		if takes && !hasV {
			if i+1 >= len(args) || !args[i+1].literal() {
				return nil, base + " " + v + " needs a literal value", false
			}
			i++
		}
	}
	rest := args[i:]
	if base == "timeout" {
		if len(rest) < 2 {
			return nil, "timeout needs a duration and a command", false
		}
		if !rest[0].literal() {
			return nil, "timeout duration must be literal", false
		}
		rest = rest[1:]
	}
	if len(rest) == 0 {
		switch base {
		case "env":
			return nil, "", true
		case "xargs":
			return []word{}, "", true
		}
		return nil, base + " without a command", false
	}
	return rest, "", true
}

// CheckEnv refuses request environment variables that change how programs
// are found or loaded or how shells and interpreters start (SPEC §6).
func CheckEnv(env map[string]string) error {
	for k, v := range env {
		if !validEnvName(k) {
			return &envError{name: k, why: "is not a valid variable name"}
		}
		if strings.ContainsRune(v, 0) {
			return &envError{name: k, why: "holds a NUL byte"}
		}
		if hookEnv(k) {
			return &envError{name: k, why: "may not be set: it changes which program runs or how it starts"}
		}
	}
	return nil
}

type envError struct{ name, why string }

func (e *envError) Error() string { return "env " + e.name + " " + e.why }

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

var hookEnvNames = map[string]bool{
	"PATH": true, "BASH_ENV": true, "ENV": true, "PS4": true, "PS1": true, "PS2": true, "PROMPT_COMMAND": true,
	"SHELLOPTS": true, "BASHOPTS": true, "CDPATH": true, "GLOBIGNORE": true, "IFS": true, "HOME": true,
	"SHELL": true, "EDITOR": true, "VISUAL": true, "PAGER": true, "MANPAGER": true, "GIT_PAGER": true,
	"LESSOPEN": true, "LESSCLOSE": true, "BROWSER": true, "SSH_ASKPASS": true, "SUDO_ASKPASS": true,
	"PERL5OPT": true, "PERL5LIB": true, "PERLLIB": true, "PERL5DB": true, "RUBYOPT": true, "RUBYLIB": true,
	"NODE_OPTIONS": true, "NODE_PATH": true, "JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true,
	"TCLLIBPATH": true, "LUA_INIT": true, "LUA_PATH": true, "LUA_CPATH": true, "GCONV_PATH": true,
	"HOSTALIASES": true, "LOCPATH": true, "NLSPATH": true, "MALLOC_CHECK_": true, "TMPDIR": false,
	"XDG_CONFIG_HOME": true, "XDG_DATA_HOME": true, "ZDOTDIR": true, "INPUTRC": true, "TERMINFO": true,
	"AWKPATH": true, "AWKLIBPATH": true, "JQ_LIBRARY_PATH": true, "GREP_OPTIONS": true, "POSIXLY_CORRECT": false,
	"GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_EXEC_PATH": true, "GIT_ASKPASS": true, "GIT_EDITOR": true,
	"GIT_EXTERNAL_DIFF": true, "GIT_CONFIG": true, "GIT_CONFIG_GLOBAL": true, "GIT_CONFIG_SYSTEM": true,
	"GIT_CONFIG_PARAMETERS": true, "GIT_CONFIG_COUNT": true, "GIT_TEMPLATE_DIR": true, "GIT_PROXY_COMMAND": true,
	"RSYNC_RSH": true, "RSYNC_CONNECT_PROG": true, "CVS_RSH": true, "PROMPT_COMMANDS": true,
}

func hookEnv(k string) bool {
	u := strings.ToUpper(k)
	if hookEnvNames[u] {
		return true
	}
	for _, p := range []string{"LD_", "DYLD_", "BASH_FUNC_", "PYTHON", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_", "NODE_", "RUBY", "PERL", "GLIBC_", "MALLOC_"} {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}
