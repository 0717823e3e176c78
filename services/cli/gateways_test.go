package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gatewayCall is a request the fake router received.
type gatewayCall struct {
	Method, Path string
	Body         map[string]any
}

// `conch gateways create|update` send what the command line gives, and
// update sends only that, as a PATCH, unless --replace asks for a PUT.
func TestGatewaysWriteSendsOnlyWhatIsGiven(t *testing.T) {
	var (
		mu    sync.Mutex
		calls []gatewayCall
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		calls = append(calls, gatewayCall{r.Method, r.URL.Path, body})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name": "prod"}`))
	}))
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "gw.json")
	if err := os.WriteFile(file, []byte(`{"upstream": {"provider": "scripted"}, "max_iterations": 4}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_UPSTREAM_KEY", "sk-from-env")

	tests := []struct {
		name    string
		args    []string
		want    *gatewayCall // nil: no request
		wantErr bool         // a command line refused before any request
	}{
		{"update one flag", []string{"update", "prod", "--shell"},
			&gatewayCall{"PATCH", "/api/v1/gateways/prod", map[string]any{"shell": map[string]any{"enabled": true}}}, false},
		{"update turns the shell off", []string{"update", "--shell=false", "prod"},
			&gatewayCall{"PATCH", "/api/v1/gateways/prod", map[string]any{"shell": map[string]any{"enabled": false}}}, false},
		{"update the model", []string{"update", "prod", "--model", "gpt-5"},
			&gatewayCall{"PATCH", "/api/v1/gateways/prod", map[string]any{"upstream": map[string]any{"model": "gpt-5"}}}, false},
		{"update the key", []string{"update", "prod", "--api-key-env", "TEST_UPSTREAM_KEY"},
			&gatewayCall{"PATCH", "/api/v1/gateways/prod", map[string]any{"upstream": map[string]any{"api_key": "sk-from-env"}}}, false},
		{"update from a file and a flag", []string{"update", "prod", "-f", file, "--base-url", "http://127.0.0.1:9/v1"},
			&gatewayCall{"PATCH", "/api/v1/gateways/prod", map[string]any{"upstream": map[string]any{"provider": "scripted", "base_url": "http://127.0.0.1:9/v1"}, "max_iterations": 4.0}}, false},
		{"update --replace", []string{"update", "prod", "-f", file, "--replace"},
			&gatewayCall{"PUT", "/api/v1/gateways/prod", map[string]any{"name": "prod", "upstream": map[string]any{"provider": "scripted"}, "max_iterations": 4.0}}, false},
		{"update with nothing to change", []string{"update", "prod"}, nil, true},
		{"create", []string{"create", "lab", "--provider", "scripted", "--shell"},
			&gatewayCall{"POST", "/api/v1/gateways", map[string]any{"name": "lab", "upstream": map[string]any{"provider": "scripted"}, "shell": map[string]any{"enabled": true}}}, false},
		{"replace is only for update", []string{"create", "lab", "--replace"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			calls = nil
			mu.Unlock()
			args := append(tt.args, "--server", srv.URL, "--api-key", "k")
			err := Gateways(t.Context(), args, io.Discard, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Gateways = %v, want an error: %v", err, tt.wantErr)
			}
			mu.Lock()
			defer mu.Unlock()
			var want []gatewayCall
			if tt.want != nil {
				want = []gatewayCall{*tt.want}
			}
			if diff := cmp.Diff(want, calls); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}
