package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSandboxLaunchAhead checks --sandbox-launch-ahead from the host's
// /proc: an executor keeps that many bubblewraps waiting, none with 0,
// makes up for the one a create takes, and sandboxes start either way.
func TestSandboxLaunchAhead(t *testing.T) {
	for _, ahead := range []int{0, 3} {
		t.Run(strconv.Itoa(ahead), func(t *testing.T) {
			t.Parallel()
			d := startDev(t, "CONCH_SANDBOX_POOL=0", fmt.Sprintf("CONCH_SANDBOX_LAUNCH_AHEAD=%d", ahead))
			pid := d.cmd.Process.Pid
			waitBwraps(t, pid, ahead)
			id := newSandbox(t, d, map[string]any{})
			code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": "echo started"})
			if code != http.StatusOK || !strings.Contains(string(body), "started") {
				t.Fatalf("command = %d %s", code, body)
			}
			// The sandbox's own bubblewrap is a child of conch dev too.
			waitBwraps(t, pid, ahead+1)
			if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK {
				t.Fatalf("delete = %d %s", code, body)
			}
			waitBwraps(t, pid, ahead)
		})
	}
}

// waitBwraps waits until the process pid has exactly n bubblewrap
// children, and stays so for a moment.
func waitBwraps(t *testing.T, pid, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	stable := 0
	for {
		got := bwrapChildren(t, pid)
		if got == n {
			if stable++; stable == 5 {
				return
			}
		} else {
			stable = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("conch dev has %d bubblewrap children, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bwrapChildren counts the bubblewrap processes whose parent is pid.
func bwrapChildren(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // it ended
		}
		comm, fields, ok := procStat(stat)
		if ok && comm == "bwrap" && len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			n++
		}
	}
	return n
}
