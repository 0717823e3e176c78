package sessions

import (
	"strings"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

func TestApplyExecCommand(t *testing.T) {
	t.Parallel()
	sandboxGW := &approvalv1.ExecSettings{}
	gatewayGW := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY}
	nodeGW := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_NODE}
	pinnedGW := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_NODE, Node: "mac-1"}
	tests := []struct {
		name    string
		gw      *approvalv1.ExecSettings
		prior   Override
		cmd     string
		want    string // effective settings after the command
		wantErr string
	}{
		{"show defaults of sandbox", sandboxGW, Override{}, "/exec", "host=sandbox security=full ask=off", ""},
		{"show defaults of gateway host", gatewayGW, Override{}, "/exec", "host=gateway security=allowlist ask=on-miss", ""},
		{"tighten security", sandboxGW, Override{}, "/exec security=allowlist", "host=sandbox security=allowlist ask=off", ""},
		{"tighten ask", sandboxGW, Override{}, "/exec ask=always security=deny", "host=sandbox security=deny ask=always", ""},
		{"loosen security refused", gatewayGW, Override{}, "/exec security=full", "", "looser"},
		{"ask less refused", gatewayGW, Override{}, "/exec ask=off", "", "asks less"},
		{"host gateway from sandbox refused", sandboxGW, Override{}, "/exec host=gateway", "", "only tighten"},
		// The sandbox isolates, so its own defaults
		// (docs/explanation/exec-policy.md) apply there.
		{"host sandbox from gateway allowed", gatewayGW, Override{}, "/exec host=sandbox", "host=sandbox security=full ask=off", ""},
		{"node without node host", sandboxGW, Override{}, "/exec node=mac-1", "", "nodes"},
		{"unknown key", sandboxGW, Override{}, "/exec colour=red", "", "unknown key"},
		{"bad value", sandboxGW, Override{}, "/exec security=some", "", "want deny"},
		{"not key=value", sandboxGW, Override{}, "/exec allowlist", "", "key=value"},
		{"keeps earlier overrides", sandboxGW, Override{Security: "deny"}, "/exec ask=on-miss", "host=sandbox security=deny ask=on-miss", ""},
		{"node on node host", nodeGW, Override{}, "/exec node=mac-2", "host=node security=allowlist ask=on-miss node=mac-2", ""},
		{"the gateway's node", pinnedGW, Override{}, "/exec node=mac-1", "host=node security=allowlist ask=on-miss node=mac-1", ""},
		// The gateway's node, when it names one, is the only node it allows.
		{"another node than the gateway's refused", pinnedGW, Override{}, "/exec node=mac-2", "", "node=mac-2: the gateway allows node mac-1 only"},
		{"empty security refused", sandboxGW, Override{Security: "deny"}, "/exec security=", "", `security: want deny, allowlist or full, got ""`},
		{"empty ask refused", sandboxGW, Override{Ask: "always"}, "/exec ask=", "", `ask: want off, on-miss or always, got ""`},
		{"empty host refused", sandboxGW, Override{}, "/exec host=", "", `host: want sandbox, gateway or node, got ""`},
		{"empty node refused", nodeGW, Override{}, "/exec node=", "", `node: "" is not a node name`},
		{"bad node name", nodeGW, Override{}, "/exec node=a/b", "", "not a node name"},
		{"bad host", sandboxGW, Override{}, "/exec host=moon", "", `host: want sandbox, gateway or node, got "moon"`},
		{"bad ask", sandboxGW, Override{}, "/exec ask=never", "", `ask: want off, on-miss or always, got "never"`},
		{"first refusal stops", gatewayGW, Override{}, "/exec ask=always security=full", "", "security=full is looser than the gateway's allowlist; an override may only tighten it"},
		{"host refusal names the gateway's host", sandboxGW, Override{}, "/exec host=node", "", "host=node: the gateway allows host sandbox; an override may only tighten it (host=sandbox)"},
		{"ask refusal names the gateway's ask", gatewayGW, Override{}, "/exec ask=off", "", "ask=off asks less than the gateway's on-miss; an override may only tighten it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := tt.prior
			var err error
			if tt.cmd != "/exec" {
				o, err = ApplyExecCommand(tt.cmd, tt.gw, tt.prior)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := Describe(Effective(tt.gw, o)); got != tt.want {
				t.Errorf("effective = %q, want %q", got, tt.want)
			}
		})
	}
}

// An override stored before a gateway was loosened or tightened never makes
// the effective settings looser than the gateway's.
func TestEffectiveNeverLoosens(t *testing.T) {
	t.Parallel()
	gw := &approvalv1.ExecSettings{Security: approvalv1.Security_SECURITY_DENY, Ask: approvalv1.Ask_ASK_ALWAYS}
	e := Effective(gw, Override{Security: "full", Ask: "off"})
	if e.Security != approvalv1.Security_SECURITY_DENY || e.Ask != approvalv1.Ask_ASK_ALWAYS {
		t.Fatalf("effective = %v", e)
	}
	// A host or node chosen while the gateway allowed it does not outlive
	// the gateway's change.
	if e := Effective(&approvalv1.ExecSettings{}, Override{Host: "gateway"}); e.Host != approvalv1.Host_HOST_SANDBOX {
		t.Fatalf("stale host override: effective = %v", e)
	}
	pinned := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_NODE, Node: "mac-1"}
	if e := Effective(pinned, Override{Node: "mac-2"}); e.Node != "mac-1" {
		t.Fatalf("stale node override: effective = %v", e)
	}
}
