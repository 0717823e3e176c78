// Package policy is conch's exec policy engine
// (docs/explanation/exec-policy.md). It parses a command line with a real
// shell parser and judges the syntax tree, never the string: every simple
// command must resolve to a binary the allowlist or a safe-bin profile
// allows, and anything whose meaning the engine cannot pin down before the
// shell runs (redirections, substitutions, expansions in command words,
// compound commands, most builtins) is refused, and so is a command the
// parser may read otherwise than the shells (continuation.go).
//
// What it judged is what runs: in allowlist mode the verdict carries a plan,
// the judged tree re-printed as a canonical script that every POSIX shell
// reads one way, and the executor runs that plan instead of the command
// (plan.go says why). Programs with hooks are judged by profiles of their
// own (git.go, safebins.go, programs.go).
//
// The engine has no I/O of its own besides resolving program names through a
// Resolver, so the approval service and the executor can both use it against
// the PATH and filesystem the command would really run with.
package policy
