package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGateways(t *testing.T) {
	d := startDev(t)

	// conch dev has the default gateway: the scripted model with the shell on.
	code, body := d.call("GET", "/api/v1/gateways/default", d.Key, nil)
	if code != http.StatusOK {
		t.Fatalf("GET default = %d %s", code, body)
	}
	var def struct {
		Name     string `json:"name"`
		Upstream struct {
			Provider string `json:"provider"`
		} `json:"upstream"`
		Shell struct {
			Enabled bool `json:"enabled"`
		} `json:"shell"`
	}
	if err := json.Unmarshal(body, &def); err != nil || def.Upstream.Provider != "scripted" || !def.Shell.Enabled {
		t.Fatalf("default gateway = %s (%v)", body, err)
	}

	gw := map[string]any{
		"name":     "prod",
		"upstream": map[string]any{"provider": "openai", "model": "gpt-4.1", "base_url": "http://" + modelHost + ":9/v1", "api_key": "sk-very-secret"},
		"shell":    map[string]any{"enabled": true, "timeout_seconds": 30, "allowRequest": false},
		"exec":     map[string]any{"security": "allowlist", "ask": "on-miss"},
	}
	code, body = d.call("POST", "/api/v1/gateways", d.Key, gw)
	if code != http.StatusOK || strings.Contains(string(body), "sk-very-secret") || !strings.Contains(string(body), `"api_key_set":true`) ||
		!strings.Contains(string(body), `"ask":"on-miss"`) || !strings.Contains(string(body), `"allow_request":false`) {
		t.Fatalf("create = %d %s", code, body)
	}

	tests := []struct {
		name, method, path string
		key                string
		body               any
		wantCode           int
		wantBody           string
	}{
		{"duplicate", "POST", "/api/v1/gateways", d.Key, gw, http.StatusConflict, "already exists"},
		{"missing upstream", "POST", "/api/v1/gateways", d.Key, map[string]any{"name": "x"}, http.StatusBadRequest, "upstream"},
		{"bad timeout", "POST", "/api/v1/gateways", d.Key, map[string]any{"name": "x", "upstream": map[string]any{"provider": "scripted"}, "shell": map[string]any{"timeout_seconds": 0.5}}, http.StatusBadRequest, "imeout"},
		{"unknown provider word", "POST", "/api/v1/gateways", d.Key, map[string]any{"name": "x", "upstream": map[string]any{"provider": "gemini"}}, http.StatusBadRequest, "provider"},
		{"unknown field", "POST", "/api/v1/gateways", d.Key, map[string]any{"name": "x", "bogus": 1}, http.StatusBadRequest, "bogus"},
		{"missing", "GET", "/api/v1/gateways/nope", d.Key, nil, http.StatusNotFound, "not found"},
		{"traversal name", "GET", "/api/v1/gateways/..%2Fprod", d.Key, nil, http.StatusNotFound, ""},
		{"rename", "PUT", "/api/v1/gateways/prod", d.Key, map[string]any{"name": "other", "upstream": map[string]any{"provider": "scripted"}}, http.StatusBadRequest, "name"},
		{"secret never returned", "GET", "/api/v1/gateways", d.Key, nil, http.StatusOK, `"api_key":""`},
	}
	for _, tt := range tests {
		code, body := d.call(tt.method, tt.path, tt.key, tt.body)
		if code != tt.wantCode || !strings.Contains(string(body), tt.wantBody) || strings.Contains(string(body), "sk-very-secret") {
			t.Errorf("%s: %s %s = %d %s, want %d with %q", tt.name, tt.method, tt.path, code, body, tt.wantCode, tt.wantBody)
		}
	}

	// Another account sees none of dev's gateways.
	other := newAccount(t, d, "Other")
	if code, body := d.call("GET", "/api/v1/gateways/prod", other, nil); code != http.StatusNotFound {
		t.Errorf("other account GET prod = %d %s, want 404", code, body)
	}
	if code, body := d.call("DELETE", "/api/v1/gateways/prod", other, nil); code != http.StatusNotFound {
		t.Errorf("other account DELETE prod = %d %s, want 404", code, body)
	}

	// The CLI drives the same API.
	bin, _ := conchBin()
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key, "UPSTREAM_KEY=sk-from-env")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli("gateways", "list"); err != nil || !strings.Contains(out, "default") || !strings.Contains(out, "prod") {
		t.Errorf("gateways list = %v\n%s", err, out)
	}
	if out, err := cli("gateways", "create", "cli-gw", "--provider", "openai", "--model", "m", "--api-key-env", "UPSTREAM_KEY", "--shell"); err != nil {
		t.Errorf("gateways create = %v\n%s", err, out)
	}
	if out, err := cli("gateways", "get", "cli-gw"); err != nil || !strings.Contains(out, `"api_key_set": true`) || strings.Contains(out, "sk-from-env") {
		t.Errorf("gateways get = %v\n%s", err, out)
	}
	if out, err := cli("gateways", "create", "bad", "--provider", "nope"); err == nil || !strings.Contains(out, "provider") {
		t.Errorf("gateways create with a bad provider = %v\n%s, want an error naming provider", err, out)
	}
	if out, err := cli("gateways", "rm", "cli-gw"); err != nil {
		t.Errorf("gateways rm = %v\n%s", err, out)
	}
	if out, err := cli("gateways", "rm", "cli-gw"); err == nil || !strings.Contains(out, "not found") {
		t.Errorf("second rm = %v\n%s, want not found", err, out)
	}
}

// PATCH changes only the fields it is given, over the real router and its
// gRPC hop; PUT still replaces the whole gateway. `conch gateways update`
// is a PATCH of its flags.
func TestGatewayPatch(t *testing.T) {
	d := startDev(t)
	createGateway(t, d, map[string]any{
		"name":     "patchme",
		"upstream": map[string]any{"provider": "openai", "model": "gpt-4.1", "base_url": "http://" + modelHost + ":9/v1", "api_key": "sk-very-secret"},
		"shell":    map[string]any{"enabled": true, "timeout_seconds": 30, "allow_request": false},
		"exec":     map[string]any{"security": "allowlist", "ask": "on-miss"},
		"skills":   []any{map[string]any{"name": "deploy", "content": "how to deploy"}},
	})
	get := func() map[string]any {
		t.Helper()
		code, body := d.call("GET", "/api/v1/gateways/patchme", d.Key, nil)
		if code != http.StatusOK {
			t.Fatalf("GET = %d %s", code, body)
		}
		return decodeGateway(t, body)
	}
	// sameBut checks that the gateway is before with the changes of
	// change, apart from its update time.
	sameBut := func(what string, before, after map[string]any, change func(map[string]any)) {
		t.Helper()
		want := decodeGateway(t, mustJSON(t, before))
		change(want)
		delete(want, "updated_at")
		delete(after, "updated_at")
		if diff := cmp.Diff(want, after); diff != "" {
			t.Errorf("%s changed more than it was given (-want +got):\n%s", what, diff)
		}
	}

	before := get()
	code, body := d.call("PATCH", "/api/v1/gateways/patchme", d.Key, map[string]any{"shell": map[string]any{"enabled": false}})
	if code != http.StatusOK || strings.Contains(string(body), "sk-very-secret") {
		t.Fatalf("PATCH = %d %s", code, body)
	}
	sameBut("PATCH shell.enabled", before, decodeGateway(t, body), func(g map[string]any) {
		g["shell"].(map[string]any)["enabled"] = false
	})
	sameBut("PATCH shell.enabled, read back", before, get(), func(g map[string]any) {
		g["shell"].(map[string]any)["enabled"] = false
	})

	for _, tt := range []struct {
		name, path string
		body       any
		want       string
	}{
		{"unknown mask path", "/api/v1/gateways/patchme?update_mask=shell.nope", map[string]any{}, `update_mask: \"shell.nope\"`},
		{"unknown body field", "/api/v1/gateways/patchme", map[string]any{"shell": map[string]any{"nope": true}}, "nope"},
		{"invalid value", "/api/v1/gateways/patchme", map[string]any{"shell": map[string]any{"timeout_seconds": 301}}, "shell.timeout_seconds"},
	} {
		if code, body := d.call("PATCH", tt.path, d.Key, tt.body); code != http.StatusBadRequest || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s: PATCH = %d %s, want 400 naming %s", tt.name, code, body, tt.want)
		}
	}

	// The CLI changes the one field its flag gives.
	before = get()
	bin, _ := conchBin()
	cmd := exec.Command(bin, "gateways", "update", "patchme", "--model", "gpt-5")
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("conch gateways update --model = %v\n%s", err, out)
	}
	sameBut("conch gateways update --model", before, get(), func(g map[string]any) {
		g["upstream"].(map[string]any)["model"] = "gpt-5"
	})

	// An empty PATCH changes nothing, its update time included: the empty
	// mask survives the gRPC hop as "nothing", not as "replace".
	before = get()
	if code, body := d.call("PATCH", "/api/v1/gateways/patchme", d.Key, map[string]any{}); code != http.StatusOK {
		t.Fatalf("empty PATCH = %d %s", code, body)
	}
	if diff := cmp.Diff(before, get()); diff != "" {
		t.Errorf("empty PATCH changed the gateway (-before +after):\n%s", diff)
	}

	// PUT replaces: what it leaves out is gone, but for the secret.
	code, body = d.call("PUT", "/api/v1/gateways/patchme", d.Key, map[string]any{"upstream": map[string]any{"provider": "openai", "model": "gpt-4.1"}})
	if code != http.StatusOK {
		t.Fatalf("PUT = %d %s", code, body)
	}
	after := get()
	up := after["upstream"].(map[string]any)
	if after["shell"] != nil || after["exec"] != nil || len(after["skills"].([]any)) != 0 || up["base_url"] != "" || up["api_key_set"] != true {
		t.Errorf("after PUT = %v, want no shell, exec, skills or base URL, and the key kept", after)
	}
}

func decodeGateway(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var g map[string]any
	if err := json.Unmarshal(body, &g); err != nil {
		t.Fatalf("gateway %s: %v", body, err)
	}
	return g
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
