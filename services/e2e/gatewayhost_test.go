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
	for _, p := range []string{"/usr/bin/cat", "/usr/bin/printenv", "/usr/bin/id", "/usr/bin/ls"} {
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
	// Gateway-host commands run as an unprivileged user: the directory is
	// everyone's.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
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
	// Never root, never the executor's privileges: its own uid, no
	// supplementary groups, and no way into the executor's data.
	if out := chat("id"); !strings.Contains(out, `uid=199999 gid=199999 groups=199999`) {
		t.Fatalf("id on the gateway host: %s", out)
	}
	for _, secret := range []string{filepath.Join(d.DataDir, "api-key"), filepath.Join(d.DataDir, "signing-key"), "/proc/1/environ", "/etc/shadow"} {
		if out := chat("cat " + secret); !strings.Contains(out, "Permission denied") {
			t.Errorf("cat %s on the gateway host: %s", secret, out)
		}
	}
	if out := chat("ls " + d.DataDir); !strings.Contains(out, "Permission denied") {
		t.Errorf("ls of the data dir on the gateway host: %s", out)
	}
	out := chat("printenv")
	if !strings.Contains(out, `HOME=/tmp/conch-gateway`) {
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
		if a.Host != "gateway" || a.Cwd != "/tmp/conch-gateway" || len(a.ResolvedPaths) != 1 || a.ResolvedPaths[0] != "/usr/bin/touch" {
			t.Errorf("pending approval = %+v, want host gateway, cwd %s, /usr/bin/touch", a, "/tmp/conch-gateway")
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

// TestGatewayHostIsGranted: the gateway host is the operator's machine,
// for the accounts an admin granted it to. An ordinary account asking for
// it is refused with a 403 naming the grant, with and without security
// full; granted, it still cannot run under security full unless the
// operator allows it.
func TestGatewayHostIsGranted(t *testing.T) {
	d := startDev(t)
	code, body := d.call("POST", "/api/v1/accounts", d.Key, map[string]string{"name": "Tenant"})
	var acct struct{ ID string }
	if err := json.Unmarshal(body, &acct); code != http.StatusOK || err != nil || acct.ID == "" {
		t.Fatalf("create account = %d %s", code, body)
	}
	code, body = d.call("POST", "/api/v1/accounts/"+acct.ID+"/keys", d.Key, map[string]string{})
	var key struct{ Key string }
	if err := json.Unmarshal(body, &key); code != http.StatusOK || err != nil || key.Key == "" {
		t.Fatalf("create key = %d %s", code, body)
	}
	host := func(name, security string) map[string]any {
		exec := map[string]any{"host": "gateway"}
		if security != "" {
			exec["security"], exec["ask"] = security, "off"
		}
		return map[string]any{"name": name, "upstream": map[string]any{"provider": "scripted"}, "exec": exec}
	}
	for _, sec := range []string{"", "full"} {
		code, body := d.call("POST", "/api/v1/gateways", key.Key, host("mine-"+sec, sec))
		if code != http.StatusForbidden || !strings.Contains(string(body), `gateway_host`) {
			t.Errorf("ungranted account, security %q: %d %s, want 403 naming the grant", sec, code, body)
		}
	}
	// Not by changing a gateway it has either.
	if code, body := d.call("POST", "/api/v1/gateways", key.Key, map[string]any{"name": "plain", "upstream": map[string]any{"provider": "scripted"}}); code != http.StatusOK {
		t.Fatalf("create gateway = %d %s", code, body)
	}
	if code, body := d.call("PATCH", "/api/v1/gateways/plain", key.Key, map[string]any{"exec": map[string]any{"host": "gateway"}}); code != http.StatusForbidden {
		t.Errorf("PATCH to host gateway: %d %s, want 403", code, body)
	}
	// Only an admin grants it.
	if code, body := d.call("PATCH", "/api/v1/accounts/"+acct.ID, key.Key, map[string]any{"grants": []string{"gateway_host"}}); code != http.StatusForbidden && code != http.StatusUnauthorized {
		t.Fatalf("a tenant granted itself: %d %s", code, body)
	}
	if code, body := d.call("PATCH", "/api/v1/accounts/"+acct.ID, d.Key, map[string]any{"grants": []string{"root"}}); code != http.StatusBadRequest {
		t.Errorf("unknown grant: %d %s, want 400", code, body)
	}
	if code, body := d.call("PATCH", "/api/v1/accounts/"+acct.ID, d.Key, map[string]any{"grants": []string{"gateway_host"}}); code != http.StatusOK || !strings.Contains(string(body), "gateway_host") {
		t.Fatalf("grant = %d %s", code, body)
	}
	if code, body := d.call("POST", "/api/v1/gateways", key.Key, host("full", "full")); code != http.StatusOK {
		t.Fatalf("granted account: %d %s", code, body)
	}
	code, body = d.call("POST", "/v1/chat/completions", key.Key, map[string]any{
		"model": "full", "messages": []map[string]string{{"role": "user", "content": "run: id"}}, "tools": []map[string]string{{"type": "exec"}},
	})
	if code != http.StatusOK || !strings.Contains(string(body), "security full is not allowed") || strings.Contains(string(body), "uid=") {
		t.Fatalf("security full on the gateway host: %d %s", code, body)
	}
	// A revoked grant holds from the next command.
	if code, body := d.call("PATCH", "/api/v1/accounts/"+acct.ID, d.Key, map[string]any{"grants": []string{}}); code != http.StatusOK {
		t.Fatalf("revoke = %d %s", code, body)
	}
	code, body = d.call("POST", "/v1/chat/completions", key.Key, map[string]any{
		"model": "full", "messages": []map[string]string{{"role": "user", "content": "run: id"}}, "tools": []map[string]string{{"type": "exec"}},
	})
	if !strings.Contains(string(body), "gateway_host") || strings.Contains(string(body), "uid=") {
		t.Fatalf("after the grant was revoked: %d %s", code, body)
	}
}
