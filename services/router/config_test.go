package router_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/router"
)

// TestConfigErrorsNameTheField checks that every rejected setting names the
// flag or variable that holds it.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		env       []string
		wantField string // "" means valid
	}{
		{"defaults", nil, nil, ""},
		{"bad http addr", []string{"--http-addr", "8080"}, nil, "--http-addr"},
		{"short admin key", nil, []string{"CONCH_ADMIN_KEY=abc"}, "CONCH_ADMIN_KEY"},
		{"bad public url", []string{"--public-url", "conch.example"}, nil, "--public-url"},
		{"zero upload idle timeout", []string{"--upload-idle-timeout", "0s"}, nil, "--upload-idle-timeout"},
		{"no completions", []string{"--max-concurrent-completions", "0"}, nil, "--max-concurrent-completions"},
		{"short response retention", []string{"--response-retention", "1s"}, nil, "--response-retention"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := load(&router.Config{}, tt.args, tt.env)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("error = %v, want one naming %s", err, tt.wantField)
			}
		})
	}
}

// load fills cfg from args and env (KEY=value) alone, as `conch` does
// from its command line and environment.
func load(cfg any, args, env []string) error {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return config.LoadWith(fs, args, cfg, func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	})
}
