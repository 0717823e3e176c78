package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// openClawDoc is an exec-approvals.json as OpenClaw exports it.
const openClawDoc = `{
  "version": 1,
  "socket": {"path": "/Users/user/.clawdbot/exec-approvals.sock", "token": "t0k"},
  "defaults": {"security": "deny", "ask": "on-miss", "askFallback": "deny", "autoAllowSkills": false},
  "agents": {
    "default": {
      "security": "allowlist",
      "ask": "on-miss",
      "askFallback": "deny",
      "autoAllowSkills": true,
      "allowlist": [
        {"id": "B0C8C0B3-2C2D-4F8A-9A3C-5A4B3C2D1E0F", "pattern": "~/Projects/**/bin/*", "lastUsedAt": 1737150000000, "lastUsedCommand": "rg -n TODO", "lastResolvedPath": "/Users/user/Projects/bin/rg"},
        {"id": "C1D9D1C4-3D3E-5F9B-0B4D-6B5C4D3E2F1G", "pattern": "/usr/bin/ls", "lastUsedAt": 1737150000000, "lastUsedCommand": "ls", "lastResolvedPath": "/usr/bin/ls"}
      ]
    }
  }
}`

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("not JSON: %s", a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

func (d *dev) raw(method, path string, body []byte, headers ...string) (int, []byte, http.Header) {
	d.t.Helper()
	req, err := http.NewRequestWithContext(d.t.Context(), method, d.URL+path, bytes.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes(), resp.Header
}

func TestApprovals(t *testing.T) {
	d := startDev(t)

	t.Run("exec-approvals document round-trips OpenClaw's shape", func(t *testing.T) {
		code, body, _ := d.raw("PUT", "/api/v1/exec-approvals", []byte(openClawDoc))
		if code != 200 {
			t.Fatalf("PUT = %d %s", code, body)
		}
		code, body, hdr := d.raw("GET", "/api/v1/exec-approvals", nil)
		if code != 200 || !jsonEqual(t, body, []byte(openClawDoc)) {
			t.Fatalf("GET = %d %s, want the imported document unchanged", code, body)
		}
		if !strings.Contains(string(body), `"lastUsedAt": 1737150000000`) || !strings.Contains(string(body), `"askFallback"`) {
			t.Fatalf("document not in OpenClaw's camelCase with lastUsedAt in ms: %s", body)
		}
		// A bad document is refused with the reason and changes nothing.
		code, bad, _ := d.raw("PUT", "/api/v1/exec-approvals", []byte(`{"version": 1, "agents": {"x": {"allowlist": [{"pattern": "rg"}]}}}`))
		if code != 400 || !strings.Contains(string(bad), "Pattern does not resolve to binary") {
			t.Fatalf("bad PUT = %d %s", code, bad)
		}
		_, after, _ := d.raw("GET", "/api/v1/exec-approvals", nil)
		if !bytes.Equal(after, body) {
			t.Fatal("a refused PUT changed the document")
		}
		// A stale If-Match loses.
		code, _, _ = d.raw("PUT", "/api/v1/exec-approvals", []byte(openClawDoc), "If-Match", `"1"`)
		if code != 409 {
			t.Fatalf("stale If-Match = %d, want 409", code)
		}
		code, _, _ = d.raw("PUT", "/api/v1/exec-approvals", []byte(openClawDoc), "If-Match", hdr.Get("ETag"))
		if code != 200 {
			t.Fatalf("current If-Match = %d, want 200", code)
		}
		req, _ := http.NewRequestWithContext(t.Context(), "GET", d.URL+"/api/v1/exec-approvals", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("without a key = %d, want 401", resp.StatusCode)
		}
	})

	t.Run("evaluate explains per segment", func(t *testing.T) {
		for _, tc := range []struct {
			body     map[string]any
			decision string
			reason   string
		}{
			{map[string]any{"command": "ls -la && grep foo", "agent": "default", "host": "gateway", "cwd": "/"}, "allow", ""},
			{map[string]any{"command": "ls > /tmp/x", "agent": "default", "host": "gateway", "cwd": "/"}, "deny", "Unsupported shell token: >"},
			{map[string]any{"command": "rm -rf /", "agent": "default", "host": "gateway", "cwd": "/"}, "ask", ""},
			{map[string]any{"command": "ls 'unterminated", "agent": "default", "host": "gateway", "cwd": "/"}, "deny", "reached EOF without closing quote"},
			{map[string]any{"command": "rm -rf /", "agent": "nobody", "host": "gateway", "cwd": "/"}, "deny", "Command not allowed by exec policy"},
			{map[string]any{"command": "rm -rf / > x", "agent": "default", "host": "sandbox", "cwd": "/"}, "allow", ""},
		} {
			code, body := d.call("POST", "/api/v1/exec-policy:evaluate", d.Key, tc.body)
			if code != 200 {
				t.Fatalf("evaluate %v = %d %s", tc.body, code, body)
			}
			var r struct {
				Decision string `json:"decision"`
				Reason   string `json:"reason"`
				Segments []struct {
					Argv         []string `json:"argv"`
					ResolvedPath string   `json:"resolved_path"`
					Decision     string   `json:"decision"`
				} `json:"segments"`
			}
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatal(err)
			}
			if r.Decision != tc.decision || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("evaluate %v = %s %q, want %s %q", tc.body["command"], r.Decision, r.Reason, tc.decision, tc.reason)
			}
			if tc.decision == "allow" && tc.body["host"] == "gateway" && (len(r.Segments) != 2 || r.Segments[0].ResolvedPath != "/usr/bin/ls") {
				t.Errorf("segments %+v", r.Segments)
			}
		}
	})

	t.Run("verdicts are counted in the metrics", func(t *testing.T) {
		_, metrics := d.call("GET", "/metrics", "", nil)
		if !strings.Contains(string(metrics), `conch_approval_verdicts_total{call="evaluate",decision="deny"`) {
			t.Fatalf("no verdict counter in /metrics:\n%s", tail(string(metrics), 3000))
		}
	})

	t.Run("allowlist through REST", func(t *testing.T) {
		code, body := d.call("POST", "/api/v1/exec-approvals/agents/default/allowlist", d.Key, map[string]string{"pattern": "rg"})
		if code != 400 || !strings.Contains(string(body), "Pattern does not resolve to binary") {
			t.Fatalf("bare name = %d %s", code, body)
		}
		code, body = d.call("POST", "/api/v1/exec-approvals/agents/default/allowlist", d.Key, map[string]string{"pattern": "/usr/bin/rg"})
		var added struct {
			ID      string `json:"id"`
			Pattern string `json:"pattern"`
		}
		if err := json.Unmarshal(body, &added); code != 200 || err != nil || added.Pattern != "/usr/bin/rg" || added.ID == "" {
			t.Fatalf("add = %d %s", code, body)
		}
		code, body = d.call("GET", "/api/v1/exec-approvals/agents/default/allowlist", d.Key, nil)
		if code != 200 || strings.Count(string(body), `"pattern"`) != 3 || !strings.Contains(string(body), `"last_used_at":1737150000000`) {
			t.Fatalf("list = %d %s", code, body)
		}
		code, body = d.call("DELETE", "/api/v1/exec-approvals/agents/default/allowlist/"+added.ID, d.Key, nil)
		if code != 200 {
			t.Fatalf("remove = %d %s", code, body)
		}
		code, _ = d.call("DELETE", "/api/v1/exec-approvals/agents/default/allowlist/nope", d.Key, nil)
		if code != 404 {
			t.Fatalf("remove unknown = %d, want 404", code)
		}
	})

	t.Run("approvals, chat commands and forwarding", func(t *testing.T) {
		code, body := d.call("GET", "/api/v1/approvals/nope", d.Key, nil)
		if code != 404 {
			t.Fatalf("unknown approval = %d %s", code, body)
		}
		code, body = d.call("POST", "/api/v1/approvals/nope:resolve", d.Key, map[string]string{"decision": "allow-once"})
		if code != 404 {
			t.Fatalf("resolve unknown = %d %s", code, body)
		}
		code, body = d.call("POST", "/api/v1/approvals/nope:resolve", d.Key, map[string]string{"decision": "sometimes"})
		if code != 400 {
			t.Fatalf("bad decision = %d %s", code, body)
		}
		code, body = d.call("PUT", "/api/v1/approvals/forwarding", d.Key, map[string]any{
			"enabled": true, "mode": "targets",
			"targets":   []map[string]string{{"channel": "slack", "to": "C1"}},
			"channels":  map[string]string{"slack_token": "xoxb-secret"},
			"approvers": []map[string]string{{"channel": "slack", "id": "U1"}},
		})
		if code != 200 || strings.Contains(string(body), "xoxb-secret") || !strings.Contains(string(body), `"slack_token_set":true`) {
			t.Fatalf("put forwarding = %d %s", code, body)
		}
		code, body = d.call("POST", "/api/v1/approvals/chat-commands", d.Key, map[string]string{"channel": "slack", "from": "U2", "text": "/approve x allow-once"})
		if code != 403 {
			t.Fatalf("chat command from a stranger = %d %s", code, body)
		}
		code, body = d.call("POST", "/api/v1/approvals/chat-commands", d.Key, map[string]string{"channel": "slack", "from": "U1", "text": "/approve x allow-once"})
		if code != 404 {
			t.Fatalf("chat command for an unknown approval = %d %s", code, body)
		}
	})

	t.Run("the CLI exports, imports and edits the allowlist", func(t *testing.T) {
		bin, err := conchBin()
		if err != nil {
			t.Fatal(err)
		}
		conch := func(args ...string) (string, error) {
			c := exec.CommandContext(t.Context(), bin, append([]string{"approvals"}, args...)...)
			c.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
			out, err := c.CombinedOutput()
			return string(out), err
		}
		file := filepath.Join(t.TempDir(), "exec-approvals.json")
		if out, err := conch("export", file); err != nil {
			t.Fatalf("export: %v %s", err, out)
		}
		exported, _ := os.ReadFile(file)
		if !jsonEqual(t, exported, []byte(openClawDoc)) {
			t.Fatalf("exported %s", exported)
		}
		if out, err := conch("allowlist", "add", "default", "rg"); err == nil || !strings.Contains(out, "Pattern does not resolve to binary") {
			t.Fatalf("add bare name: %v %s", err, out)
		}
		if out, err := conch("allowlist", "add", "default", "/opt/bin/tool"); err != nil || !strings.Contains(out, "added /opt/bin/tool") {
			t.Fatalf("add: %v %s", err, out)
		}
		if out, err := conch("allowlist", "list", "default"); err != nil || !strings.Contains(out, "/opt/bin/tool") {
			t.Fatalf("list: %v %s", err, out)
		}
		if out, err := conch("import", file); err != nil {
			t.Fatalf("import: %v %s", err, out)
		}
		if out, _ := conch("allowlist", "list", "default"); strings.Contains(out, "/opt/bin/tool") {
			t.Fatalf("import did not replace the document: %s", out)
		}
		if out, err := conch("list", "-o", "json"); err != nil || !strings.Contains(out, `"approvals"`) {
			t.Fatalf("list approvals: %v %s", err, out)
		}
		if out, err := conch("approve", "nope"); err == nil || !strings.Contains(out, "not found") {
			t.Fatalf("approve unknown: %v %s", err, out)
		}
	})

	t.Run("the approvals page is served with a strict policy", func(t *testing.T) {
		for _, p := range []string{"/ui/approvals", "/ui/approvals.js", "/ui/approvals.css"} {
			resp, err := http.Get(d.URL + p)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("GET %s = %d %v", p, resp.StatusCode, resp.Header)
			}
		}
	})
}
