package completion

import (
	"strings"
	"testing"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

// A gateway with no shell settings at all still takes a request's shell
// tool (allow_request defaults to true).
func TestPlanToolsWithoutShellSettings(t *testing.T) {
	t.Parallel()
	g := &routerv1.Gateway{Name: "bare", Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED}}
	p, err := planTools(g, nil, &Request{Shell: &ShellTool{}, ShellField: "tools[0]"})
	if err != nil || p.shell == nil || p.shell.TimeoutSeconds != 60 || p.shell.MaxOutputLength != 4096 {
		t.Fatalf("planTools = %+v, %v", p, err)
	}
	no := false
	g.Shell = &routerv1.ShellSettings{AllowRequest: &no}
	if _, err := planTools(g, nil, &Request{Shell: &ShellTool{}, ShellField: "tools[0]"}); err == nil || !strings.Contains(err.Error(), `gateway "bare"`) {
		t.Fatalf("allow_request false: %v", err)
	}
}
