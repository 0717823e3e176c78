package router_test

import (
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
	"github.com/conch-sh/conch/services/router"
)

// TestConfigErrorsNameTheField checks that every rejected setting names the
// flag or variable that holds it.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	// The router stores gateways' secrets, sealed: it needs keys.
	// It keeps stored responses somewhere: here, a directory.
	const keys, dir = "CONCH_SECRETS_KEY=k1:YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE=", "CONCH_RESPONSES_DIR=/var/lib/conch/responses"
	configtest.ErrorsNameTheField(t, func() any { return &router.Config{} }, []configtest.Case{
		{Name: "defaults", Env: []string{keys, dir}},
		{Name: "no response storage", Env: []string{keys}, WantField: "CONCH_RESPONSES_S3_ENDPOINT"},
		{Name: "two response storages", Env: []string{keys, dir, "CONCH_RESPONSES_S3_ENDPOINT=minio:9000"}, WantField: "CONCH_RESPONSES_DIR"},
		{Name: "bucket without keys", Env: []string{keys, "CONCH_RESPONSES_S3_ENDPOINT=minio:9000"}, WantField: "CONCH_RESPONSES_S3_ACCESS_KEY"},
		{Name: "bucket", Env: []string{keys, "CONCH_RESPONSES_S3_ENDPOINT=minio:9000", "CONCH_RESPONSES_S3_ACCESS_KEY=router", "CONCH_RESPONSES_S3_SECRET_KEY=secretsecret"}},
		{Name: "no secrets key", Env: []string{dir}, WantField: "CONCH_SECRETS_KEY"},
		{Name: "bad secrets key", Env: []string{dir, "CONCH_SECRETS_KEY=k1:short"}, WantField: "CONCH_SECRETS_KEY"},
		{Name: "bad http addr", Args: []string{"--http-addr", "8080"}, Env: []string{keys, dir}, WantField: "--http-addr"},
		{Name: "short admin key", Env: []string{keys, dir, "CONCH_ADMIN_KEY=abc"}, WantField: "CONCH_ADMIN_KEY"},
		{Name: "bad public url", Args: []string{"--public-url", "conch.example"}, Env: []string{keys, dir}, WantField: "--public-url"},
		{Name: "zero upload idle timeout", Args: []string{"--upload-idle-timeout", "0s"}, Env: []string{keys, dir}, WantField: "--upload-idle-timeout"},
		{Name: "no completions", Args: []string{"--max-concurrent-completions", "0"}, Env: []string{keys, dir}, WantField: "--max-concurrent-completions"},
		{Name: "short response retention", Args: []string{"--response-retention", "1s"}, Env: []string{keys, dir}, WantField: "--response-retention"},
	})
}
