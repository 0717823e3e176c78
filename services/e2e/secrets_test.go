package e2e

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/pki"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
)

// A dump of conch dev's etcd shows none of the secrets given to it: the
// gateways' API keys, tool headers and egress secrets and the forwarding
// tokens are sealed with the key dev keeps in its data dir, which a
// restart reuses to read them.
func TestDevSealsSecretsAtRest(t *testing.T) {
	dir := t.TempDir()
	d := startDevIn(t, dir)
	up := newFakeUpstream(t, func(int, map[string]any) (int, string) { return http.StatusOK, openAIText("sealed and served") })
	const apiKey = "sk-at-rest-upstream-0123456789"
	createGateway(t, d, map[string]any{
		"name":     "sealed",
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL + "/v1", "model": "up-model", "api_key": apiKey},
		"tools": map[string]any{"webhooks": []map[string]any{{
			"name": "lookup", "url": "https://hooks.example/lookup", "parameters_schema": `{"type":"object"}`,
			"headers": map[string]string{"Authorization": "Bearer at-rest-webhook"},
		}}},
		"shell": map[string]any{"network": map[string]any{
			"mode": "allowlist", "allowed_domains": []string{"api.github.com"},
			"secrets": []map[string]any{{"env": "GH_TOKEN", "value": "ghp-at-rest-egress", "domains": []string{"api.github.com"}}},
		}},
	})
	code, body := d.call("PUT", "/api/v1/approvals/forwarding", d.Key, map[string]any{
		"channels": map[string]string{"slack_token": "xoxb-at-rest-slack", "telegram_token": "1:at-rest-telegram", "webhook_secret": "at-rest-signing"},
	})
	if code != http.StatusOK || strings.Contains(string(body), "at-rest") {
		t.Fatalf("put forwarding = %d %s", code, body)
	}
	keyFile := filepath.Join(dir, "secrets-key")
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("conch dev's secrets key: %v, %v; want a file of mode 0600", fi, err)
	}
	key, _ := os.ReadFile(keyFile)
	if _, err := d.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	sealed := 0
	for k, v := range stoppedEtcd(t, dir) {
		if bytes.Contains(v, []byte("at-rest")) || strings.Contains(k, "at-rest") {
			t.Errorf("etcd key %s holds a secret in plain text", k)
		}
		sealed += bytes.Count(v, []byte("sealed:v1:dev:"))
	}
	if sealed < 6 {
		t.Errorf("etcd holds %d values sealed with dev's key, want the 6 secrets given", sealed)
	}

	// Started again, dev reads them with the key it kept.
	d = startDevIn(t, dir)
	code, body = d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
		"model": "sealed", "messages": []map[string]any{{"role": "user", "content": "hello"}},
	})
	if code != http.StatusOK || !strings.Contains(string(body), "sealed and served") {
		t.Fatalf("completion after a restart = %d %s", code, body)
	}
	if got := up.header(up.calls() - 1).Get("Authorization"); got != "Bearer "+apiKey {
		t.Errorf("the upstream got Authorization %q, want the key the gateway was given", got)
	}
	if again, _ := os.ReadFile(keyFile); !bytes.Equal(key, again) {
		t.Error("a restart replaced conch dev's secrets key")
	}
}

// newKeyText is a keyring of one new key named id, as CONCH_SECRETS_KEY
// holds it.
func newKeyText(t *testing.T, id string) string {
	t.Helper()
	k, err := seal.GenerateKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return seal.FormatKey(k)
}

// stoppedEtcd is every key and value in the etcd of the stopped conch dev
// whose data dir is dir, read as dev reads it: over mTLS, with the
// certificates dev keeps in <data-dir>/pki.
func stoppedEtcd(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ca, err := pki.LoadOrCreateCA(filepath.Join(dir, "pki"), "conch dev etcd CA")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("etcd", "etcd", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue("conch-dev", "root")
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := pki.ClientConfig(ca.CAFile(), client)
	if err != nil {
		t.Fatal(err)
	}
	emb, err := etcdx.StartEmbedded(t.Context(), etcdx.EmbeddedOptions{Dir: filepath.Join(dir, "etcd"),
		TLS: &etcdx.ServerTLS{CAFile: ca.CAFile(), CertFile: server.CertFile, KeyFile: server.KeyFile, Root: clientTLS}})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	cli, err := etcdx.NewClient(t.Context(), etcdx.ClientOptions{Endpoints: emb.Endpoints(), TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	resp, err := cli.Get(t.Context(), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.Value
	}
	return out
}

// Given a keyring whose first key is new, conch dev re-seals at start what
// the old key sealed, as conch secrets rotate does for a cluster.
func TestDevResealsAtStart(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := sealtest.KeyText(t), newKeyText(t, "k2")
	d := startDevIn(t, dir, "CONCH_SECRETS_KEY="+k1)
	createGateway(t, d, map[string]any{
		"name": "rotated", "upstream": map[string]any{"provider": "openai", "model": "m", "api_key": "sk-rotated-0123456789"},
	})
	if _, err := d.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "secrets-key")); !os.IsNotExist(err) {
		t.Fatalf("dev made a key file beside CONCH_SECRETS_KEY: %v", err)
	}
	d = startDevIn(t, dir, "CONCH_SECRETS_KEY="+k2+","+k1)
	if _, err := d.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	etcd := stoppedEtcd(t, dir)
	for k, v := range etcd {
		if bytes.Contains(v, []byte("sealed:v1:test:")) || bytes.Contains(v, []byte("sk-rotated")) {
			t.Errorf("etcd key %s still holds the secret under the old key, or plain", k)
		}
	}
	if !bytes.Contains(etcd["conch/gateways/dev/rotated"], []byte("sealed:v1:k2:")) {
		t.Errorf("the gateway is not sealed with the new key: %q", etcd["conch/gateways/dev/rotated"])
	}
	// The old key can go.
	d = startDevIn(t, dir, "CONCH_SECRETS_KEY="+k2)
	code, body := d.call("GET", "/api/v1/gateways/rotated", d.Key, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"api_key_set":true`) {
		t.Fatalf("gateway with the new key alone = %d %s", code, body)
	}
}
