package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/conchtest/testnet"
)

// TestNetworkEgress drives sandbox egress end to end: a sandbox of the
// REST API and a completion's sandbox reach the test's own internet (a
// network namespace; listed as an IP literal, so that no name leaves for
// real DNS) through conch's proxy, and get a readable 403 for anything
// else; a request narrows the gateway's allowlist but cannot widen it.
func TestNetworkEgress(t *testing.T) {
	in := testnet.Start(t)
	// The proxy verifies a secret's host against the system's roots: here
	// the test internet's, beside the machine's own.
	d := startDev(t, "SSL_CERT_FILE="+trustBundle(t, in))
	site := in.Addr.String()
	router, _ := url.Parse(d.URL)

	t.Run("sandbox REST API", func(t *testing.T) {
		id := newSandbox(t, d, map[string]any{"network": map[string]any{"mode": "allowlist", "allowed_domains": []string{site, "127.0.0.1"}}})
		run := func(command string) string {
			t.Helper()
			code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command, "timeout_seconds": 30})
			if code != http.StatusOK {
				t.Fatalf("%s = %d %s", command, code, body)
			}
			var r shellResult
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatal(err)
			}
			return r.Stdout + r.Stderr
		}
		if out := run("curl -sS http://" + site + "/rest"); !strings.Contains(out, testnet.Greeting+" "+site+"/rest") {
			t.Errorf("allowed site: %q", out)
		}
		if out := run("curl -sS http://denied.conch.test/"); !strings.Contains(out, "conch: egress to denied.conch.test:80 is not allowed by this sandbox's network policy") {
			t.Errorf("denied name: %q", out)
		}
		// conch's own router, on the host's loopback.
		if out := run("curl -sS --noproxy '' " + d.URL + "/v1/models"); !strings.Contains(out, "conch: egress to 127.0.0.1:"+router.Port()+" is not allowed") {
			t.Errorf("conch's own port: %q", out)
		}
		code, body := d.call("GET", "/api/v1/sandboxes/"+id, d.Key, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"mode":"allowlist"`) {
			t.Errorf("sandbox = %d %s", code, body)
		}
	})

	createGateway(t, d, map[string]any{"name": "egress", "shell": map[string]any{"enabled": true,
		"network": map[string]any{"mode": "allowlist", "allowed_domains": []string{site, "api.example.com"}}},
		"upstream": map[string]any{"provider": "openai", "base_url": shellScript(t, "curl -sS http://"+site+"/chat", "curl -sS http://example.org/").URL, "model": "m"}})

	t.Run("chat completion", func(t *testing.T) {
		res, resp := completeShell(t, d, "egress", nil)
		if len(res) != 2 || !strings.Contains(res[0].Stdout, testnet.Greeting+" "+site+"/chat") ||
			!strings.Contains(res[1].Stdout, "conch: egress to example.org:80 is not allowed by gateway egress") {
			t.Fatalf("results = %+v", res)
		}
		// Every connection is reported with the completion.
		var conch struct {
			Egress []struct {
				Host, Address, Decision, Reason string
				Port                            int
				BytesSent                       int64 `json:"bytes_sent"`
				BytesReceived                   int64 `json:"bytes_received"`
			}
		}
		if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["conch"].Raw()), &conch); err != nil {
			t.Fatal(err)
		}
		e := conch.Egress
		if len(e) != 2 || e[0].Host != site || e[0].Port != 80 || e[0].Address != site || e[0].Decision != "allowed" || e[0].BytesSent == 0 || e[0].BytesReceived == 0 ||
			e[1].Host != "example.org" || e[1].Decision != "refused" || !strings.Contains(e[1].Reason, "not allowed by gateway egress") || e[1].Address != "" {
			t.Fatalf("conch.egress = %+v", e)
		}
	})

	t.Run("a request narrows the allowlist", func(t *testing.T) {
		createGateway(t, d, map[string]any{"name": "egress-narrow", "shell": map[string]any{"enabled": true,
			"network": map[string]any{"mode": "allowlist", "allowed_domains": []string{site, "api.example.com"}}},
			"upstream": map[string]any{"provider": "openai", "base_url": shellScript(t, "curl -sS http://"+site+"/narrow").URL, "model": "m"}})
		res, _ := completeShell(t, d, "egress-narrow", map[string]any{"tools": []any{map[string]any{"type": "shell", "network": map[string]any{"allowed_domains": []string{"api.example.com"}}}}})
		if len(res) != 1 || !strings.Contains(res[0].Stdout, "conch: egress to "+site+":80 is not allowed by gateway egress-narrow") {
			t.Fatalf("results = %+v", res)
		}
	})

	t.Run("a request cannot widen it", func(t *testing.T) {
		code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
			"model": "egress", "messages": []map[string]string{{"role": "user", "content": "go"}},
			"tools": []any{map[string]any{"type": "shell", "network": map[string]any{"allowed_domains": []string{"api.example.com", "evil.example"}}}},
		})
		if code != http.StatusBadRequest || !strings.Contains(string(body), "tools[0].network.allowed_domains[1]") {
			t.Fatalf("widening = %d %s", code, body)
		}
	})

	t.Run("a miss becomes an approval", func(t *testing.T) {
		held := "connect to " + site + ":80"
		gateway := func(name string, commands ...string) {
			gw := map[string]any{"name": name, "shell": map[string]any{"enabled": true,
				"network": map[string]any{"mode": "allowlist", "allowed_domains": []string{"api.example.com"}, "ask": "on-miss"}},
				"upstream": map[string]any{"provider": "openai", "base_url": shellScript(t, commands...).URL, "model": "m"}}
			if code, body := d.call("PUT", "/api/v1/gateways/"+name, d.Key, gw); code == http.StatusNotFound {
				createGateway(t, d, gw)
			} else if code != http.StatusOK {
				t.Fatalf("put gateway %s = %d %s", name, code, body)
			}
		}
		// allow-once lets this sandbox connect, again without asking.
		gateway("egress-ask", "curl -sS --max-time 60 http://"+site+"/held", "curl -sS --max-time 5 http://"+site+"/again")
		answered := allowWhenPending(t, d, held, func(a pendingApproval) {
			if a.Host != "sandbox" {
				t.Errorf("approval = %+v", a)
			}
		})
		res, _ := completeShell(t, d, "egress-ask", nil)
		if code := <-answered; code != http.StatusOK {
			t.Fatalf("resolve = %d", code)
		}
		if len(res) != 2 || !strings.Contains(res[0].Stdout, testnet.Greeting+" "+site+"/held") || !strings.Contains(res[1].Stdout, testnet.Greeting+" "+site+"/again") {
			t.Fatalf("results = %+v", res)
		}
		// deny refuses with the clear error, never a hang.
		gateway("egress-deny", "curl -sS --max-time 60 http://"+site+"/denied")
		answered = answerWhenPending(t, d, held, "deny", func(pendingApproval) {})
		res, _ = completeShell(t, d, "egress-deny", nil)
		if code := <-answered; code != http.StatusOK {
			t.Fatalf("resolve = %d", code)
		}
		if len(res) != 1 || !strings.Contains(res[0].Stdout, "conch: egress to "+site+":80 is not allowed by gateway egress-deny: denied by key:") {
			t.Fatalf("results = %+v", res)
		}
		// Nobody answering in time is a refusal too.
		createGateway(t, d, map[string]any{"name": "egress-late", "shell": map[string]any{"enabled": true,
			"network": map[string]any{"mode": "allowlist", "allowed_domains": []string{"api.example.com"}, "ask": "on-miss", "approval_timeout_seconds": 1}},
			"upstream": map[string]any{"provider": "openai", "base_url": shellScript(t, "curl -sS --max-time 60 http://"+site+"/late").URL, "model": "m"}})
		if res, _ = completeShell(t, d, "egress-late", nil); len(res) != 1 || !strings.Contains(res[0].Stdout, "is not allowed by gateway egress-late: nobody answered in time") {
			t.Fatalf("results = %+v", res)
		}
		// allow-always remembers the host for the gateway: a new sandbox
		// connects without asking.
		gateway("egress-always", "curl -sS --max-time 60 http://"+site+"/first")
		answered = answerWhenPending(t, d, held, "allow-always", func(pendingApproval) {})
		if res, _ = completeShell(t, d, "egress-always", nil); len(res) != 1 || !strings.Contains(res[0].Stdout, testnet.Greeting) {
			t.Fatalf("results = %+v", res)
		}
		if code := <-answered; code != http.StatusOK {
			t.Fatalf("resolve = %d", code)
		}
		gateway("egress-always", "curl -sS --max-time 5 http://"+site+"/second")
		if res, _ = completeShell(t, d, "egress-always", nil); len(res) != 1 || !strings.Contains(res[0].Stdout, testnet.Greeting+" "+site+"/second") {
			t.Fatalf("results = %+v", res)
		}
	})

	t.Run("a secret reaches its domain over verified TLS, never the sandbox", func(t *testing.T) {
		const secret = "tok-e2e-9731"
		createGateway(t, d, map[string]any{"name": "egress-secret", "shell": map[string]any{"enabled": true,
			"network": map[string]any{"mode": "allowlist", "allowed_domains": []string{site, "api.example.com"},
				"secrets": []any{map[string]any{"env": "SITE_TOKEN", "value": secret, "domains": []string{site}, "header": "Authorization"}}}},
			"upstream": map[string]any{"provider": "openai", "base_url": shellScript(t,
				`curl -sS -H "Authorization: Bearer $SITE_TOKEN" https://`+site+`/headers`,
				`curl -sS -H "Authorization: Bearer $SITE_TOKEN" http://`+site+`/headers`,
				`env | grep -c tok-e2e-973[1]; echo "$SITE_TOKEN"`).URL, "model": "m"}})
		code, body := d.call("GET", "/api/v1/gateways/egress-secret", d.Key, nil)
		if code != http.StatusOK || strings.Contains(string(body), secret) || !strings.Contains(string(body), `"value_set":true`) {
			t.Fatalf("gateway = %d %s", code, body)
		}
		cleartext := "conch: the secret for " + site + " is only sent over https"
		res, resp := completeShell(t, d, "egress-secret", nil)
		if len(res) != 3 || !strings.Contains(res[0].Stdout, "Authorization: Bearer "+secret) ||
			strings.TrimSpace(res[1].Stdout) != cleartext || !strings.HasPrefix(res[2].Stdout, "0\nconch-secret-") {
			t.Fatalf("results = %+v", res)
		}
		var conch struct {
			Egress []struct{ Host, Decision, Reason string }
		}
		if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["conch"].Raw()), &conch); err != nil {
			t.Fatal(err)
		}
		if e := conch.Egress; len(e) != 2 || e[0].Decision != "allowed" || e[1].Host != site || e[1].Decision != "refused" || e[1].Reason != cleartext {
			t.Fatalf("conch.egress = %+v", e)
		}
		for _, r := range in.Requests() {
			if strings.Contains(r.Head, secret) && !r.TLS {
				t.Fatalf("the internet read the secret in cleartext:\n%s", r.Head)
			}
		}
	})
}

// trustBundle writes the machine's root certificates and the test
// internet's to a file, and returns its path.
func trustBundle(t *testing.T, in *testnet.Internet) string {
	t.Helper()
	var bundle []byte
	for _, f := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"} {
		if b, err := os.ReadFile(f); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	path := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(path, append(bundle, in.RootPEM...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
