// Package seccomp builds the seccomp filter bubblewrap loads into every
// sandbox. The filter is an allowlist. It follows Docker's default
// profile (moby/profiles, seccomp/default.json: the unconditional allow
// group, the arch-specific groups for amd64 and arm64, and the argument
// rules for clone, clone3, personality and socket), narrowed where a
// sandbox has less to give than a container:
//
//   - Only the native ABI. Docker lets an amd64 container use the i386 and
//     x32 tables too; here the first instructions kill any process entering
//     the kernel through another architecture's table (int $0x80, the
//     x32 bit), so that no rule below can be skipped by renumbering a call.
//   - Calls Docker allows only to containers granted a capability (mount,
//     bpf, perf_event_open, ptrace, kcmp, setns, ...) are never allowed:
//     a command holds no capability at all.
//   - io_uring is refused: it performs system calls on the caller's behalf
//     where this filter cannot see them, and is a frequent source of kernel
//     bugs. Runtimes that use it (libuv) fall back to ordinary calls.
//   - Calls Docker allows but a shell workload has no use for and that are
//     kernel attack surface: the clock and time setters, modify_ldt,
//     name_to_handle_at, syslog.
//
// A call on neither list fails with ENOSYS, as if the kernel were older than
// the call, so that libraries fall back to an older call instead of failing.
// The calls known to be dangerous fail with EPERM, which tools report as
// "Operation not permitted".
package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// allowedSyscalls are allowed whatever their arguments. Names missing from
// the native table (the legacy calls arm64 never had) are skipped, as Docker
// does.
var allowedSyscalls = []string{
	// Files, directories, links and their metadata.
	"access", "faccessat", "faccessat2", "open", "openat", "openat2", "creat", "close", "close_range",
	"read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev", "pwritev2",
	"lseek", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
	"getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir",
	"rename", "renameat", "renameat2", "link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat",
	"readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2",
	"chown", "fchown", "lchown", "fchownat", "umask", "mknod", "mknodat",
	"truncate", "ftruncate", "fallocate", "fadvise64", "readahead",
	"fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "flock", "fcntl",
	"utime", "utimes", "utimensat", "futimesat",
	"getxattr", "lgetxattr", "fgetxattr", "getxattrat", "listxattr", "llistxattr", "flistxattr", "listxattrat",
	"setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr", "lremovexattr", "fremovexattr", "removexattrat",
	"copy_file_range", "sendfile", "splice", "tee", "vmsplice", "cachestat",
	"dup", "dup2", "dup3", "pipe", "pipe2", "memfd_create", "memfd_secret",
	"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_mark",
	// Asynchronous I/O of the older interface, which runs no call for the
	// caller; databases and compilers' build tools use it.
	"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
	// Waiting and events.
	"poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
	"epoll_wait", "epoll_wait_old", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
	"signalfd", "signalfd4", "timerfd_create", "timerfd_settime", "timerfd_gettime",
	"futex", "futex_waitv", "futex_wait", "futex_wake", "futex_requeue",
	"set_robust_list", "get_robust_list", "restart_syscall",
	// Memory.
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "remap_file_pages",
	"mlock", "mlock2", "mlockall", "munlock", "munlockall", "membarrier", "mseal",
	"pkey_alloc", "pkey_free", "pkey_mprotect", "map_shadow_stack",
	// Processes and threads: clone is checked below; the rest acts only
	// on the caller's own processes.
	"execve", "execveat", "fork", "vfork", "exit", "exit_group", "wait4", "waitid",
	"kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal", "process_mrelease",
	"getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
	"set_tid_address", "rseq", "arch_prctl", "prctl", "seccomp",
	"getpriority", "setpriority", "ioprio_get", "ioprio_set",
	"sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getattr", "sched_setattr",
	"sched_getparam", "sched_setparam", "sched_getscheduler", "sched_setscheduler",
	"sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
	"getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "sysinfo", "uname", "getcpu", "getrandom",
	// Credentials: inside the user namespace a command can only switch
	// among the ids it already holds, and capget/capset can only lower.
	"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
	"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups",
	"capget", "capset",
	// Landlock only ever takes rights away.
	"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
	// Signals and timers.
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
	"rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "pause", "alarm", "nanosleep", "clock_nanosleep",
	"clock_gettime", "clock_getres", "gettimeofday", "time", "getitimer", "setitimer",
	"timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
	// Sockets (socket itself is checked below). Only loopback exists in
	// the sandbox's network namespace.
	"socketpair", "bind", "listen", "accept", "accept4", "connect", "shutdown",
	"getsockname", "getpeername", "getsockopt", "setsockopt",
	"sendto", "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
	// System V and POSIX IPC, private to the sandbox's IPC namespace.
	"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
	"msgget", "msgsnd", "msgrcv", "msgctl",
	"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
	// Mount listing shows what /proc/self/mountinfo already shows.
	"statmount", "listmount",
}

// deniedSyscalls fail with EPERM: they reach the kernel's most exposed
// surfaces (mounts, modules, keyrings, tracing, BPF, io_uring) and no
// ordinary command needs them. The default would refuse them too; naming
// them gives a clearer error and documents the intent.
var deniedSyscalls = []string{
	"mount", "umount2", "pivot_root", "chroot", "setns",
	"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"add_key", "request_key", "keyctl",
	"bpf", "perf_event_open", "userfaultfd", "open_by_handle_at", "name_to_handle_at",
	"fanotify_init", "quotactl", "quotactl_fd", "lookup_dcookie",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"reboot", "swapon", "swapoff", "syslog", "acct",
	"iopl", "ioperm", "modify_ldt", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"sethostname", "setdomainname", "vhangup", "uselib", "nfsservctl",
}

// cloneNamespaces are the clone flags that make namespaces, except
// CLONE_NEWPID and CLONE_NEWCGROUP: the agent makes a pid and a cgroup
// namespace for every command (so a command sees neither other processes
// nor the host's cgroup paths) and the filter cannot tell it from a
// command. A command has no CAP_SYS_ADMIN, so the kernel refuses it those
// two; the others a nested user namespace would grant it, which is why
// they are refused here, CLONE_NEWUSER first of all.
// (CLONE_NEWTIME is absent: for clone it is part of the exit signal.)
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWNET

// unshareNamespaces are refused to unshare: nothing in a sandbox needs a
// new namespace after it starts.
const unshareNamespaces = cloneNamespaces | unix.CLONE_NEWPID | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// allowedPersonalities are the personality values Docker allows: the query
// (0xffffffff), Linux, and the 32-bit and uname26 variants. Others, such
// as ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC, weaken the process's memory
// layout.
var allowedPersonalities = []uint32{0, 0x0008, 0x20000, 0x20008, 0xffffffff}

// allowedSocketFamilies are the address families a shell workload uses;
// others (AF_ALG, AF_VSOCK, AF_PACKET, the rarely built protocols) are
// refused with EAFNOSUPPORT, which programs already handle as "not built".
var allowedSocketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// Offsets into the kernel's struct seccomp_data.
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArgs = 16
)

// x32SyscallBit marks a call made through amd64's x32 table.
const x32SyscallBit = 0x40000000

// seccompArgLow is the offset of the low 32 bits of argument i. Every
// argument checked here is one the kernel reads as 32 bits (flags, an ioctl
// request, an address family), so the high half is irrelevant. The
// architectures supported are little-endian.
func seccompArgLow(i int) uint32 { return seccompArgs + 8*uint32(i) }

var (
	retAllow  = bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}
	retKill   = bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS}
	retEPERM  = retErrno(unix.EPERM)
	retENOSYS = retErrno(unix.ENOSYS)
)

func retErrno(e unix.Errno) bpf.RetConstant {
	return bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(e)}
}

// seccompRule is the decision for one system call: instructions that end in
// a return on every path, run with the call's number in the accumulator.
type seccompRule struct {
	nr    uint32
	block []bpf.Instruction
}

// seccompFilter builds the sandbox's filter for the machine it runs on.
func seccompFilter() ([]bpf.Instruction, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
	}
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	rules := map[uint32][]bpf.Instruction{}
	add := func(name string, block ...bpf.Instruction) error {
		nr, ok := native.SyscallNames[name]
		if !ok {
			return nil // not a call of this architecture
		}
		if _, dup := rules[uint32(nr)]; dup {
			return fmt.Errorf("seccomp: %s listed twice", name)
		}
		rules[uint32(nr)] = block
		return nil
	}
	for _, n := range allowedSyscalls {
		if err := add(n, retAllow); err != nil {
			return nil, err
		}
	}
	for _, n := range deniedSyscalls {
		if err := add(n, retEPERM); err != nil {
			return nil, err
		}
	}
	for _, r := range []struct {
		name  string
		block []bpf.Instruction
	}{
		{"clone", refuseBits(0, cloneNamespaces)},
		{"unshare", refuseBits(0, unshareNamespaces)},
		// clone3 passes its flags in memory, where a filter cannot look;
		// ENOSYS makes libc and Go fall back to clone, which is checked.
		{"clone3", []bpf.Instruction{retENOSYS}},
		{"ioctl", refuseIoctls(btrfsIoctlType, unix.TIOCSTI, unix.TIOCLINUX)},
		{"personality", allowValues(0, retEPERM, allowedPersonalities...)},
		{"socket", allowValues(0, retErrno(unix.EAFNOSUPPORT), allowedSocketFamilies...)},
	} {
		if err := add(r.name, r.block...); err != nil {
			return nil, err
		}
	}
	sorted := make([]seccompRule, 0, len(rules))
	for nr, b := range rules {
		sorted = append(sorted, seccompRule{nr: nr, block: b})
	}
	slices.SortFunc(sorted, func(a, b seccompRule) int { return int(a.nr) - int(b.nr) })

	prog := []bpf.Instruction{
		// The architecture comes first: a call's number means nothing
		// until its table is known.
		bpf.LoadAbsolute{Off: seccompArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		retKill,
		bpf.LoadAbsolute{Off: seccompNr, Size: 4},
	}
	if runtime.GOARCH == "amd64" {
		// x32 shares amd64's architecture value; only this bit tells it.
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32SyscallBit, SkipFalse: 1}, retKill)
	}
	tree, err := seccompTree(sorted)
	if err != nil {
		return nil, err
	}
	prog = append(prog, tree...)
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: filter has %d instructions, the kernel takes %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// seccompTree finds the call's rule by binary search, so that each call
// costs a handful of comparisons rather than a walk down hundreds; calls
// without a rule fail with ENOSYS.
func seccompTree(rules []seccompRule) ([]bpf.Instruction, error) {
	const leaf = 4
	if len(rules) <= leaf {
		var out []bpf.Instruction
		for _, r := range rules {
			if len(r.block) > 255 {
				return nil, fmt.Errorf("seccomp: rule for call %d too long", r.nr)
			}
			out = append(out, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: r.nr, SkipTrue: uint8(len(r.block))})
			out = append(out, r.block...)
		}
		return append(out, retENOSYS), nil
	}
	mid := len(rules) / 2
	left, err := seccompTree(rules[:mid])
	if err != nil {
		return nil, err
	}
	right, err := seccompTree(rules[mid:])
	if err != nil {
		return nil, err
	}
	out := []bpf.Instruction{
		// Below the pivot: skip the long jump into the left half.
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: rules[mid].nr, SkipFalse: 1},
		bpf.Jump{Skip: uint32(len(left))},
	}
	out = append(out, left...)
	return append(out, right...), nil
}

// refuseBits refuses the call with EPERM when argument arg has any of bits.
func refuseBits(arg int, bits uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompArgLow(arg), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: bits, SkipFalse: 1},
		retEPERM,
		retAllow,
	}
}

// btrfsIoctlType is the type byte of every btrfs ioctl request
// (BTRFS_IOCTL_MAGIC), and of the file clone ioctls, which share it. A
// sandbox on btrfs storage that made a subvolume or a snapshot would have
// a quota group of its own, limited by nothing; no btrfs ioctl is needed
// by a command (cp falls back to copying).
const btrfsIoctlType = 0x94

// refuseIoctls refuses an ioctl with EPERM when its request is of type
// typ (bits 8 to 15) or one of requests.
func refuseIoctls(typ uint32, requests ...uint32) []bpf.Instruction {
	return append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompArgLow(1), Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xff00},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: typ << 8, SkipFalse: 1},
		retEPERM,
	}, refuseValues(1, requests...)...)
}

// refuseValues refuses the call with EPERM when argument arg is one of
// values.
func refuseValues(arg int, values ...uint32) []bpf.Instruction {
	out := []bpf.Instruction{bpf.LoadAbsolute{Off: seccompArgLow(arg), Size: 4}}
	for i, v := range values {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(len(values) - i)})
	}
	return append(out, retAllow, retEPERM)
}

// allowValues allows the call only when argument arg is one of values, and
// answers deny otherwise.
func allowValues(arg int, deny bpf.RetConstant, values ...uint32) []bpf.Instruction {
	out := []bpf.Instruction{bpf.LoadAbsolute{Off: seccompArgLow(arg), Size: 4}}
	for i, v := range values {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(len(values) - i)})
	}
	return append(out, deny, retAllow)
}

// Program returns the sandbox's seccomp filter as the raw sock_filter
// array bubblewrap loads with --seccomp.
func Program() ([]byte, error) {
	insts, err := seccompFilter()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp: encode: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}
