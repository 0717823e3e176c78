package loop

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

// The exec tool's host, security, ask and node only tighten the gateway's
// settings: a looser security or ask is ignored, a host or node the gateway
// does not allow is an error the model sees.
func TestRequestSettings(t *testing.T) {
	t.Parallel()
	// What the handler passes: the gateway's settings with the host's
	// defaults filled in.
	sandboxGW := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_SANDBOX, Security: approvalv1.Security_SECURITY_FULL, Ask: approvalv1.Ask_ASK_OFF}
	gatewayGW := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_ON_MISS}
	nodeGW := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_NODE, Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_ON_MISS}
	pinnedGW := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_NODE, Node: "mac-1", Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_ON_MISS}
	with := func(base *approvalv1.ExecSettings, f func(*approvalv1.ExecSettings)) *approvalv1.ExecSettings {
		e := &approvalv1.ExecSettings{Host: base.Host, Node: base.Node, Security: base.Security, Ask: base.Ask}
		f(e)
		return e
	}
	for _, tc := range []struct {
		name    string
		gw      *approvalv1.ExecSettings
		a       execArgs
		want    *approvalv1.ExecSettings
		wantErr string
	}{
		{"nothing asked", gatewayGW, execArgs{}, gatewayGW, ""},
		{"no gateway settings", nil, execArgs{}, sandboxGW, ""},
		{"tighten security", sandboxGW, execArgs{Security: "allowlist"}, with(sandboxGW, func(e *approvalv1.ExecSettings) { e.Security = approvalv1.Security_SECURITY_ALLOWLIST }), ""},
		{"tighten ask", gatewayGW, execArgs{Ask: "always"}, with(gatewayGW, func(e *approvalv1.ExecSettings) { e.Ask = approvalv1.Ask_ASK_ALWAYS }), ""},
		{"looser security ignored", gatewayGW, execArgs{Security: "full"}, gatewayGW, ""},
		{"less asking ignored", gatewayGW, execArgs{Ask: "off"}, gatewayGW, ""},
		{"bad security", sandboxGW, execArgs{Security: "some"}, nil, "exec: security must be deny, allowlist or full"},
		{"bad ask", sandboxGW, execArgs{Ask: "never"}, nil, "exec: ask must be off, on-miss or always"},
		{"bad host", sandboxGW, execArgs{Host: "moon"}, nil, "exec: host must be sandbox, gateway or node"},
		{"host gateway from sandbox", sandboxGW, execArgs{Host: "gateway"}, nil, "exec: host gateway is not allowed by this gateway (its host is sandbox)"},
		{"host gateway without gateway settings", nil, execArgs{Host: "gateway"}, nil, "exec: host gateway is not allowed by this gateway (its host is default)"},
		{"host sandbox from gateway", gatewayGW, execArgs{Host: "sandbox"}, with(gatewayGW, func(e *approvalv1.ExecSettings) { e.Host = approvalv1.Host_HOST_SANDBOX }), ""},
		{"node on sandbox", sandboxGW, execArgs{Node: "mac-1"}, nil, "exec: node is only for host node"},
		{"node after moving to the sandbox", nodeGW, execArgs{Host: "sandbox", Node: "mac-1"}, nil, "exec: node is only for host node"},
		{"node on node host", nodeGW, execArgs{Node: "mac-2"}, with(nodeGW, func(e *approvalv1.ExecSettings) { e.Node = "mac-2" }), ""},
		{"the gateway's node", pinnedGW, execArgs{Node: "mac-1"}, pinnedGW, ""},
		{"another node", pinnedGW, execArgs{Node: "mac-2"}, nil, "exec: node mac-2 is not allowed by this gateway (its node is mac-1)"},
		{"host error comes first", sandboxGW, execArgs{Host: "gateway", Security: "some"}, nil, "exec: host gateway is not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, msg := requestSettings(tc.gw, tc.a)
			if tc.wantErr != "" {
				if !strings.HasPrefix(msg, tc.wantErr) {
					t.Fatalf("message = %q, want %q", msg, tc.wantErr)
				}
				return
			}
			if msg != "" {
				t.Fatalf("message = %q", msg)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("settings (-want +got)\n%s", diff)
			}
		})
	}
}
