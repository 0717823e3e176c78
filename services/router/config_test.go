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
	configtest.ErrorsNameTheField(t, func() any { return &router.Config{} }, []configtest.Case{
		{Name: "defaults"},
		{Name: "bad http addr", Args: []string{"--http-addr", "8080"}, WantField: "--http-addr"},
		{Name: "short admin key", Env: []string{"CONCH_ADMIN_KEY=abc"}, WantField: "CONCH_ADMIN_KEY"},
		{Name: "bad public url", Args: []string{"--public-url", "conch.example"}, WantField: "--public-url"},
		{Name: "zero upload idle timeout", Args: []string{"--upload-idle-timeout", "0s"}, WantField: "--upload-idle-timeout"},
		{Name: "no completions", Args: []string{"--max-concurrent-completions", "0"}, WantField: "--max-concurrent-completions"},
		{Name: "short response retention", Args: []string{"--response-retention", "1s"}, WantField: "--response-retention"},
	})
}
