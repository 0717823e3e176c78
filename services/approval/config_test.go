package approval_test

import (
	"testing"

	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
)

// TestConfigErrorsNameTheField checks that every rejected setting names the
// flag or variable that holds it.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	// The service stores chat tokens, sealed: it needs keys.
	const keys = "CONCH_SECRETS_KEY=k1:YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE="
	configtest.ErrorsNameTheField(t, func() any { return &approval.Config{} }, []configtest.Case{
		{Name: "defaults", Env: []string{keys}},
		{Name: "no secrets key", WantField: "CONCH_SECRETS_KEY"},
		{Name: "secrets key file missing", Args: []string{"--secrets-key-file", "/nonexistent/secrets-key"}, WantField: "--secrets-key-file"},
		{Name: "s3 without keys", Env: []string{keys, "CONCH_AUDIT_S3_ENDPOINT=minio:9000"}, WantField: "CONCH_AUDIT_S3_ACCESS_KEY"},
		{Name: "zero flush", Args: []string{"--audit-flush", "0s"}, Env: []string{keys}, WantField: "--audit-flush"},
		{Name: "no buffer", Args: []string{"--audit-buffer", "0"}, Env: []string{keys}, WantField: "--audit-buffer"},
		{Name: "short retention", Args: []string{"--audit-retention", "1m"}, Env: []string{keys}, WantField: "--audit-retention"},
	})
}
