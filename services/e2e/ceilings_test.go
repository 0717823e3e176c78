package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestCeilings: what a tenant asks for above the operator's ceilings is a
// 400 naming the field and the ceiling, through the REST API, whether on
// a sandbox's creation, a command, or a gateway's save; CONCH_MAX_*
// moves the ceilings.
func TestCeilings(t *testing.T) {
	t.Parallel()
	d := startDev(t, "CONCH_MAX_PIDS=1024")
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		want       string
	}{
		{"sandbox memory", "/api/v1/sandboxes", map[string]any{"limits": map[string]any{"memory_bytes": 1 << 40}},
			"limits.memory_bytes: 1099511627776 is above the ceiling of 4294967296"},
		{"sandbox pids", "/api/v1/sandboxes", map[string]any{"limits": map[string]any{"pids": 1000000}},
			"limits.pids: 1000000 is above the ceiling of 1024"},
		{"sandbox idle", "/api/v1/sandboxes", map[string]any{"idle_timeout_seconds": 30 * 24 * 3600},
			"idle_timeout_seconds: 2592000 is above the ceiling of 86400"},
		{"gateway limits", "/api/v1/gateways", map[string]any{"name": "big", "upstream": map[string]any{"provider": "scripted"},
			"shell": map[string]any{"enabled": true, "limits": map[string]any{"memory_bytes": 1 << 40}}},
			"shell.limits.memory_bytes: 1099511627776 is above the ceiling of 4294967296"},
		{"gateway idle", "/api/v1/gateways", map[string]any{"name": "idle", "upstream": map[string]any{"provider": "scripted"},
			"shell": map[string]any{"enabled": true, "session_idle_seconds": 7 * 24 * 3600}},
			"shell.session_idle_seconds: 604800 is above the ceiling of 86400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := d.call("POST", tc.path, d.Key, tc.body)
			if code != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%d %s, want 400 with %q", code, body, tc.want)
			}
		})
	}
	// A sandbox that asks for no idle timeout gets the ceiling's.
	id := newSandbox(t, d, map[string]any{})
	code, body := d.call("GET", "/api/v1/sandboxes/"+id, d.Key, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"idle_timeout_seconds":86400`) {
		t.Fatalf("%d %s, want idle_timeout_seconds 86400", code, body)
	}
	code, body = d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": "true", "max_output_length": 2 << 20})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "max_output_length: 2097152 is above the ceiling of 1048576") {
		t.Fatalf("%d %s, want 400 naming max_output_length and its ceiling", code, body)
	}
}
