package workspace_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/workspace"
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
		{"valid on disk", []string{"--dir", "/tmp/ws"}, []string{signingKeys}, ""},
		{"valid on s3", nil, []string{signingKeys, "CONCH_S3_ENDPOINT=minio:9000", "CONCH_S3_ACCESS_KEY=a", "CONCH_S3_SECRET_KEY=b"}, ""},
		{"without storage", nil, []string{signingKeys}, "CONCH_S3_ENDPOINT"},
		{"s3 without keys", nil, []string{signingKeys, "CONCH_S3_ENDPOINT=minio:9000"}, "CONCH_S3_ACCESS_KEY"},
		{"without signing keys", []string{"--dir", "/tmp/ws"}, nil, "CONCH_SIGNING_KEYS"},
		{"short signing key", []string{"--dir", "/tmp/ws"}, []string{"CONCH_SIGNING_KEYS=k1:short"}, "CONCH_SIGNING_KEYS"},
		{"zero quota means the default", []string{"--dir", "/tmp/ws", "--quota-bytes", "0"}, []string{signingKeys}, ""},
		{"negative quota", []string{"--dir", "/tmp/ws", "--quota-bytes", "-1"}, []string{signingKeys}, "--quota-bytes"},
		{"negative file quota", []string{"--dir", "/tmp/ws", "--quota-files", "-1"}, []string{signingKeys}, "--quota-files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := load(&workspace.Config{}, tt.args, tt.env)
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

const signingKeys = "CONCH_SIGNING_KEYS=k1:0123456789abcdef0123456789abcdef"
