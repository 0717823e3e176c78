// Package fsview looks at a sandbox's filesystem from the host the way the
// sandbox's own processes see it: through the sandbox's mount table,
// following its symlinks inside that view and never on the host. The executor
// uses it to resolve the programs of a command it must judge before running
// it in a sandbox (docs/explanation/exec-policy.md: allowlist patterns match
// the binary the command would really run), and to read those programs to
// bind an approval to their content.
//
// Whatever runs in a sandbox writes its workspace, symlinks included, and
// may change it while the host looks. So a link to /usr/bin/x means the
// sandbox's /usr/bin/x, a link to /etc/shadow the sandbox's /etc/shadow
// (which it does not have), and no link, however it is spelled or swapped
// in, takes the host outside the sandbox's view. Symlinks are read and
// followed here, one component at a time, in the sandbox's namespace; each
// step on the host is a single openat2 beneath a mount's source with
// RESOLVE_NO_SYMLINKS, so a component swapped for a link between two steps
// makes the step fail instead of leading elsewhere. (os.Root and openat2's
// RESOLVE_IN_ROOT confine a walk to one host directory, but a sandbox's
// links cross its mounts — from the workspace into /usr — so the walk
// between mounts is done here.)
//
// Parts of a sandbox cannot be seen from the host at all: its /tmp, /proc
// and /dev are filesystems of its own. A path into one of them is
// neither found nor missing but ErrPrivate, and a PATH search that meets
// one stops there: guessing would let a program planted there run under
// the name of one found later on PATH.
package fsview
