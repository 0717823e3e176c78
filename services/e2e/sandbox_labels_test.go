package e2e

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Sandboxes carry labels to be found by and a lifetime after which they
// end, busy or not, through the REST API and the CLI.
func TestSandboxLabelsAndLifetime(t *testing.T) {
	d := startDev(t, "CONCH_MAX_SANDBOX_LIFETIME=1h")
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	out, errOut, code := runConch(t, env, "sandbox", "create", "--name", "web", "--label", "team=infra", "--label", "app=web", "--ttl", "600")
	web := strings.TrimSpace(out)
	if code != 0 || web == "" {
		t.Fatalf("create: %q %q %d", out, errOut, code)
	}
	if out, errOut, code = runConch(t, env, "sandbox", "create", "--label", "team=data"); code != 0 {
		t.Fatalf("create: %q %q %d", out, errOut, code)
	}
	data := strings.TrimSpace(out)

	out, errOut, code = runConch(t, env, "sandbox", "list", "--label", "team=infra")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], web) || !strings.HasSuffix(lines[1], "app=web,team=infra") {
		t.Errorf("list --label team=infra: %q %q %d, want %s alone with its labels", out, errOut, code, web)
	}

	type sandbox struct {
		ID        string            `json:"id"`
		TTL       int               `json:"ttl_seconds"`
		ExpiresAt time.Time         `json:"expires_at"`
		CreatedAt time.Time         `json:"created_at"`
		Labels    map[string]string `json:"labels"`
	}
	list := func(query url.Values) []sandbox {
		t.Helper()
		status, body := d.call("GET", "/api/v1/sandboxes?"+query.Encode(), d.Key, nil)
		if status != 200 {
			t.Fatalf("list %v: %d %s", query, status, body)
		}
		var got struct{ Sandboxes []sandbox }
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		return got.Sandboxes
	}
	got := list(url.Values{"label": {"team=infra", "app"}, "status": {"ready"}})
	if len(got) != 1 || got[0].ID != web || got[0].TTL != 600 || !got[0].ExpiresAt.Equal(got[0].CreatedAt.Add(10*time.Minute)) || got[0].Labels["app"] != "web" {
		t.Errorf("list by labels and status = %+v, want %s with its ttl and labels", got, web)
	}
	if got := list(url.Values{"label": {"team"}}); len(got) != 2 {
		t.Errorf("list by key = %+v, want both", got)
	}
	if got := list(url.Values{"status": {"gone"}}); len(got) != 0 {
		t.Errorf("list of gone = %+v, want none", got)
	}
	// The default lifetime is the operator's ceiling.
	if got := list(url.Values{"label": {"team=data"}}); len(got) != 1 || got[0].ID != data || got[0].TTL != 3600 {
		t.Errorf("list team=data = %+v, want %s with the ceiling's ttl of 3600", got, data)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		want         string
	}{
		{"GET", "/api/v1/sandboxes?status=asleep", nil, "status"},
		{"GET", "/api/v1/sandboxes?label=bad+key", nil, `label: key \"bad key\" must be`},
		{"POST", "/api/v1/sandboxes", map[string]any{"ttl_seconds": 3601}, "ttl_seconds: 3601 is above the ceiling of 3600"},
		{"POST", "/api/v1/sandboxes", map[string]any{"labels": map[string]string{"k": strings.Repeat("v", 257)}}, "labels[k]: at most 256 characters, got 257"},
	} {
		status, body := d.call(tc.method, tc.path, d.Key, tc.body)
		if status != 400 || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %s = %d %s, want 400 naming %q", tc.method, tc.path, status, body, tc.want)
		}
	}
	if out, errOut, code := runConch(t, env, "sandbox", "create", "--label", "team"); code != 2 || !strings.Contains(errOut, `--label: want K=V, got "team"`) {
		t.Errorf("create --label team: %q %q %d, want a usage error", out, errOut, code)
	}

	// A sandbox at the end of its lifetime ends, busy or not.
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"ttl_seconds": 2})
	var short struct{ ID string }
	if err := json.Unmarshal(body, &short); status != 200 || err != nil {
		t.Fatalf("create with ttl 2: %d %s", status, body)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		status, body := d.call("POST", "/api/v1/sandboxes/"+short.ID+"/commands", d.Key, map[string]any{"command": "true"})
		if status == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a sandbox past its ttl still answers: %d %s", status, body)
		}
	}
	if got := list(url.Values{}); len(got) != 2 {
		t.Errorf("after the short one ended: %+v, want the other two", got)
	}
}
