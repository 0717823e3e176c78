package approval_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/internal/platform/config"
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
		{"s3 without keys", nil, []string{"CONCH_AUDIT_S3_ENDPOINT=minio:9000"}, "CONCH_AUDIT_S3_ACCESS_KEY"},
		{"zero flush", []string{"--audit-flush", "0s"}, nil, "--audit-flush"},
		{"no buffer", []string{"--audit-buffer", "0"}, nil, "--audit-buffer"},
		{"short retention", []string{"--audit-retention", "1m"}, nil, "--audit-retention"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := load(&approval.Config{}, tt.args, tt.env)
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
