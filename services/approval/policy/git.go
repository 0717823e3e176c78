package policy

import (
	"strconv"
	"strings"
)

// git is judged by a profile of its own: an allowlisted git still runs
// programs through its configuration (aliases with !, core.pager,
// core.fsmonitor, hooks, editors, ssh and proxy commands, credential
// helpers), through options of some commands (--upload-pack, rebase
// --exec, grep --open-files-in-pager …) and through a configuration file
// a command can be made to write (--output). Chasing spellings alone is
// not enough, so the engine does both:
//
//   - git runs with a locked configuration (gitAssignments): no system or global
//     file (HOME is writable in a sandbox), and command-scope values that
//     win over any repository file for every key that names a program or
//     a hook, plus safe.bareRepository=explicit so that a directory laid
//     out as a bare repository is never picked up as one;
//   - the command must be one of git's own commands (gitCommands): a
//     built-in name always wins over an alias, so no alias, and no
//     git-<name> program on PATH, can run;
//   - options are judged as git's parser reads them: long options by any
//     prefix (git takes unambiguous abbreviations), short ones anywhere in
//     a cluster, values attached or not.
//
// What the locked configuration cannot reach are drivers named by a
// repository's own config and .gitattributes (filter.<x>.clean,
// diff.<x>.textconv, merge.<x>.driver); writing that config takes a
// command the profile refuses (config, --output, -c, --template …) or
// another allowlisted program that writes files, which the allowlist's
// owner chose to trust.

// gitAssignments lock git's configuration for a run the engine allowed.
var gitAssignments = assignments(func() map[string]string {
	env := map[string]string{
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_CONFIG_GLOBAL":   "/dev/null",
		"GIT_TERMINAL_PROMPT": "0",
		"GIT_PAGER":           "cat",
		"GIT_EDITOR":          ":",
		"GIT_SEQUENCE_EDITOR": ":",
		"GIT_ASKPASS":         "",
		"SSH_ASKPASS":         "",
		"GIT_SSH_COMMAND":     "ssh -F /dev/null -o ProxyCommand=none -o PermitLocalCommand=no",
		"GIT_PROXY_COMMAND":   "",
		"GIT_EXTERNAL_DIFF":   "",
	}
	keys := [][2]string{
		{"core.hooksPath", "/dev/null"},
		{"core.fsmonitor", "false"},
		{"core.pager", "cat"},
		{"core.editor", ":"},
		{"sequence.editor", ":"},
		{"core.askPass", ""},
		{"core.sshCommand", "ssh -F /dev/null -o ProxyCommand=none -o PermitLocalCommand=no"},
		{"core.gitProxy", ""},
		{"core.alternateRefsCommand", ""},
		{"credential.helper", ""},
		{"diff.external", ""},
		{"gpg.program", "false"},
		{"gpg.ssh.program", "false"},
		{"gpg.x509.program", "false"},
		{"protocol.ext.allow", "never"},
		{"safe.bareRepository", "explicit"},
		{"uploadpack.packObjectsHook", ""},
		{"receive.procReceiveRefs", ""},
		{"web.browser", "false"},
		{"help.autoCorrect", "0"},
	}
	env["GIT_CONFIG_COUNT"] = strconv.Itoa(len(keys))
	for i, kv := range keys {
		env["GIT_CONFIG_KEY_"+strconv.Itoa(i)] = kv[0]
		env["GIT_CONFIG_VALUE_"+strconv.Itoa(i)] = kv[1]
	}
	return env
}())

// gitGlobal are the options git takes before its command: true for those
// that take the next word as their value. Anything else is judged
// unknown (--exec-path, --git-dir, -c, --config-env, --super-prefix …).
var gitGlobal = map[string]bool{
	"-C": true, "--no-pager": false, "-P": false, "--no-replace-objects": false, "--literal-pathspecs": false,
	"--glob-pathspecs": false, "--noglob-pathspecs": false, "--icase-pathspecs": false,
	"--no-optional-locks": false, "--version": false, "--work-tree": true, "--bare": false,
}

// gitCommands are the git commands an allowlisted git may run, each with
// the options that run a program, load configuration or code, or write a
// file git would read as configuration: long names (matched by any
// prefix, as git does) and short letters (matched anywhere in a cluster).
// Commands not listed (config, alias names, bisect run, submodule,
// filter-branch, difftool, mergetool, send-email, instaweb, help, daemon,
// maintenance, credential …) need a human.
var gitCommands = map[string]struct {
	long  []string
	short string
}{
	"status": {}, "log": {long: gitDiffHooks}, "diff": {long: gitDiffHooks}, "show": {long: gitDiffHooks},
	"add": {}, "commit": {long: []string{"template", "cleanup"}}, "checkout": {}, "switch": {}, "restore": {},
	"branch": {}, "tag": {}, "merge": {long: []string{"strategy"}, short: "s"},
	"rebase": {long: []string{"exec", "strategy", "interactive"}, short: "xsi"},
	"reset":  {}, "rm": {}, "mv": {}, "init": {long: []string{"template", "separate-git-dir"}},
	"clone": {long: []string{"upload-pack", "template", "config", "separate-git-dir", "server-option"}, short: "uc"},
	"fetch": {long: []string{"upload-pack", "server-option"}, short: "o"},
	"pull":  {long: []string{"upload-pack", "strategy", "server-option", "rebase"}, short: "sor"},
	"push":  {long: []string{"receive-pack", "exec", "push-option"}, short: "o"},
	"stash": {}, "grep": {long: []string{"open-files-in-pager", "ext-grep"}, short: "O"},
	"blame": {long: []string{"contents"}}, "ls-files": {}, "ls-tree": {}, "ls-remote": {long: []string{"upload-pack"}},
	"rev-parse": {}, "rev-list": {}, "cat-file": {long: []string{"textconv", "filters"}}, "describe": {},
	"shortlog": {}, "apply": {}, "cherry-pick": {long: []string{"strategy"}}, "revert": {long: []string{"strategy"}},
	"clean": {}, "reflog": {}, "show-ref": {}, "for-each-ref": {}, "symbolic-ref": {}, "hash-object": {},
	"diff-tree": {long: gitDiffHooks}, "diff-files": {long: gitDiffHooks}, "diff-index": {long: gitDiffHooks},
	"merge-base": {}, "name-rev": {}, "count-objects": {}, "version": {}, "whatchanged": {long: gitDiffHooks},
	"format-patch": {long: gitDiffHooks}, "range-diff": {long: gitDiffHooks}, "worktree": {}, "notes": {},
	"sparse-checkout": {}, "remote": {}, "fsck": {}, "gc": {}, "prune": {}, "cherry": {}, "show-branch": {},
	"archive": {long: []string{"exec", "remote", "output"}, short: "o"}, "verify-commit": {}, "verify-tag": {},
	"check-ignore": {}, "check-attr": {}, "update-index": {}, "write-tree": {}, "read-tree": {},
	"commit-tree": {}, "mktree": {}, "update-ref": {}, "var": {},
}

// gitDiffHooks are the options of the diff family that run a program or
// write a file (--output could write a configuration file).
var gitDiffHooks = []string{"ext-diff", "textconv", "output"}

// gitEverywhere are refused whatever the command.
var gitEverywhere = []string{"exec-path", "config-env", "git-dir", "namespace", "super-prefix", "output", "upload-pack", "receive-pack", "template"}

// judgeGit judges an allowlisted git's arguments; ok is false with the
// reason when a human must decide.
func judgeGit(args []string) (string, bool) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			break
		}
		name, _, hasV := strings.Cut(a, "=")
		takes, ok := gitGlobal[name]
		if !ok {
			return "git " + a + " is not judged", false
		}
		if takes && !hasV {
			i++
		}
	}
	if i >= len(args) {
		return "", true // git, git --version
	}
	cmd := args[i]
	prof, ok := gitCommands[cmd]
	if !ok {
		return "git " + cmd + " is not a git command the policy judges (it may run a program)", false
	}
	for _, a := range args[i+1:] {
		if a == "--" {
			break
		}
		switch {
		case strings.HasPrefix(a, "--"):
			n, _, _ := strings.Cut(a[2:], "=")
			if n == "" {
				continue
			}
			for _, list := range [][]string{prof.long, gitEverywhere} {
				for _, l := range list {
					if strings.HasPrefix(l, n) {
						return "git " + cmd + " " + a + " runs a program or writes configuration", false
					}
				}
			}
		case len(a) > 1 && a[0] == '-' && prof.short != "":
			if strings.ContainsAny(a[1:], prof.short) {
				return "git " + cmd + " " + a + " runs a program or writes configuration", false
			}
		}
	}
	return "", true
}
