// Package sandbox builds Linux sandboxes with bubblewrap and runs commands in
// them through a resident agent. It is the host's side of the trust
// boundary; the agent, inside the sandbox, is package agent, and all the
// two share is package wire: the frames they exchange and the paths inside
// a sandbox. The agent links nothing of the host.
//
// Each sandbox runs as its own unprivileged host uid in user, pid, ipc, uts,
// net and cgroup namespaces, sees a read-only system and only chosen /etc
// files, has a size- and inode-limited tmpfs workspace, a seccomp filter and
// cgroup limits (v1 or v2). The agent (conch-sandbox-agent, or the conch
// binary's hidden sandbox-agent subcommand, bound read-only) talks to the host over its
// stdin and stdout and starts each command as the child of an init shell in
// a pid namespace of its own, so that ending that init ends everything the
// command started; it keeps CAP_SYS_ADMIN of the sandbox's user namespace
// for that alone, and no command inherits it. While no command runs, the
// agent keeps the next command's init and shell started (a spare), so that
// starting a command costs neither a fork nor an exec; a spare is handed
// only to a command when no process of another command can have reached it.
//
// The agent is the sandbox's pid 1 and is not dumpable, so no command can
// read or write its memory or fds, and it passes commands and their final
// directory through fds it owns, never through the filesystem. The host
// still treats every frame from it as untrusted: a frame out of protocol
// ends that sandbox (ErrProtocol).
package sandbox
