package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An agent in allowlist/on-miss mode runs allowed commands at once, waits
// on others until a human answers, and never runs a refused one — through
// the rich exec tool and through the shell tool alike.
func TestExecWaitsForApproval(t *testing.T) {
	d := startDev(t)
	for _, tool := range []string{"exec", "shell"} {
		t.Run(tool, func(t *testing.T) { testWaitsForApproval(t, d, tool) })
	}
}

func testWaitsForApproval(t *testing.T, d *dev, tool string) {
	gw := "strict-" + tool
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	if code, body := d.call("POST", "/api/v1/exec-approvals/agents/"+gw+"/allowlist", d.Key, map[string]string{"pattern": "/usr/bin/ls"}); code != http.StatusOK {
		t.Fatalf("allowlist: %d %s", code, body)
	}
	chat := func(command string) string {
		t.Helper()
		return runCommand(t, d, gw, tool, "", command, "X-Conch-Session-Id", "chat-"+tool)
	}

	if out := chat("ls -d /"); !strings.Contains(out, `\"exit_code\":0`) || !strings.Contains(out, `\"stdout\":\"/\\n\"`) {
		t.Fatalf("an allowlisted command did not run at once: %s", out)
	}
	if out := chat("ls > /tmp/conch-e2e-x"); !strings.Contains(out, "Unsupported shell token: >") {
		t.Fatalf("a redirect was not refused: %s", out)
	}

	// A command the allowlist misses waits until a human answers.
	answered := make(chan string, 1)
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			_, body := d.call("GET", "/api/v1/approvals?state=pending", d.Key, nil)
			var list struct {
				Approvals []struct {
					ID, Command string
				} `json:"approvals"`
			}
			_ = json.Unmarshal(body, &list)
			for _, a := range list.Approvals {
				if a.Command == "touch /tmp/conch-e2e-approved-"+tool {
					code, body := d.call("POST", "/api/v1/approvals/"+a.ID+":resolve", d.Key, map[string]string{"decision": "allow-once"})
					answered <- string(body)
					if code != http.StatusOK {
						t.Errorf("resolve = %d %s", code, body)
					}
					return
				}
			}
			select {
			case <-t.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		answered <- "nobody saw the approval"
	}()
	out := chat("touch /tmp/conch-e2e-approved-" + tool)
	if got := <-answered; !strings.Contains(got, `"state":"allowed"`) {
		t.Fatalf("answer: %s", got)
	}
	if !strings.Contains(out, `\"exit_code\":0`) {
		t.Fatalf("the approved command did not run: %s", out)
	}
}

// In allowlist mode a sandbox's command is judged by what the sandbox
// would run: a program in its workspace matches a pattern on its path
// there, while a file of the executor's host — on the PATH the gateway
// prepends, or behind a symlink in the workspace — counts for nothing.
func TestAllowlistResolvesInTheSandbox(t *testing.T) {
	d := startDev(t)
	// The executor's host has this dir; sandboxes do not see it.
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "tool"), []byte("#!/bin/sh\necho from the host\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const gw, user = "sandbox-allowlist", "dana"
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"},
		"shell": map[string]any{"allow_data_persistence": true},
		"exec":  map[string]any{"security": "allowlist", "ask": "off", "path_prepend": []string{host}}})
	for _, p := range []string{"/home/workspace/bin/tool", host + "/tool"} {
		if code, body := d.call("POST", "/api/v1/exec-approvals/agents/"+gw+"/allowlist", d.Key, map[string]string{"pattern": p}); code != http.StatusOK {
			t.Fatalf("allowlist %s: %d %s", p, code, body)
		}
	}

	// The user's persistent workspace gets a program and a link to the
	// host's, made by a sandbox of the sandbox API (security full).
	code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"user": user, "persistent": true})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); code != http.StatusOK || err != nil || sb.ID == "" {
		t.Fatalf("create sandbox = %d %s", code, body)
	}
	setup := `mkdir bin && printf '#!/bin/sh\necho from the workspace\n' > bin/tool && chmod +x bin/tool && ln -s ` + host + `/tool bin/hostlink`
	if code, body := d.call("POST", "/api/v1/sandboxes/"+sb.ID+"/commands", d.Key, map[string]any{"command": setup}); code != http.StatusOK || !strings.Contains(string(body), `"exit_code":0`) {
		t.Fatalf("setup = %d %s", code, body)
	}
	if code, body := d.call("DELETE", "/api/v1/sandboxes/"+sb.ID, d.Key, nil); code != http.StatusOK {
		t.Fatalf("delete sandbox = %d %s", code, body)
	}

	chat := func(command string) string {
		t.Helper()
		return runCommand(t, d, gw, "exec", user, command)
	}
	for _, command := range []string{"bin/tool", "cd bin && ./tool", "cd && bin/tool"} {
		if out := chat(command); !strings.Contains(out, `\"exit_code\":0`) || !strings.Contains(out, "from the workspace") {
			t.Errorf("%q, allowlisted in the workspace, did not run: %s", command, out)
		}
	}
	for _, command := range []string{"tool", "bin/hostlink", host + "/tool"} {
		if out := chat(command); !strings.Contains(out, "Command not allowed by exec policy") || strings.Contains(out, "from the host") {
			t.Errorf("%q, allowlisted only on the executor's host, was not refused: %s", command, out)
		}
	}
}

// A completion that ends while its command waits for a human takes the
// approval with it: the approval expires saying why, and a late answer is
// a conflict rather than an allow that nothing would act on.
func TestApprovalEndsWithItsRequest(t *testing.T) {
	d := startDev(t)
	gw := "asks"
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	command := "touch /tmp/conch-e2e-abandoned"

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		body, _ := json.Marshal(map[string]any{
			"model":    gw,
			"messages": []map[string]string{{"role": "user", "content": "run: " + command}},
			"tools":    []map[string]string{{"type": "shell"}},
		})
		req, _ := http.NewRequestWithContext(ctx, "POST", d.URL+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+d.Key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the completion ended by itself: %d", resp.StatusCode)
		}
		done <- err
	}()

	var id string
	for deadline := time.Now().Add(30 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, body := d.call("GET", "/api/v1/approvals?state=pending", d.Key, nil)
		var list struct {
			Approvals []struct{ ID, Command string }
		}
		_ = json.Unmarshal(body, &list)
		for _, a := range list.Approvals {
			if a.Command == command {
				id = a.ID
			}
		}
	}
	if id == "" {
		t.Fatal("the command never asked")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("completion: %v", err)
	}

	var a struct {
		State, Reason string
		ResolvedBy    string `json:"resolved_by"`
	}
	for deadline := time.Now().Add(15 * time.Second); a.State != "expired" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, body := d.call("GET", "/api/v1/approvals/"+id, d.Key, nil)
		_ = json.Unmarshal(body, &a)
	}
	if a.State != "expired" || !strings.Contains(a.Reason, "the request that asked for it ended") || a.ResolvedBy != "requester" {
		t.Fatalf("approval after its request ended: %+v", a)
	}
	code, body := d.call("POST", "/api/v1/approvals/"+id+":resolve", d.Key, map[string]string{"decision": "allow-once"})
	if code != http.StatusConflict || !strings.Contains(string(body), "already expired") {
		t.Fatalf("answer after the request ended = %d %s, want 409", code, body)
	}
}
