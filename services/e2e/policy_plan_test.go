package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAllowlistRunsTheJudgedPlan drives the allowlist bypasses found from
// outside through a real sandbox (dash as /bin/sh) with only ls and git
// allowlisted and ask off: each payload would print the marker PW-NED if
// the shell ran anything but what the engine judged.
func TestAllowlistRunsTheJudgedPlan(t *testing.T) {
	d := startDev(t)
	const gw = "plan-allowlist"
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "off"}})
	for _, p := range []string{"/usr/bin/ls", "/usr/bin/git"} {
		if code, body := d.call("POST", "/api/v1/exec-approvals/agents/"+gw+"/allowlist", d.Key, map[string]string{"pattern": p}); code != http.StatusOK {
			t.Fatalf("allowlist %s: %d %s", p, code, body)
		}
	}
	chat := func(command string) string {
		t.Helper()
		code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
			"model":    gw,
			"messages": []map[string]string{{"role": "user", "content": "run: " + command}},
			"tools":    []map[string]string{{"type": "shell"}},
		}, "X-Conch-Session-Id", "plan-e2e")
		if code != http.StatusOK {
			t.Fatalf("chat %q = %d %s", command, code, body)
		}
		return string(body)
	}
	const payload = `printf '%s-%s' PW NED`
	gitconfig := "git apply <<'EOF'\n" +
		"diff --git a/.gitconfig b/.gitconfig\nnew file mode 100644\n--- /dev/null\n+++ b/.gitconfig\n@@ -0,0 +1,4 @@\n" +
		"+[core]\n+\tfsmonitor = \"" + payload + " >&2; false\"\n+[alias]\n+\tx = !" + payload + "\n" +
		"EOF"
	for _, tc := range []struct {
		class, command string
		// ran is a substring of the result when the command ran (as
		// judged), refused one when it was refused.
		ran, refused string
	}{
		{"parser", "ls -d / #\\\n" + payload, "ls: cannot access", ""},
		{"parser", "ls -d / \"$\\\n(" + payload + ")\"", "ls: cannot access", ""},
		{"parser", "sh -c 'ls -d / #\\\n" + payload + "'", "ls: cannot access", ""},
		{"parser", "ls -d / <<\\\n-'EOF'\n" + payload + "\nEOF\n" + payload, "", "here-document"},
		{"jq", "jq -n '$ ENV'", "", "Command not allowed by exec policy"},
		{"jq", "jq -n 'def f: env; f'", "", "Command not allowed by exec policy"},
		{"git", "sh -c 'git \"$1\" \"$2\"' sh -c 'alias.x=!" + payload + "'", "", "Unsupported shell token: $1"},
		{"git", "git -c 'alias.x=!" + payload + "' x", "", "Command not allowed by exec policy"},
		{"git", "ls / | xargs git", "", "xargs builds commands"},
		{"git", "git clone --u='" + payload + "' /tmp/none x", "", "Command not allowed by exec policy"},
		// git apply may write ~/.gitconfig; a git the policy allowed never
		// reads it, and an alias is never a git command it judges.
		{"git", gitconfig, `\"exit_code\":0`, ""},
		{"git", "git init -q r && cd r && git status --short", `\"exit_code\":0`, ""},
		{"git", "git x", "", "Command not allowed by exec policy"},
		{"runner", "prlimit --nofile=64 " + payload, "", "Command not allowed by exec policy"},
	} {
		out := chat(tc.command)
		if strings.Contains(out, "PW-NED") {
			t.Errorf("%s: %q ran the payload: %s", tc.class, tc.command, out)
			continue
		}
		if tc.ran != "" && !strings.Contains(out, tc.ran) {
			t.Errorf("%s: %q did not run as judged: %s", tc.class, tc.command, out)
		}
		if tc.refused != "" && !strings.Contains(out, tc.refused) {
			t.Errorf("%s: %q was not refused with %q: %s", tc.class, tc.command, tc.refused, out)
		}
	}

	// evaluate shows the plan the executor would run.
	code, body := d.call("POST", "/api/v1/exec-policy:evaluate", d.Key, map[string]any{
		"command": "ls -la #\\\nid", "agent": gw, "host": "gateway", "cwd": "/tmp"})
	var ev struct {
		Decision, Plan string
	}
	if err := json.Unmarshal(body, &ev); code != http.StatusOK || err != nil {
		t.Fatalf("evaluate = %d %s", code, body)
	}
	if ev.Decision != "allow" || !strings.HasPrefix(ev.Plan, "'/usr/bin/ls' '-la' 'id'") {
		t.Errorf("evaluate = %s, want allow with the plan of ls -la id", body)
	}
}
