// Package execenv owns the rule for the variables a command's request may set
// (the exec tool's and the shell tool's env,
// docs/explanation/exec-policy.md): the executor enforces it on every command
// and the exec policy judges with it.
//
// The rule is an allowlist of name shapes, not a list of known hooks: a
// deny-list misses the next variable some program reads as an option
// (POSIXLY_CORRECT changes how grep parses its arguments) or as a program
// to run (GIT_SEQUENCE_EDITOR). A name is accepted when it is
//
//   - one of the locale and terminal variables programs read only as data
//     (LANG, LANGUAGE, LC_*, TZ, TERM, NO_COLOR, COLUMNS, LINES …), or
//   - a plain upper-case name (^[A-Z][A-Z0-9_]*$) outside every namespace
//     programs in a sandbox read configuration from (GIT*, SSH*, LD_*,
//     PYTHON*, NODE_*, NPM_*, PIP_*, GO*, CARGO*, JAVA*, …) and without a
//     suffix that names an option or a program (_OPTIONS, _OPTS, _FLAGS,
//     _PATH, _HOME, _COMMAND, _CMD, _PROGRAM, _EDITOR, _PAGER, _SHELL,
//     _CONFIG, _PROXY, _HOOK …).
//
// Lower-case names are refused: several programs read lower-case
// variables as configuration (http_proxy, all_proxy, no_proxy).
package execenv

import (
	"fmt"
	"strings"
)

// Limits on one command's environment.
const (
	MaxVars  = 128
	MaxBytes = 64 << 10
)

// data are variables programs read only as data: locale, time zone and
// terminal shape.
var data = map[string]bool{
	"LANG": true, "LANGUAGE": true, "TZ": true, "TERM": true, "NO_COLOR": true, "FORCE_COLOR": true,
	"CLICOLOR": true, "CLICOLOR_FORCE": true, "COLUMNS": true, "LINES": true, "CI": true,
}

// namespaces are the variables programs read as configuration, options or
// programs to run: a name is in one when it is the entry or starts with
// the entry and _; an entry ending in * takes any continuation
// (PYTHONPATH, PERL5OPT, GIT_DIR).
var namespaces = []string{
	"LD", "DYLD", "GLIBC", "MALLOC*", "GCONV*", "LOCPATH", "NLSPATH", "HOSTALIASES", "RES", "LOCALDOMAIN",
	"BASH*", "ENV", "SHELL*", "PS1", "PS2", "PS3", "PS4", "IFS", "CDPATH", "GLOBIGNORE", "PROMPT*", "HIST*",
	"INPUTRC", "POSIXLY*", "PATH", "HOME", "TMP*", "TEMP*", "XDG", "USER", "LOGNAME", "MAIL*", "OLDPWD", "PWD",
	"GIT*", "SSH*", "GPG*", "GNUPG*", "EDITOR", "VISUAL", "PAGER", "MANPAGER", "MANOPT", "MANPATH", "LESS*",
	"MORE", "BROWSER", "PYTHON*", "PIP", "VIRTUAL_ENV", "CONDA*", "PERL*", "RUBY*", "GEM", "BUNDLE*", "NODE",
	"NPM", "YARN*", "PNPM*", "COREPACK*", "DENO", "BUN", "JAVA*", "_JAVA*", "JDK", "CLASSPATH", "MAVEN*",
	"GRADLE*", "GO*", "CARGO*", "RUST*", "PHP*", "LUA", "TCL*", "R", "JULIA*", "DOTNET*", "NUGET*",
	"GREP*", "TAR", "ZIP*", "UNZIP*", "GZIP", "BZIP*", "XZ", "ZSTD*", "LZ*", "JQ", "AWK*", "TERMINFO*",
	"CURL*", "WGET*", "HTTP", "HTTPS", "HTTP_PROXY", "HTTPS_PROXY", "FTP", "ALL_PROXY", "NO_PROXY", "SOCKS*",
	"RSYNC*", "CVS*", "SVN*", "HG*", "MAKE*", "GNUMAKE*", "MFLAGS", "CC", "CXX", "CPP", "CFLAGS", "CXXFLAGS",
	"CPPFLAGS", "LDFLAGS", "LDLIBS", "AR", "AS", "LD", "PKG_CONFIG*", "CMAKE*", "DOCKER*", "KUBE*", "HELM*",
	"AWS", "GOOGLE", "AZURE", "DBUS", "SYSTEMD", "DISPLAY", "WAYLAND*", "XAUTH*", "SUDO", "DOAS", "SSL",
	"OPENSSL*", "REQUESTS", "NSS", "KRB5*", "CONCH", "TRACEPARENT", "TRACESTATE", "OTEL",
}

// inNamespace reports the namespace entry name falls in.
func inNamespace(name string) (string, bool) {
	for _, n := range namespaces {
		if p, ok := strings.CutSuffix(n, "*"); ok {
			if strings.HasPrefix(name, p) {
				return p + "*", true
			}
			continue
		}
		if name == n || strings.HasPrefix(name, n+"_") {
			return n + "_*", true
		}
	}
	return "", false
}

// suffixes name options, paths or programs.
var suffixes = []string{
	"_OPTIONS", "_OPTS", "_OPT", "_FLAGS", "_ARGS", "_PATH", "_HOME", "_DIR", "_FILE", "_COMMAND", "_CMD",
	"_PROGRAM", "_PROG", "_EDITOR", "_PAGER", "_SHELL", "_CONFIG", "_CONF", "_PROXY", "_HOOK", "_EXEC",
	"_LIBRARY", "_LIB", "_PRELOAD", "_PLUGIN", "_PLUGINS", "_ASKPASS", "_HELPER", "_RC",
}

// Check reports why a request may not set the variable name, or nil.
func Check(name string) error {
	if name == "" {
		return fmt.Errorf("env: empty variable name")
	}
	if !identifier(name) {
		return fmt.Errorf("env: %q is not a valid variable name", name)
	}
	if data[name] || strings.HasPrefix(name, "LC_") && plain(name[3:]) {
		return nil
	}
	if !plain(name) || name[0] == '_' || name[0] >= '0' && name[0] <= '9' {
		return fmt.Errorf("env: %s may not be set: a request may set LANG, LC_*, TZ, TERM and other data variables, or plain upper-case names (A-Z, 0-9, _)", name)
	}
	if ns, ok := inNamespace(name); ok {
		return fmt.Errorf("env: %s may not be set: programs read %s variables as configuration, options or programs to run", name, ns)
	}
	for _, s := range suffixes {
		if strings.HasSuffix(name, s) {
			return fmt.Errorf("env: %s may not be set: a *%s variable names an option, a path or a program", name, s)
		}
	}
	return nil
}

// CheckAll checks every variable of a command's environment and its size;
// the error names the first bad variable in name order.
func CheckAll(env map[string]string) error {
	if len(env) > MaxVars {
		return fmt.Errorf("env: at most %d variables", MaxVars)
	}
	total := 0
	for k, v := range env {
		total += len(k) + len(v)
	}
	if total > MaxBytes {
		return fmt.Errorf("env: more than %d bytes", MaxBytes)
	}
	var first error
	firstName := ""
	for k, v := range env {
		err := Check(k)
		if err == nil && strings.ContainsRune(v, 0) {
			err = fmt.Errorf("env: %s: value contains a NUL byte", k)
		}
		if err != nil && (first == nil || k < firstName) {
			first, firstName = err, k
		}
	}
	return first
}

// plain reports whether s is made of A-Z, 0-9 and _ only.
func plain(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// identifier reports whether s can name a shell variable.
func identifier(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}
