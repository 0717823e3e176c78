package completion

import (
	"slices"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

func TestToolboxTools(t *testing.T) {
	t.Parallel()
	no, yes := false, true
	for _, tt := range []struct {
		name       string
		g          *routerv1.Gateway
		user       string
		want       []string
		persistent bool
	}{
		{name: "no settings", g: &routerv1.Gateway{}, want: []string{"shell", "exec", "process"}},
		{name: "shell enabled", g: &routerv1.Gateway{Shell: &routerv1.ShellSettings{Enabled: true, AllowRequest: &no}}, want: []string{"shell", "exec", "process"}},
		{name: "requests may not ask", g: &routerv1.Gateway{Shell: &routerv1.ShellSettings{AllowRequest: &no}}, want: nil},
		{name: "requests may ask", g: &routerv1.Gateway{Shell: &routerv1.ShellSettings{AllowRequest: &yes}}, want: []string{"shell", "exec", "process"}},
		{name: "exec denied", g: &routerv1.Gateway{Exec: &approvalv1.ExecSettings{Security: approvalv1.Security_SECURITY_DENY}}, want: []string{"shell"}},
		{name: "skills", g: &routerv1.Gateway{Skills: []*routerv1.Skill{{Name: "s", Content: "c"}}}, want: []string{"shell", "exec", "process", "read_skill"}},
		{name: "persistent with a user", g: &routerv1.Gateway{Shell: &routerv1.ShellSettings{AllowDataPersistence: true}}, user: "alice", want: []string{"shell", "exec", "process"}, persistent: true},
		{name: "persistence without a user", g: &routerv1.Gateway{Shell: &routerv1.ShellSettings{AllowDataPersistence: true}}, want: []string{"shell", "exec", "process"}},
		{name: "a user without persistence", g: &routerv1.Gateway{}, user: "alice", want: []string{"shell", "exec", "process"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := planTools(tt.g, nil, toolboxRequest(tt.g, tt.user), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tl := range p.tools {
				got = append(got, tl.Name)
			}
			if !slices.Equal(got, tt.want) || p.persistent != tt.persistent {
				t.Fatalf("tools = %v persistent %v, want %v persistent %v", got, p.persistent, tt.want, tt.persistent)
			}
		})
	}
}
