package agent

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// confineSpawnerThread leaves the calling thread with CAP_SYS_ADMIN
// effective, so that it can clone each command into a new pid namespace,
// and with nothing a command could inherit: empty bounding, inheritable and
// ambient sets. Emptying the bounding set needs CAP_SETPCAP, which
// bubblewrap grants the agent for this alone; it is dropped here too.
// Capabilities are per thread, so the agent's other threads are unchanged.
func confineSpawnerThread() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("agent: clear ambient capabilities: %w", err)
	}
	// Past the kernel's last capability PR_CAPBSET_DROP answers EINVAL;
	// 64 covers every capability the set can hold.
	for c := range 64 {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break
		}
		if err != nil {
			return fmt.Errorf("agent: drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[unix.CAP_SYS_ADMIN/32].Permitted = 1 << (unix.CAP_SYS_ADMIN % 32)
	data[unix.CAP_SYS_ADMIN/32].Effective = 1 << (unix.CAP_SYS_ADMIN % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("agent: keep only CAP_SYS_ADMIN: %w", err)
	}
	return nil
}
