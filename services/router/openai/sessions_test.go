package openai

import (
	"strings"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

func TestApplyExecCommand(t *testing.T) {
	t.Parallel()
	sandboxGW := &approvalv1.ExecSettings{}
	gatewayGW := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY}
	tests := []struct {
		name    string
		gw      *approvalv1.ExecSettings
		prior   execOverride
		cmd     string
		want    string // effective settings after the command
		wantErr string
	}{
		{"show defaults of sandbox", sandboxGW, execOverride{}, "/exec", "host=sandbox security=full ask=off", ""},
		{"show defaults of gateway host", gatewayGW, execOverride{}, "/exec", "host=gateway security=allowlist ask=on-miss", ""},
		{"tighten security", sandboxGW, execOverride{}, "/exec security=allowlist", "host=sandbox security=allowlist ask=off", ""},
		{"tighten ask", sandboxGW, execOverride{}, "/exec ask=always security=deny", "host=sandbox security=deny ask=always", ""},
		{"loosen security refused", gatewayGW, execOverride{}, "/exec security=full", "", "looser"},
		{"ask less refused", gatewayGW, execOverride{}, "/exec ask=off", "", "asks less"},
		{"host gateway from sandbox refused", sandboxGW, execOverride{}, "/exec host=gateway", "", "only tighten"},
		// The sandbox isolates, so its own defaults (SPEC §7) apply there.
		{"host sandbox from gateway allowed", gatewayGW, execOverride{}, "/exec host=sandbox", "host=sandbox security=full ask=off", ""},
		{"node without node host", sandboxGW, execOverride{}, "/exec node=mac-1", "", "nodes"},
		{"unknown key", sandboxGW, execOverride{}, "/exec colour=red", "", "unknown key"},
		{"bad value", sandboxGW, execOverride{}, "/exec security=some", "", "want deny"},
		{"not key=value", sandboxGW, execOverride{}, "/exec allowlist", "", "key=value"},
		{"keeps earlier overrides", sandboxGW, execOverride{Security: "deny"}, "/exec ask=on-miss", "host=sandbox security=deny ask=on-miss", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := tt.prior
			var err error
			if tt.cmd != "/exec" {
				o, err = applyExecCommand(tt.cmd, tt.gw, tt.prior)
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
			if got := describe(effective(tt.gw, o)); got != tt.want {
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
	e := effective(gw, execOverride{Security: "full", Ask: "off"})
	if e.Security != approvalv1.Security_SECURITY_DENY || e.Ask != approvalv1.Ask_ASK_ALWAYS {
		t.Fatalf("effective = %v", e)
	}
}
