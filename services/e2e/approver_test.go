package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The approver recorded is the key that answered (docs/how-to/approvals.md),
// never a name in the request: a REST resolve that says "approver":
// "fallback" is refused and changes nothing, and the answers that count name
// the key and the surface it used.
func TestApproverIsTheAuthenticatedKey(t *testing.T) {
	d := startDev(t)
	code, body := d.call("POST", "/api/v1/accounts", d.Key, map[string]string{"name": "Approvers"})
	var acct struct{ ID string }
	if err := json.Unmarshal(body, &acct); code != http.StatusOK || err != nil || acct.ID == "" {
		t.Fatalf("create account = %d %s", code, body)
	}
	code, body = d.call("POST", "/api/v1/accounts/"+acct.ID+"/keys", d.Key, map[string]string{})
	var key struct {
		Key   string `json:"key"`
		KeyID string `json:"key_id"`
	}
	if err := json.Unmarshal(body, &key); code != http.StatusOK || err != nil || key.KeyID == "" {
		t.Fatalf("create key = %d %s", code, body)
	}
	const gw = "approver-identity"
	if code, body := d.call("POST", "/api/v1/gateways", key.Key, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}}); code != http.StatusOK {
		t.Fatalf("create gateway = %d %s", code, body)
	}

	// ask runs command through the gateway in the background; it waits
	// for an answer, so it returns the pending approval's id.
	ask := func(command string) (string, <-chan string) {
		t.Helper()
		done := make(chan string, 1)
		go func() {
			b, _ := json.Marshal(map[string]any{"model": gw, "tools": []map[string]string{{"type": "exec"}},
				"messages": []map[string]string{{"role": "user", "content": "run: " + command}}})
			req, err := http.NewRequestWithContext(t.Context(), "POST", d.URL+"/v1/chat/completions", bytes.NewReader(b))
			if err != nil {
				done <- err.Error()
				return
			}
			req.Header.Set("Authorization", "Bearer "+key.Key)
			req.Header.Set("X-Conch-Session-Id", "approver-e2e")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- err.Error()
				return
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			done <- string(out)
		}()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			_, body := d.call("GET", "/api/v1/approvals?state=pending", key.Key, nil)
			var list struct {
				Approvals []struct{ ID, Command string } `json:"approvals"`
			}
			_ = json.Unmarshal(body, &list)
			for _, a := range list.Approvals {
				if a.Command == command {
					return a.ID, done
				}
			}
			select {
			case <-t.Context().Done():
				t.Fatal(t.Context().Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		t.Fatalf("no approval pending for %q", command)
		return "", nil
	}
	get := func(id string) (state, by string) {
		t.Helper()
		code, body := d.call("GET", "/api/v1/approvals/"+id, key.Key, nil)
		var a struct {
			State      string `json:"state"`
			ResolvedBy string `json:"resolved_by"`
		}
		if err := json.Unmarshal(body, &a); code != http.StatusOK || err != nil {
			t.Fatalf("get approval = %d %s", code, body)
		}
		return a.State, a.ResolvedBy
	}

	id, done := ask("touch /tmp/conch-e2e-approver-rest")
	for _, forged := range []string{"fallback", "key:admin via web", "alice"} {
		code, body := d.call("POST", "/api/v1/approvals/"+id+":resolve", key.Key, map[string]string{"decision": "allow-once", "approver": forged})
		if code != http.StatusBadRequest || !strings.Contains(string(body), "approver: set by conch from the authenticated caller") {
			t.Fatalf("resolve naming %q = %d %s, want 400 naming the field", forged, code, body)
		}
	}
	if state, by := get(id); state != "pending" || by != "" {
		t.Fatalf("after the refused answers: %s by %q, want pending", state, by)
	}
	code, body = d.call("POST", "/api/v1/approvals/"+id+":resolve", key.Key, map[string]string{"decision": "allow-once"})
	if code != http.StatusOK {
		t.Fatalf("resolve = %d %s", code, body)
	}
	if state, by := get(id); state != "allowed" || by != "key:"+key.KeyID+" via rest" {
		t.Fatalf("after the answer: %s by %q, want allowed by key:%s via rest", state, by, key.KeyID)
	}
	if out := <-done; !strings.Contains(out, `\"exit_code\":0`) {
		t.Fatalf("the approved command did not run: %s", out)
	}

	// The CLI's answer names the same key, on the CLI.
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	id, done = ask("touch /tmp/conch-e2e-approver-cli")
	c := exec.CommandContext(t.Context(), bin, "approvals", "deny", id)
	c.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+key.Key)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("conch approvals deny: %v %s", err, out)
	}
	if state, by := get(id); state != "denied" || by != fmt.Sprintf("key:%s via cli", key.KeyID) {
		t.Fatalf("after the CLI's answer: %s by %q, want denied by key:%s via cli", state, by, key.KeyID)
	}
	<-done
}
