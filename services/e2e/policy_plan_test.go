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
		return runCommand(t, d, gw, "shell", "", command, "X-Conch-Session-Id", "plan-e2e")
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
		{"parser", "ls -d / #\\\n" + payload, "", "Unsupported shell token: backslash-newline in a comment"},
		{"parser", "ls -d / \"$\\\n(" + payload + ")\"", "", "Unsupported shell token: backslash-newline after $"},
		{"parser", "sh -c 'ls -d / #\\\n" + payload + "'", "", "Unsupported shell token: backslash-newline in a comment"},
		{"parser", "ls -d / <<\\\n-'EOF'\n" + payload + "\nEOF\n" + payload, "", "here-document"},
		{"parser", "ls -d / \\\n  /tmp", `\"exit_code\":0`, ""},
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
		"command": "ls -la \\\n  id #x", "agent": gw, "host": "gateway", "cwd": "/tmp"})
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

// TestAllowAlwaysFollowsLinks: a workspace link to /bin/sh is judged as
// the shell it is; allow-always on it records the inner program, never the
// link, so the link still asks next time. The request's env takes names
// from an allowlist only.
func TestAllowAlwaysFollowsLinks(t *testing.T) {
	d := startDev(t)
	const gw, user = "links", "lee"
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"},
		"shell": map[string]any{"allow_data_persistence": true},
		"exec":  map[string]any{"security": "allowlist", "ask": "on-miss", "approval_timeout_seconds": 5}})
	id := persistentSandbox(t, d, user)
	run := func(command string, env map[string]string) (int, string) {
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command, "env": env})
		return code, string(body)
	}
	if code, body := run("ln -s /bin/sh shlink", nil); code != http.StatusOK || !strings.Contains(body, `"exit_code":0`) {
		t.Fatalf("setup = %d %s", code, body)
	}
	// 4. env names: refused by name, plain names pass through.
	if code, body := run("true", map[string]string{"POSIXLY_CORRECT": "1"}); code != http.StatusBadRequest || !strings.Contains(body, "POSIXLY_CORRECT may not be set") {
		t.Errorf("POSIXLY_CORRECT: %d %s", code, body)
	}
	if code, body := run(`printf '%s' "$BUILD_ID"`, map[string]string{"BUILD_ID": "7", "LANG": "C.UTF-8"}); code != http.StatusOK || !strings.Contains(body, `"stdout":"7"`) {
		t.Errorf("BUILD_ID: %d %s", code, body)
	}
	if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK {
		t.Fatalf("delete sandbox = %d %s", code, body)
	}

	chat := func(command string) string {
		t.Helper()
		return runCommand(t, d, gw, "shell", user, command)
	}
	const first = "./shlink -c 'uname -s'"
	answered := answerWhenPending(t, d, first, "allow-always", func(pendingApproval) {})
	if out := chat(first); !strings.Contains(out, "Linux") {
		t.Fatalf("%q after allow-always: %s", first, out)
	}
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("resolve = %d", code)
	}
	_, body := d.call("GET", "/api/v1/exec-approvals", d.Key, nil)
	if doc := string(body); !strings.Contains(doc, "uname") || strings.Contains(doc, "shlink") || strings.Contains(doc, "/sh\"") || strings.Contains(doc, "dash") {
		t.Fatalf("allow-always recorded %s, want the inner program only", doc)
	}
	// The recorded program now runs at once through the link; another
	// inner program still asks (and, unanswered, times out).
	if out := chat(first); !strings.Contains(out, "Linux") {
		t.Errorf("%q, recorded, did not run: %s", first, out)
	}
	if out := chat("./shlink -c 'id -u'"); !strings.Contains(out, "Approval timeout") {
		t.Errorf("a link to sh ran an unrecorded program: %s", out)
	}
}

// TestEvaluateAgreesWithTheShell runs a table of commands through
// exec-policy:evaluate for a gateway whose exec settings say allowlist,
// and as real shell calls on that gateway: the two must agree, evaluate
// must report the gateway's settings, and its segments must never
// contradict its verdict.
func TestEvaluateAgreesWithTheShell(t *testing.T) {
	d := startDev(t)
	const gw = "evaluated"
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "off"}})
	if code, body := d.call("POST", "/api/v1/exec-approvals/agents/"+gw+"/allowlist", d.Key, map[string]string{"pattern": "/usr/bin/ls"}); code != http.StatusOK {
		t.Fatalf("allowlist: %d %s", code, body)
	}
	for _, command := range []string{"ls -d /", "ls -d / | wc -l", "sh -c 'ls -d /'", "id", "ls -d / && id", "ls > /tmp/x", "cat /etc/hostname", "ls $(id)"} {
		code, body := d.call("POST", "/api/v1/exec-policy:evaluate", d.Key, map[string]any{"command": command, "agent": gw})
		var ev struct {
			Decision, Reason, Security, Plan string
			Segments                         []struct{ Decision, Reason string }
		}
		if err := json.Unmarshal(body, &ev); code != http.StatusOK || err != nil {
			t.Fatalf("evaluate %q = %d %s", command, code, body)
		}
		if ev.Security != "allowlist" {
			t.Errorf("evaluate %q: security %q, want the gateway's allowlist", command, ev.Security)
		}
		for _, s := range ev.Segments {
			if s.Decision == "allow" && strings.HasPrefix(s.Reason, "Command not allowed") {
				t.Errorf("evaluate %q: a segment allowed with reason %q", command, s.Reason)
			}
		}
		out := runCommand(t, d, gw, "shell", "", command)
		ran := strings.Contains(out, `\"exit_code\":`)
		if want := ev.Decision == "allow"; ran != want {
			t.Errorf("%q: evaluate says %s (%s), the shell call ran: %v: %s", command, ev.Decision, ev.Reason, ran, out)
		}
	}
}
