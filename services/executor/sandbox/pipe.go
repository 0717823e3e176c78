package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// A process started with Options.Pipe hands one of its streams to the host
// as the pipe itself, so that bulk bytes (an archive's tar) do not pass
// through the agent: two copies and a wakeup of the agent per block fewer.
// The agent reports the fd of its end; the host takes a duplicate of it
// from the agent (pidfd_getfd), checks that it is a pipe, and opens that
// pipe anew (through /proc/self/fd), so that the open file the host reads
// or writes is its own: nothing in the sandbox shares its flags (a
// blocking mode set by the sandbox would hold a host thread). The agent
// closes its end once told (wire.FrameTaken).
//
// What the host can reach this way is a FIFO the agent held, whose other
// end is in the sandbox or is the host's own (an anonymous pipe, or a
// named one the sandbox made, opened anew through the magic link, never
// by its path): bytes the sandbox could have sent or received as frames
// all the same.

// pipeSize is the capacity a taken pipe is given.
const pipeSize = 1 << 20

// errNotPipe is an agent naming an fd that is not a pipe: a protocol
// violation.
var errNotPipe = errors.New("the fd the agent named is not a pipe")

// takePipe takes the agent's fd, the end of a pipe the host will read
// (wire.PipeStdout) or write (wire.PipeStdin). Its error wraps errNotPipe
// or unix.EBADF when the agent named no pipe of its own.
func (s *Sandbox) takePipe(fd int, dir string) (*os.File, error) {
	if fd < 0 {
		return nil, unix.EBADF
	}
	pidfd, err := s.agentPidfd()
	if err != nil {
		return nil, err
	}
	defer unix.Close(pidfd)
	taken, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return nil, fmt.Errorf("take the agent's fd %d: %w", fd, err)
	}
	defer unix.Close(taken)
	var st unix.Stat_t
	if err := unix.Fstat(taken, &st); err != nil {
		return nil, fmt.Errorf("stat the agent's fd: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, errNotPipe
	}
	flags := unix.O_RDONLY
	if dir == wire.PipeStdin {
		flags = unix.O_WRONLY
	}
	// Opening a pipe's /proc/self/fd entry makes a new open file of the
	// same pipe. Nonblocking, so that Go's poller serves it and closing
	// it ends a read or write in progress.
	own, err := unix.Open("/proc/self/fd/"+strconv.Itoa(taken), flags|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the agent's pipe: %w", err)
	}
	// A pipe of a few of tar's records rather than the default 64 KiB:
	// fewer wakeups of either end per byte. The pages are charged to
	// whoever writes them. Best effort: the default works too.
	_, _ = unix.FcntlInt(uintptr(own), unix.F_SETPIPE_SZ, pipeSize)
	return os.NewFile(uintptr(own), "sandbox-pipe"), nil
}

// agentPidfd returns a pidfd of the sandbox's agent: the only child of
// the bubblewrap the host started. Its pid is read before and after the
// pidfd is opened, so that the pidfd names that child, not a process
// given the same pid after the agent died.
func (s *Sandbox) agentPidfd() (int, error) {
	if s.cmd == nil || s.cmd.Process == nil {
		return -1, ErrGone
	}
	bwrap := strconv.Itoa(s.cmd.Process.Pid)
	children := "/proc/" + bwrap + "/task/" + bwrap + "/children"
	child := func() (int, error) {
		b, err := os.ReadFile(children)
		if err != nil {
			return 0, fmt.Errorf("find the agent: %w", err)
		}
		f := strings.Fields(string(b))
		if len(f) != 1 {
			return 0, fmt.Errorf("find the agent: bubblewrap has %d children", len(f))
		}
		return strconv.Atoi(f[0])
	}
	pid, err := child()
	if err != nil {
		return -1, err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("find the agent: %w", err)
	}
	if again, err := child(); err != nil || again != pid {
		unix.Close(pidfd)
		return -1, errors.Join(ErrGone, err)
	}
	return pidfd, nil
}
