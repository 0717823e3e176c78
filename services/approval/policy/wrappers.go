package policy

import (
	"strings"

	"github.com/conch-sh/conch/services/internal/execenv"
)

// wrapperOpts are the options each wrapper may be given: true for those
// that take a value. Anything else makes the wrapper a miss.
var wrapperOpts = map[string]map[string]bool{
	"env":     {},
	"nice":    {"-n": true, "--adjustment": true},
	"nohup":   {},
	"timeout": {"-s": true, "--signal": true, "-k": true, "--kill-after": true, "--preserve-status": false, "--foreground": false, "-v": false, "--verbose": false},
	"stdbuf":  {"-i": true, "-o": true, "-e": true, "--input": true, "--output": true, "--error": true},
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
		}
		return nil, base + " without a command", false
	}
	return rest, "", true
}

// CheckEnv refuses request environment variables outside the names a
// request may set (execenv, docs/explanation/exec-policy.md).
func CheckEnv(env map[string]string) error {
	return execenv.CheckAll(env)
}

// validEnvName reports whether k can name a shell variable.
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
