package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayHost runs exec commands on the executor's own machine, outside
// any sandbox, behind the allowlist and approvals: what the allowlist holds
// runs at once and sees the host's files, anything else waits for a human,
// and the executor's environment never reaches a command.
func TestGatewayHost(t *testing.T) {
	d := startDev(t)
	const gw = "on-the-host"
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"}, "exec": map[string]any{"host": "gateway"}})
	for _, p := range []string{"/usr/bin/cat", "/usr/bin/printenv"} {
		if code, body := d.call("POST", "/api/v1/exec-approvals/agents/"+gw+"/allowlist", d.Key, map[string]string{"pattern": p}); code != http.StatusOK {
			t.Fatalf("allowlist %s: %d %s", p, code, body)
		}
	}
	// A directory only the host sees; sandboxes have a private /tmp.
	dir, err := os.MkdirTemp("", "conch-e2e-gateway-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("on the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	chat := func(command string) string {
		t.Helper()
		code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
			"model":    gw,
			"messages": []map[string]string{{"role": "user", "content": "run: " + command}},
			"tools":    []map[string]string{{"type": "exec"}},
		}, "X-Conch-Session-Id", "gateway-host")
		if code != http.StatusOK {
			t.Fatalf("chat %q = %d %s", command, code, body)
		}
		return string(body)
	}

	if out := chat("cat " + dir + "/marker"); !strings.Contains(out, `on the host\\n`) {
		t.Fatalf("an allowlisted command did not run on the host: %s", out)
	}
	out := chat("printenv")
	if !strings.Contains(out, `HOME=/tmp`) {
		t.Fatalf("printenv on the gateway host: %s", out)
	}
	var env struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	_ = json.Unmarshal([]byte(out), &env)
	for _, m := range strings.Split(out, `\\n`) {
		name, _, ok := strings.Cut(m, "=")
		if ok && !strings.ContainsAny(name, `"{}: `) {
			switch strings.TrimPrefix(name, `\"stdout\":\"`) {
			case "PATH", "HOME", "LANG", "TERM", "PWD", "OLDPWD", "SHLVL", "_":
			default:
				t.Errorf("the executor's environment leaked: %s", name)
			}
		}
	}

	// Anything else waits for a human, and then runs on the host.
	made := filepath.Join(dir, "made")
	answered := allowWhenPending(t, d, "touch "+made, func(a pendingApproval) {
		if a.Host != "gateway" || a.Cwd != "/tmp" || len(a.ResolvedPaths) != 1 || a.ResolvedPaths[0] != "/usr/bin/touch" {
			t.Errorf("pending approval = %+v, want host gateway, cwd %s, /usr/bin/touch", a, "/tmp")
		}
	})
	out = chat("touch " + made)
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("resolve = %d", code)
	}
	if _, err := os.Stat(made); err != nil || !strings.Contains(out, `\"exit_code\":0`) {
		t.Fatalf("approved command did not run on the host (%v): %s", err, out)
	}
	if out := chat("cat " + dir + "/marker > " + dir + "/copy"); !strings.Contains(out, "Unsupported shell token: >") {
		t.Fatalf("a redirect was not refused: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "copy")); err == nil {
		t.Fatal("a refused command ran")
	}
}
