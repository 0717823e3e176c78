package seccomp

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompCall is one system call as the kernel hands it to the filter.
type seccompCall struct {
	arch uint32
	nr   uint32
	args [6]uint64
}

// evalSeccomp runs the filter on c. The BPF machine loads words big-endian
// while the kernel's seccomp_data is native (little-endian) order, so each
// 32-bit word is written big-endian at the offset the kernel puts it.
func evalSeccomp(t *testing.T, vm *bpf.VM, c seccompCall) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[seccompNr:], c.nr)
	binary.BigEndian.PutUint32(data[seccompArch:], c.arch)
	for i, a := range c.args {
		off := seccompArgLow(i)
		binary.BigEndian.PutUint32(data[off:], uint32(a))
		binary.BigEndian.PutUint32(data[off+4:], uint32(a>>32))
	}
	ret, err := vm.Run(data)
	if err != nil {
		t.Fatalf("run filter: %v", err)
	}
	return uint32(ret)
}

func seccompVM(t *testing.T) (*bpf.VM, *arch.Info) {
	t.Helper()
	prog, err := seccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("filter does not validate: %v", err)
	}
	native, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	return vm, native
}

const (
	allow  = unix.SECCOMP_RET_ALLOW
	kill   = unix.SECCOMP_RET_KILL_PROCESS
	eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

func TestSeccompDecisions(t *testing.T) {
	t.Parallel()
	vm, native := seccompVM(t)
	nr := func(name string) uint32 {
		n, ok := native.SyscallNames[name]
		if !ok {
			t.Fatalf("no call %s on %s", name, native.Name)
		}
		return uint32(n)
	}
	id := uint32(native.ID)
	const threadFlags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
		unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID
	cases := []struct {
		name string
		call seccompCall
		want uint32
	}{
		{"getpid", seccompCall{arch: id, nr: nr("getpid")}, allow},
		{"write", seccompCall{arch: id, nr: nr("write")}, allow},
		{"futex", seccompCall{arch: id, nr: nr("futex")}, allow},
		{"memfd_create", seccompCall{arch: id, nr: nr("memfd_create")}, allow},
		{"inotify_add_watch", seccompCall{arch: id, nr: nr("inotify_add_watch")}, allow},
		{"clone a thread", seccompCall{arch: id, nr: nr("clone"), args: [6]uint64{threadFlags}}, allow},
		{"clone a process", seccompCall{arch: id, nr: nr("clone"), args: [6]uint64{uint64(unix.SIGCHLD)}}, allow},
		// What the agent does for each command.
		{"clone a pid and cgroup namespace", seccompCall{arch: id, nr: nr("clone"), args: [6]uint64{unix.CLONE_NEWPID | unix.CLONE_NEWCGROUP | unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | uint64(unix.SIGCHLD)}}, allow},
		{"clone a user namespace", seccompCall{arch: id, nr: nr("clone"), args: [6]uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}}, eperm},
		{"clone a mount namespace", seccompCall{arch: id, nr: nr("clone"), args: [6]uint64{unix.CLONE_NEWNS}}, eperm},
		{"clone a network namespace", seccompCall{arch: id, nr: nr("clone"), args: [6]uint64{unix.CLONE_NEWNET}}, eperm},
		{"clone3", seccompCall{arch: id, nr: nr("clone3")}, enosys},
		{"unshare files", seccompCall{arch: id, nr: nr("unshare"), args: [6]uint64{unix.CLONE_FILES | unix.CLONE_FS}}, allow},
		{"unshare user", seccompCall{arch: id, nr: nr("unshare"), args: [6]uint64{unix.CLONE_NEWUSER}}, eperm},
		{"unshare pid", seccompCall{arch: id, nr: nr("unshare"), args: [6]uint64{unix.CLONE_NEWPID}}, eperm},
		{"unshare time", seccompCall{arch: id, nr: nr("unshare"), args: [6]uint64{unix.CLONE_NEWTIME}}, eperm},
		{"unshare cgroup", seccompCall{arch: id, nr: nr("unshare"), args: [6]uint64{unix.CLONE_NEWCGROUP}}, eperm},
		{"ioctl TCGETS", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, unix.TCGETS}}, allow},
		{"ioctl TIOCSTI", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, unix.TIOCSTI}}, eperm},
		{"ioctl TIOCSTI with high bits", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, 1<<32 | unix.TIOCSTI}}, eperm},
		{"ioctl TIOCLINUX", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, unix.TIOCLINUX}}, eperm},
		{"ioctl btrfs subvolume create", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, 0x5000940e}}, eperm},
		{"ioctl btrfs snapshot", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, 0x50009417}}, eperm},
		{"ioctl FICLONE", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, unix.FICLONE}}, eperm},
		{"ioctl btrfs with high bits", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, 1<<32 | 0x5000940e}}, eperm},
		{"ioctl FIONREAD (TIOCINQ)", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, unix.TIOCINQ}}, allow},
		{"ioctl TIOCGWINSZ", seccompCall{arch: id, nr: nr("ioctl"), args: [6]uint64{0, unix.TIOCGWINSZ}}, allow},
		{"personality query", seccompCall{arch: id, nr: nr("personality"), args: [6]uint64{0xffffffff}}, allow},
		{"personality no randomize", seccompCall{arch: id, nr: nr("personality"), args: [6]uint64{0x0040000}}, eperm}, // ADDR_NO_RANDOMIZE,
		{"socket inet", seccompCall{arch: id, nr: nr("socket"), args: [6]uint64{unix.AF_INET}}, allow},
		{"socket unix", seccompCall{arch: id, nr: nr("socket"), args: [6]uint64{unix.AF_UNIX}}, allow},
		{"socket alg", seccompCall{arch: id, nr: nr("socket"), args: [6]uint64{unix.AF_ALG}}, unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)},
		{"socket vsock", seccompCall{arch: id, nr: nr("socket"), args: [6]uint64{unix.AF_VSOCK}}, unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)},
		{"keyctl", seccompCall{arch: id, nr: nr("keyctl")}, eperm},
		{"ptrace", seccompCall{arch: id, nr: nr("ptrace")}, eperm},
		{"perf_event_open", seccompCall{arch: id, nr: nr("perf_event_open")}, eperm},
		{"kcmp", seccompCall{arch: id, nr: nr("kcmp")}, eperm},
		{"bpf", seccompCall{arch: id, nr: nr("bpf")}, eperm},
		{"mount", seccompCall{arch: id, nr: nr("mount")}, eperm},
		{"io_uring_setup", seccompCall{arch: id, nr: nr("io_uring_setup")}, eperm},
		{"io_uring_enter", seccompCall{arch: id, nr: nr("io_uring_enter")}, eperm},
		{"io_uring_register", seccompCall{arch: id, nr: nr("io_uring_register")}, eperm},
		{"a call the filter does not know", seccompCall{arch: id, nr: 1000}, enosys},
		// Another architecture's table: whatever the number, the process dies.
		{"i386 getpid", seccompCall{arch: uint32(arch.I386.ID), nr: uint32(arch.I386.SyscallNames["getpid"])}, kill},
		{"i386 unshare", seccompCall{arch: uint32(arch.I386.ID), nr: uint32(arch.I386.SyscallNames["unshare"]), args: [6]uint64{unix.CLONE_NEWUSER}}, kill},
		{"arm getpid", seccompCall{arch: uint32(arch.ARM.ID), nr: uint32(arch.ARM.SyscallNames["getpid"])}, kill},
	}
	if native.ID == arch.X86_64.ID {
		cases = append(cases,
			struct {
				name string
				call seccompCall
				want uint32
			}{"x32 getpid", seccompCall{arch: id, nr: uint32(arch.X32.SyscallNames["getpid"] | arch.X32.SeccompMask)}, kill},
			struct {
				name string
				call seccompCall
				want uint32
			}{"x32 keyctl", seccompCall{arch: id, nr: uint32(arch.X32.SyscallNames["keyctl"] | arch.X32.SeccompMask)}, kill},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := evalSeccomp(t, vm, c.call); got != c.want {
				t.Fatalf("filter answers %#x, want %#x", got, c.want)
			}
		})
	}
}

// TestSeccompEveryCall checks the whole native table against the lists, so
// that no call is decided by a fault of the search tree.
func TestSeccompEveryCall(t *testing.T) {
	t.Parallel()
	vm, native := seccompVM(t)
	conditional := []string{"clone", "unshare", "ioctl", "personality", "socket", "clone3"}
	for nr, name := range native.SyscallNumbers {
		if slices.Contains(conditional, name) {
			continue
		}
		want := uint32(enosys)
		switch {
		case slices.Contains(allowedSyscalls, name):
			want = allow
		case slices.Contains(deniedSyscalls, name):
			want = eperm
		}
		if got := evalSeccomp(t, vm, seccompCall{arch: uint32(native.ID), nr: uint32(nr)}); got != want {
			t.Errorf("%s (%d): filter answers %#x, want %#x", name, nr, got, want)
		}
	}
	// Numbers between and beyond the table's.
	for nr := uint32(0); nr < 1024; nr++ {
		if _, ok := native.SyscallNumbers[int(nr)]; ok {
			continue
		}
		if got := evalSeccomp(t, vm, seccompCall{arch: uint32(native.ID), nr: nr}); got != enosys {
			t.Errorf("unassigned call %d: filter answers %#x, want ENOSYS", nr, got)
		}
	}
}

// TestSeccompListsNameRealCalls catches a misspelt name, which the builder
// would skip as a call of another architecture.
func TestSeccompListsNameRealCalls(t *testing.T) {
	t.Parallel()
	for _, list := range [][]string{allowedSyscalls, deniedSyscalls} {
		for _, name := range list {
			_, amd := arch.X86_64.SyscallNames[name]
			_, arm := arch.AARCH64.SyscallNames[name]
			if !amd && !arm {
				t.Errorf("%s is a call of neither x86_64 nor aarch64", name)
			}
			if slices.Contains(allowedSyscalls, name) && slices.Contains(deniedSyscalls, name) {
				t.Errorf("%s is both allowed and denied", name)
			}
		}
	}
}

func TestSeccompProgramEncodes(t *testing.T) {
	t.Parallel()
	prog, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog)%8 != 0 || len(prog)/8 > unix.BPF_MAXINSNS {
		t.Fatalf("program of %d bytes", len(prog))
	}
}
