package e2e

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/conchtest"
)

// A persistent workspace keeps what its sandbox wrote, a command killed
// by the sandbox's end included, whether the executor keeps sandboxes'
// files in memory or on btrfs storage: the final save reads the
// workspace after its processes end and before its files go.
func TestPersistentWorkspaceEnd(t *testing.T) {
	t.Run("tmpfs", func(t *testing.T) { testPersistentWorkspaceEnd(t, startDev(t)) })
	t.Run("btrfs", func(t *testing.T) {
		storage := filepath.Join(conchtest.Btrfs(t, 1<<30), "storage")
		testPersistentWorkspaceEnd(t, startDev(t, "CONCH_SANDBOX_STORAGE="+storage))
	})
}

func testPersistentWorkspaceEnd(t *testing.T, d *dev) {
	create := func() string {
		t.Helper()
		status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"persistent": true, "user": "alice"})
		var sb struct{ ID string }
		if status != 200 || json.Unmarshal(body, &sb) != nil {
			t.Fatalf("create = %d %s", status, body)
		}
		return sb.ID
	}
	run := func(id, cmd string) string {
		t.Helper()
		status, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": cmd})
		var out struct {
			Stdout   string
			ExitCode int `json:"exit_code"`
		}
		if status != 200 || json.Unmarshal(body, &out) != nil || out.ExitCode != 0 {
			t.Fatalf("%s = %d %s", cmd, status, body)
		}
		return out.Stdout
	}
	first := create()
	run(first, "mkdir -p notes && echo kept > notes/a && echo also > b")
	// Written by a command still running when the sandbox is deleted,
	// after the last command's save: only the final save at the
	// sandbox's end, once the command is killed, can keep it.
	streamed := make(chan struct{})
	go func() {
		defer close(streamed)
		d.call("POST", "/api/v1/sandboxes/"+first+"/commands", d.Key, map[string]any{"command": "echo late > late; sleep 60", "stream": true})
	}()
	time.Sleep(time.Second)
	if status, body := d.call("DELETE", "/api/v1/sandboxes/"+first, d.Key, nil); status != 200 {
		t.Fatalf("delete = %d %s", status, body)
	}
	<-streamed
	second := create()
	if got := run(second, "cat notes/a b late"); got != "kept\nalso\nlate\n" {
		t.Fatalf("the next sandbox of the workspace reads %q", got)
	}
}
