package upstream

import (
	"net/http"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

// For returns the provider of a gateway's upstream settings: every caller
// of a gateway's model (completions, the reviewer) gets it here.
func For(u *routerv1.Upstream, client *http.Client, retry RetryPolicy) Provider {
	switch u.GetProvider() {
	case routerv1.Provider_PROVIDER_OPENAI:
		return &OpenAI{BaseURL: u.GetBaseUrl(), APIKey: u.GetApiKey(), Client: client, Retry: retry}
	case routerv1.Provider_PROVIDER_ANTHROPIC:
		return &Anthropic{BaseURL: u.GetBaseUrl(), APIKey: u.GetApiKey(), Client: client, Retry: retry}
	default:
		return Scripted{}
	}
}
