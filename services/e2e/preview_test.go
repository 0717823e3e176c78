package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// With exec.preview, an asked command first runs on a throwaway copy of
// its sandbox; the pending approval carries what it did there, on REST
// and in the CLI, and the real sandbox is untouched until a human allows.
func TestPreviewBeforeApprove(t *testing.T) {
	d := startDev(t)
	const gw = "previewed"
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss", "preview": true, "preview_timeout_seconds": 5}})
	if code, body := d.call("POST", "/api/v1/exec-approvals/agents/"+gw+"/allowlist", d.Key, map[string]string{"pattern": "/usr/bin/ls"}); code != http.StatusOK {
		t.Fatalf("allowlist: %d %s", code, body)
	}
	chat := func(command string) string {
		t.Helper()
		return runCommand(t, d, gw, "shell", "", command, "X-Conch-Session-Id", "preview-chat")
	}
	const asked = `ls -d / && touch /home/workspace/created && ls /nope`

	type preview struct {
		ExitCode int    `json:"exit_code"`
		TimedOut bool   `json:"timed_out"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		Changes  []struct {
			Path      string `json:"path"`
			Change    string `json:"change"`
			SizeBytes int64  `json:"size_bytes"`
		} `json:"changes"`
		Error string `json:"error"`
	}
	seen := make(chan preview, 1)
	go func() {
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			_, body := d.call("GET", "/api/v1/approvals?state=pending", d.Key, nil)
			var list struct {
				Approvals []struct {
					ID, Command string
					Preview     *preview `json:"preview"`
				} `json:"approvals"`
			}
			_ = json.Unmarshal(body, &list)
			for _, a := range list.Approvals {
				if a.Command != asked {
					continue
				}
				env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
				out, errOut, code := runConch(t, env, "approvals", "show", a.ID)
				if code != 0 || !strings.Contains(out, "Preview (what the command did on a copy of the sandbox, without network or secrets; not a promise") ||
					!strings.Contains(out, "created /home/workspace/created (0 bytes)") || !strings.Contains(out, "exit code 2") {
					t.Errorf("approvals show: %q %q %d", out, errOut, code)
				}
				if code, body := d.call("POST", "/api/v1/approvals/"+a.ID+":resolve", d.Key, map[string]string{"decision": "deny"}); code != http.StatusOK {
					t.Errorf("deny = %d %s", code, body)
				}
				if a.Preview != nil {
					seen <- *a.Preview
				} else {
					seen <- preview{Error: "no preview"}
				}
				return
			}
		}
		seen <- preview{Error: "nobody saw the approval"}
	}()
	out := chat(asked)
	t.Logf("asked command's result: %s", out)
	p := <-seen
	if p.ExitCode != 2 || p.TimedOut || p.Stdout != "/\n" || !strings.Contains(p.Stderr, "/nope") || p.Error != "" ||
		len(p.Changes) != 1 || p.Changes[0].Path != "/home/workspace/created" || p.Changes[0].Change != "created" {
		t.Fatalf("preview = %+v", p)
	}
	if !strings.Contains(out, "denied") && !strings.Contains(out, "not allowed") {
		t.Errorf("the denied command's result: %s", out)
	}
	// The real sandbox never had the file.
	if out := chat("ls /home/workspace/created"); !strings.Contains(out, "No such file") {
		t.Errorf("after the denied command, the real sandbox has what the preview made: %s", out)
	}
	code, body := d.call("POST", "/api/v1/gateways", d.Key, map[string]any{"name": "bad-preview", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"preview": true, "preview_timeout_seconds": 61}})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "exec.preview_timeout_seconds") {
		t.Errorf("a preview timeout of 61 s = %d %s", code, body)
	}
}
