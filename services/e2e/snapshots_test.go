package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/conchtest"
)

// A snapshot saves a sandbox's files in the object store; a sandbox
// started from it has them, through the REST API and the CLI; a fork
// copies them. The same holds whether sandboxes keep their files in
// memory or on btrfs storage, where a fork is a copy-on-write snapshot.
func TestSnapshots(t *testing.T) {
	t.Run("tmpfs", func(t *testing.T) { testSnapshots(t, startDev(t)) })
	t.Run("btrfs", func(t *testing.T) {
		storage := filepath.Join(conchtest.Btrfs(t, 2<<30), "storage")
		testSnapshots(t, startDev(t, "CONCH_SANDBOX_STORAGE="+storage))
	})
}

func testSnapshots(t *testing.T, d *dev) {
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	conch := func(args ...string) string {
		t.Helper()
		out, errOut, code := runConch(t, env, args...)
		if code != 0 {
			t.Fatalf("conch %q: %q %q %d", args, out, errOut, code)
		}
		return out
	}
	src := strings.TrimSpace(conch("sandbox", "create"))
	conch("sandbox", "exec", src, "mkdir -p src && echo kept > src/f && chmod 600 src/f && ln -s src/f link && echo scratch > /tmp/s")
	snap := strings.TrimSpace(conch("sandbox", "snapshot", "--name", "before", src))
	if !strings.HasPrefix(snap, "snap-") {
		t.Fatalf("snapshot printed %q", snap)
	}
	conch("sandbox", "exec", src, "echo changed > src/f")

	out := conch("snapshots", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], snap+" ") || !strings.Contains(lines[1], "before") || !strings.Contains(lines[1], src) {
		t.Errorf("snapshots list:\n%s", out)
	}
	restored := strings.TrimSpace(conch("sandbox", "create", "--snapshot", snap))
	if got := conch("sandbox", "exec", restored, "cat link /tmp/s; stat -c %a src/f"); got != "kept\nscratch\n600\n" {
		t.Errorf("restored sandbox reads %q", got)
	}

	status, body := d.call("GET", "/api/v1/snapshots/"+snap, d.Key, nil)
	var got struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		SandboxID string `json:"sandbox_id"`
		SizeBytes int64  `json:"size_bytes"`
		CreatedAt string `json:"created_at"`
	}
	if err := json.Unmarshal(body, &got); status != 200 || err != nil || got.ID != snap || got.Name != "before" || got.SandboxID != src || got.SizeBytes <= 0 || got.CreatedAt == "" {
		t.Errorf("GET snapshot = %d %s", status, body)
	}
	status, body = d.call("GET", "/api/v1/sandboxes/"+restored, d.Key, nil)
	if status != 200 || !strings.Contains(string(body), `"snapshot":"`+snap+`"`) {
		t.Errorf("GET restored sandbox = %d %s, want its snapshot", status, body)
	}
	status, body = d.call("GET", "/api/v1/quotas", d.Key, nil)
	if status != 200 || !strings.Contains(string(body), `{"limit":100,"name":"snapshots","used":1}`) {
		t.Errorf("quotas = %d %s, want one snapshot used", status, body)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		want         string
	}{
		{"GET", "/api/v1/snapshots/snap-00000000000000000000000000000000", nil, 404, "not found"},
		{"GET", "/api/v1/snapshots/nope", nil, 404, "not found"},
		{"POST", "/api/v1/sandboxes", map[string]any{"snapshot": "snap-00000000000000000000000000000000"}, 404, "not found"},
		{"POST", "/api/v1/sandboxes/sb-nope:snapshot", map[string]any{}, 404, "not found"},
		{"POST", "/api/v1/sandboxes", map[string]any{"snapshot": snap, "persistent": true, "user": "alice"}, 400, "not both"},
	} {
		status, body := d.call(tc.method, tc.path, d.Key, tc.body)
		if status != tc.status || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %s = %d %s, want %d %q", tc.method, tc.path, status, body, tc.status, tc.want)
		}
	}

	// A fork copies a running sandbox's files, not its later ones.
	copies := strings.Fields(conch("sandbox", "fork", "--count", "2", restored))
	conch("sandbox", "exec", restored, "echo after > /tmp/after")
	if len(copies) != 2 {
		t.Fatalf("fork --count 2 printed %q", copies)
	}
	for _, c := range copies {
		if got := conch("sandbox", "exec", c, "cat link /tmp/s; ls /tmp/after 2>/dev/null || echo absent"); got != "kept\nscratch\nabsent\n" {
			t.Errorf("copy %s reads %q", c, got)
		}
	}
	if status, body := d.call("POST", "/api/v1/sandboxes/"+restored+":fork", d.Key, map[string]any{"count": 17}); status != 400 || !strings.Contains(string(body), "count: must be 1 to 16, got 17") {
		t.Errorf("fork of 17 = %d %s", status, body)
	}

	conch("snapshots", "rm", snap)
	if status, body := d.call("GET", "/api/v1/snapshots/"+snap, d.Key, nil); status != 404 {
		t.Errorf("GET after rm = %d %s", status, body)
	}
	if out := conch("snapshots", "list"); strings.Contains(out, snap) {
		t.Errorf("list after rm:\n%s", out)
	}
}

// A paused sandbox keeps its id and files; a command to it resumes it.
func TestPauseAndResume(t *testing.T) {
	d := startDev(t)
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	conch := func(args ...string) string {
		t.Helper()
		out, errOut, code := runConch(t, env, args...)
		if code != 0 {
			t.Fatalf("conch %q: %q %q %d", args, out, errOut, code)
		}
		return out
	}
	id := strings.TrimSpace(conch("sandbox", "create", "--label", "app=web"))
	conch("sandbox", "exec", id, "echo kept > f")
	conch("sandbox", "pause", id)
	if out := conch("sandbox", "list", "--status", "paused"); !strings.Contains(out, id) || !strings.Contains(out, "paused") {
		t.Errorf("list --status paused:\n%s", out)
	}
	status, body := d.call("GET", "/api/v1/sandboxes/"+id, d.Key, nil)
	if status != 200 || !strings.Contains(string(body), `"state":"paused"`) {
		t.Errorf("GET paused = %d %s", status, body)
	}
	if got := conch("sandbox", "exec", id, "cat f"); got != "kept\n" {
		t.Errorf("a command to the paused sandbox read %q", got)
	}
	status, body = d.call("GET", "/api/v1/sandboxes/"+id, d.Key, nil)
	if status != 200 || !strings.Contains(string(body), `"state":"ready"`) {
		t.Errorf("GET resumed = %d %s", status, body)
	}
	conch("sandbox", "pause", id)
	conch("sandbox", "resume", id)
	conch("sandbox", "pause", id)
	conch("sandbox", "rm", id)
	if status, body := d.call("GET", "/api/v1/sandboxes/"+id, d.Key, nil); status != 404 {
		t.Errorf("GET after rm = %d %s", status, body)
	}
	if out := conch("snapshots", "list"); strings.Contains(out, "snap-") {
		t.Errorf("snapshots left:\n%s", out)
	}
}
