package executor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// blockedEnv are variables a command's env may not set: they change which
// program runs or inject code into one (loader, shell and interpreter
// hooks). PATH is set by the executor (path_prepend).
var blockedEnv = map[string]bool{
	"PATH": true, "HOME": true, "IFS": true, "ENV": true, "BASH_ENV": true, "SHELLOPTS": true,
	"BASHOPTS": true, "PS4": true, "PROMPT_COMMAND": true, "CDPATH": true, "GLOBIGNORE": true,
	"PYTHONPATH": true, "PYTHONSTARTUP": true, "PYTHONHOME": true, "PYTHONINSPECT": true, "PYTHONUSERBASE": true,
	"PERL5LIB": true, "PERL5OPT": true, "PERLLIB": true, "PERL5DB": true,
	"RUBYLIB": true, "RUBYOPT": true, "NODE_OPTIONS": true, "NODE_PATH": true,
	"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true, "CLASSPATH": true,
	"GIT_EXEC_PATH": true, "GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_ASKPASS": true, "GIT_CONFIG_GLOBAL": true,
	"EDITOR": true, "VISUAL": true, "PAGER": true, "LESSOPEN": true, "LESSCLOSE": true,
	"GCONV_PATH": true, "LOCPATH": true, "MALLOC_CHECK_": true, "HOSTALIASES": true, "RESOLV_HOST_CONF": true,
	"TMPDIR": true, "SHELL": true,
}

// blockedEnvPrefixes are families of hook variables.
var blockedEnvPrefixes = []string{"LD_", "DYLD_", "BASH_FUNC_", "GLIBC_TUNABLES", "PYTHON", "PERL5", "GIT_CONFIG_"}

// maxEnv bounds the env of one command.
const (
	maxEnvVars  = 128
	maxEnvBytes = 64 << 10
)

// validateEnv checks a command's extra environment and returns an
// InvalidArgument error naming the first bad variable.
func validateEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return errs.New(errs.InvalidArgument, "env: at most %d variables", maxEnvVars)
	}
	keys := make([]string, 0, len(env))
	total := 0
	for k, v := range env {
		keys = append(keys, k)
		total += len(k) + len(v)
	}
	if total > maxEnvBytes {
		return errs.New(errs.InvalidArgument, "env: more than %d bytes", maxEnvBytes)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := validEnvName(k); err != nil {
			return errs.New(errs.InvalidArgument, "env: %v", err)
		}
		if strings.ContainsRune(env[k], 0) {
			return errs.New(errs.InvalidArgument, "env: %s: value contains a NUL byte", k)
		}
	}
	return nil
}

func validEnvName(k string) error {
	if k == "" {
		return fmt.Errorf("empty variable name")
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("%q is not a valid variable name", k)
		}
	}
	u := strings.ToUpper(k)
	if blockedEnv[u] {
		return fmt.Errorf("%s may not be set: it changes which program runs or injects code (use path_prepend for PATH)", k)
	}
	for _, p := range blockedEnvPrefixes {
		if strings.HasPrefix(u, p) {
			return fmt.Errorf("%s may not be set: %s* variables are loader or interpreter hooks", k, p)
		}
	}
	return nil
}
