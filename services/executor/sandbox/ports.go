package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// DialPort connects to TCP port on the sandbox's own loopback, from the
// host: the calling thread enters the sandbox's network namespace for the
// connect alone. The sandbox gets no network by it; what it listens on
// 127.0.0.1 (or every address) becomes reachable to the host, and to
// whom the host hands the connection.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("sandbox: port %d", port)
	}
	ns, err := s.netns()
	if err != nil {
		return nil, err
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("sandbox: own network namespace: %w", err)}
			return
		}
		defer self.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("sandbox: enter its network namespace: %w", err)}
			return
		}
		var d net.Dialer
		c, dialErr := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread is left in the sandbox's namespace: it ends
			// with this goroutine, still locked, and runs nothing else.
			if c != nil {
				c.Close()
			}
			ch <- result{err: fmt.Errorf("sandbox: leave its network namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{c, dialErr}
	}()
	r := <-ch
	return r.c, r.err
}

// netns returns the sandbox's network namespace, opened once from one of
// its processes. A pid is only a name: the process is pinned with a
// pidfd while its namespace is opened, and must then still be alive and
// in the sandbox's cgroup, so that no other process given the same pid
// can lend its namespace.
func (s *Sandbox) netns() (*os.File, error) {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	if s.ns != nil {
		return s.ns, nil
	}
	var host unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &host); err != nil {
		return nil, fmt.Errorf("sandbox: own network namespace: %w", err)
	}
	pids, err := s.cg.pids()
	if err != nil {
		return nil, fmt.Errorf("sandbox: its processes: %w", err)
	}
	for _, pid := range pids {
		f, err := pinnedNetns(pid, &host)
		if err != nil {
			continue
		}
		now, err := s.cg.pids()
		if err != nil || !slices.Contains(now, pid) {
			f.Close()
			continue
		}
		s.ns = f
		return f, nil
	}
	return nil, errors.New("sandbox: no process of it is in its network namespace")
}

// pinnedNetns opens the network namespace of pid, which must not be
// host's, and checks that pid named one process throughout.
func pinnedNetns(pid int, host *unix.Stat_t) (*os.File, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pidfd)
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || (st.Dev == host.Dev && st.Ino == host.Ino) {
		f.Close()
		return nil, errors.New("not in a namespace of its own")
	}
	if err := unix.PidfdSendSignal(pidfd, syscall.Signal(0), nil, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
