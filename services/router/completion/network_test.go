package completion

import (
	"errors"
	"slices"
	"testing"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

// A request's shell tool may narrow the gateway's network, never widen
// it; a widening is a 400 naming the field.
func TestShellNetworkNarrows(t *testing.T) {
	t.Parallel()
	allow := executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST
	g := &routerv1.Gateway{Name: "research", Shell: &routerv1.ShellSettings{Network: &executorv1.Network{
		Mode: allow, AllowedDomains: []string{"api.github.com", "*.pypi.org", "192.0.2.1"},
	}}}
	none := &routerv1.Gateway{Name: "closed"}
	cases := []struct {
		name      string
		g         *routerv1.Gateway
		n         *ShellNetwork
		container string
		want      *executorv1.Network
		field     string
	}{
		{name: "no narrowing keeps the gateway's", g: g, want: g.Shell.Network},
		{name: "a subset", g: g, n: &ShellNetwork{AllowedDomains: []string{"API.GitHub.com", "files.pypi.org", "*.x.pypi.org"}},
			want: &executorv1.Network{Mode: allow, AllowedDomains: []string{"api.github.com", "files.pypi.org", "*.x.pypi.org"}}},
		{name: "ports only", g: g, n: &ShellNetwork{Ports: []int32{443}},
			want: &executorv1.Network{Mode: allow, AllowedDomains: g.Shell.Network.AllowedDomains, Ports: []int32{443}}},
		{name: "nothing at all", g: g, n: &ShellNetwork{AllowedDomains: []string{}}, want: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_NONE}},
		{name: "a domain outside", g: g, n: &ShellNetwork{AllowedDomains: []string{"pypi.org", "example.com"}}, field: "tools[0].network.allowed_domains[0]"},
		{name: "a wider suffix", g: g, n: &ShellNetwork{AllowedDomains: []string{"*.github.com"}}, field: "tools[0].network.allowed_domains[0]"},
		{name: "an IP not listed", g: g, n: &ShellNetwork{AllowedDomains: []string{"192.0.2.2"}}, field: "tools[0].network.allowed_domains[0]"},
		{name: "not a domain", g: g, n: &ShellNetwork{AllowedDomains: []string{"a b"}}, field: "tools[0].network.allowed_domains[0]"},
		{name: "a port outside", g: g, n: &ShellNetwork{Ports: []int32{443, 22}}, field: "tools[0].network.ports[1]"},
		{name: "no ports", g: g, n: &ShellNetwork{Ports: []int32{}}, field: "tools[0].network.ports"},
		{name: "a gateway without network", g: none, n: &ShellNetwork{AllowedDomains: []string{"api.github.com"}}, field: "tools[0].network.allowed_domains[0]"},
		{name: "a container", g: g, n: &ShellNetwork{AllowedDomains: []string{"api.github.com"}}, container: "cntr_1", field: "tools[0].network"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			req := &Request{ShellField: "tools[0]", Container: c.container}
			if c.n != nil {
				req.Shell = &ShellTool{Network: c.n}
			}
			got, err := shellNetwork(c.g, req)
			if c.field != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != c.field || fe.Status != 400 {
					t.Fatalf("err = %v, want a 400 naming %s", err, c.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.GetMode() != c.want.GetMode() || !slices.Equal(got.GetAllowedDomains(), c.want.GetAllowedDomains()) || !slices.Equal(got.GetPorts(), c.want.GetPorts()) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}
