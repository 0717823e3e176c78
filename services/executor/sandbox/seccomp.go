package sandbox

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside a sandbox: they reach the kernel's
// most exposed surfaces (mounts, modules, keyrings, tracing, BPF) and no
// ordinary command needs them.
var deniedSyscalls = []string{
	"mount", "umount2", "pivot_root", "chroot", "setns",
	"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"add_key", "request_key", "keyctl",
	"bpf", "perf_event_open", "userfaultfd", "open_by_handle_at", "name_to_handle_at",
	"reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "lookup_dcookie",
	"iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"vhangup", "personality", "uselib", "nfsservctl",
}

// seccompProgram returns the sandbox's seccomp filter as the raw sock_filter
// array bubblewrap loads with --seccomp.
func seccompProgram() ([]byte, error) {
	eperm := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: eperm, Names: deniedSyscalls},
			{
				Action: eperm,
				NamesWithCondtions: []seccomp.NameWithConditions{
					// No nested user namespaces: they hand out capabilities.
					{Name: "unshare", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
					{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
					// Terminal injection and console control.
					{Name: "ioctl", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.Equal, Value: unix.TIOCSTI}}},
					{Name: "ioctl", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.Equal, Value: unix.TIOCLINUX}}},
					// The kernel reads an ioctl request as 32 bits: a value
					// with high bits set would slip past the checks above.
					{Name: "ioctl", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.GreaterThan, Value: 0xffffffff}}},
				},
			},
			// clone3 passes its flags in memory, where a filter cannot look;
			// ENOSYS makes libc fall back to clone, which is checked.
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		},
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp: encode: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.LittleEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.LittleEndian.AppendUint32(out, r.K)
	}
	return out, nil
}
