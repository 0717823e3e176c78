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
	const keys = "CONCH_SECRETS_KEY=k1:YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE="
	configtest.ErrorsNameTheField(t, func() any { return &router.Config{} }, []configtest.Case{
		{Name: "defaults", Env: []string{keys}},
		{Name: "no secrets key", WantField: "CONCH_SECRETS_KEY"},
		{Name: "bad secrets key", Env: []string{"CONCH_SECRETS_KEY=k1:short"}, WantField: "CONCH_SECRETS_KEY"},
		{Name: "bad http addr", Args: []string{"--http-addr", "8080"}, Env: []string{keys}, WantField: "--http-addr"},
		{Name: "short admin key", Env: []string{keys, "CONCH_ADMIN_KEY=abc"}, WantField: "CONCH_ADMIN_KEY"},
		{Name: "bad public url", Args: []string{"--public-url", "conch.example"}, Env: []string{keys}, WantField: "--public-url"},
		{Name: "zero upload idle timeout", Args: []string{"--upload-idle-timeout", "0s"}, Env: []string{keys}, WantField: "--upload-idle-timeout"},
		{Name: "no completions", Args: []string{"--max-concurrent-completions", "0"}, Env: []string{keys}, WantField: "--max-concurrent-completions"},
		{Name: "short response retention", Args: []string{"--response-retention", "1s"}, Env: []string{keys}, WantField: "--response-retention"},
	})
}
