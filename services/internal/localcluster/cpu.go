package localcluster

import (
	"fmt"
	"strconv"
	"time"
)

// KindSandboxes names, in CPU's answer, the CPU time of the executors'
// sandboxes (bubblewrap, the agents, the commands): the time of the
// executors' children once reaped. Each process of a sandbox is reaped by
// its parent there, up to the bubblewrap the executor reaps when the
// sandbox ends, so a sandbox's time is counted once it has ended, whatever
// cgroups the host has.
const KindSandboxes = "sandboxes"

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux architecture conch runs on).
const clockTick = 10 * time.Millisecond

// CPU returns the CPU time the cluster's processes have used so far, by
// member kind: each member's own (user and system), and the sandboxes'
// (KindSandboxes). Two readings' difference is what a stretch of work
// cost, less what sandboxes still running at its end spent; a member
// that restarted between them is not comparable.
func (s *State) CPU() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for i := range s.Members {
		m := &s.Members[i]
		if !m.alive() {
			continue
		}
		f, err := procStatFields(m.PID)
		if err != nil {
			return nil, err
		}
		var t [4]uint64 // utime, stime, cutime, cstime
		for j := range t {
			if t[j], err = strconv.ParseUint(f[11+j], 10, 64); err != nil {
				return nil, fmt.Errorf("localcluster: /proc/%d/stat: %w", m.PID, err)
			}
		}
		out[m.Kind] += time.Duration(t[0]+t[1]) * clockTick
		if m.Kind == KindExecutor {
			out[KindSandboxes] += time.Duration(t[2]+t[3]) * clockTick
		}
	}
	return out, nil
}
