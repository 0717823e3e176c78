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
	configtest.ErrorsNameTheField(t, func() any { return &approval.Config{} }, []configtest.Case{
		{Name: "defaults"},
		{Name: "s3 without keys", Env: []string{"CONCH_AUDIT_S3_ENDPOINT=minio:9000"}, WantField: "CONCH_AUDIT_S3_ACCESS_KEY"},
		{Name: "zero flush", Args: []string{"--audit-flush", "0s"}, WantField: "--audit-flush"},
		{Name: "no buffer", Args: []string{"--audit-buffer", "0"}, WantField: "--audit-buffer"},
		{Name: "short retention", Args: []string{"--audit-retention", "1m"}, WantField: "--audit-retention"},
	})
}
