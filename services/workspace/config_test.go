package workspace_test

import (
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
	"github.com/conch-sh/conch/services/workspace"
)

// TestConfigErrorsNameTheField checks that every rejected setting names the
// flag or variable that holds it.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	configtest.ErrorsNameTheField(t, func() any { return &workspace.Config{} }, []configtest.Case{
		{Name: "valid on disk", Args: []string{"--dir", "/tmp/ws"}, Env: []string{signingKeys}},
		{Name: "valid on s3", Env: []string{signingKeys, "CONCH_S3_ENDPOINT=minio:9000", "CONCH_S3_ACCESS_KEY=a", "CONCH_S3_SECRET_KEY=b"}},
		{Name: "without storage", Env: []string{signingKeys}, WantField: "CONCH_S3_ENDPOINT"},
		{Name: "s3 without keys", Env: []string{signingKeys, "CONCH_S3_ENDPOINT=minio:9000"}, WantField: "CONCH_S3_ACCESS_KEY"},
		{Name: "without signing keys", Args: []string{"--dir", "/tmp/ws"}, WantField: "CONCH_SIGNING_KEYS"},
		{Name: "short signing key", Args: []string{"--dir", "/tmp/ws"}, Env: []string{"CONCH_SIGNING_KEYS=k1:short"}, WantField: "CONCH_SIGNING_KEYS"},
		{Name: "zero quota means the default", Args: []string{"--dir", "/tmp/ws", "--quota-bytes", "0"}, Env: []string{signingKeys}},
		{Name: "negative quota", Args: []string{"--dir", "/tmp/ws", "--quota-bytes", "-1"}, Env: []string{signingKeys}, WantField: "--quota-bytes"},
		{Name: "negative file quota", Args: []string{"--dir", "/tmp/ws", "--quota-files", "-1"}, Env: []string{signingKeys}, WantField: "--quota-files"},
	})
}

const signingKeys = "CONCH_SIGNING_KEYS=k1:0123456789abcdef0123456789abcdef"
