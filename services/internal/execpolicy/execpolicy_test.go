package execpolicy_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/execpolicy"
)

const (
	sandbox   = approvalv1.Host_HOST_SANDBOX
	gatewayH  = approvalv1.Host_HOST_GATEWAY
	node      = approvalv1.Host_HOST_NODE
	unsetHost = approvalv1.Host_HOST_UNSPECIFIED

	unsetSec  = approvalv1.Security_SECURITY_UNSPECIFIED
	deny      = approvalv1.Security_SECURITY_DENY
	allowlist = approvalv1.Security_SECURITY_ALLOWLIST
	full      = approvalv1.Security_SECURITY_FULL

	unsetAsk = approvalv1.Ask_ASK_UNSPECIFIED
	off      = approvalv1.Ask_ASK_OFF
	onMiss   = approvalv1.Ask_ASK_ON_MISS
	always   = approvalv1.Ask_ASK_ALWAYS
)

// set builds settings of security, ask and ask fallback.
func set(s approvalv1.Security, a approvalv1.Ask, fb approvalv1.Security) *approvalv1.ExecSettings {
	return &approvalv1.ExecSettings{Security: s, Ask: a, AskFallback: fb}
}

// on is set with a host.
func on(h approvalv1.Host, s approvalv1.Security, a approvalv1.Ask, fb approvalv1.Security) *approvalv1.ExecSettings {
	e := set(s, a, fb)
	e.Host = h
	return e
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host approvalv1.Host
		want *approvalv1.ExecSettings
	}{
		{sandbox, on(sandbox, full, off, deny)},
		{unsetHost, on(sandbox, full, off, deny)},
		{gatewayH, on(gatewayH, allowlist, onMiss, deny)},
		{node, on(node, allowlist, onMiss, deny)},
	} {
		t.Run(tc.host.String(), func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, execpolicy.Defaults(tc.host), protocmp.Transform()); diff != "" {
				t.Errorf("Defaults (-want +got)\n%s", diff)
			}
		})
	}
}

func TestStricter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a, b approvalv1.Security
		want approvalv1.Security
	}{
		{"deny over allowlist", deny, allowlist, deny},
		{"deny over allowlist, other order", allowlist, deny, deny},
		{"allowlist over full", full, allowlist, allowlist},
		{"allowlist over full, other order", allowlist, full, allowlist},
		{"deny over full", full, deny, deny},
		{"unset defers", unsetSec, full, full},
		{"unset defers, other order", full, unsetSec, full},
		{"both unset", unsetSec, unsetSec, unsetSec},
		{"unknown counts as deny", approvalv1.Security(7), full, deny},
		{"unknown counts as deny, other order", full, approvalv1.Security(7), deny},
	} {
		t.Run("security "+tc.name, func(t *testing.T) {
			t.Parallel()
			if got := execpolicy.StricterSecurity(tc.a, tc.b); got != tc.want {
				t.Errorf("StricterSecurity(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		a, b approvalv1.Ask
		want approvalv1.Ask
	}{
		{"always over on-miss", onMiss, always, always},
		{"always over on-miss, other order", always, onMiss, always},
		{"on-miss over off", off, onMiss, onMiss},
		{"on-miss over off, other order", onMiss, off, onMiss},
		{"unset defers", unsetAsk, off, off},
		{"unset defers, other order", off, unsetAsk, off},
		{"unknown counts as always", approvalv1.Ask(9), off, always},
	} {
		t.Run("ask "+tc.name, func(t *testing.T) {
			t.Parallel()
			if got := execpolicy.StricterAsk(tc.a, tc.b); got != tc.want {
				t.Errorf("StricterAsk(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
	got := execpolicy.Stricter(set(full, always, unsetSec), nil, set(unsetSec, off, allowlist), set(allowlist, unsetAsk, full))
	if diff := cmp.Diff(set(allowlist, always, allowlist), got, protocmp.Transform()); diff != "" {
		t.Errorf("Stricter (-want +got)\n%s", diff)
	}
}

func TestEffective(t *testing.T) {
	t.Parallel()
	loose := set(full, off, full)
	strict := set(allowlist, always, deny)
	for _, tc := range []struct {
		name string
		host approvalv1.Host
		doc  *approvalv1.ExecSettings
		exec []*approvalv1.ExecSettings
		want *approvalv1.ExecSettings
	}{
		{"sandbox default", sandbox, nil, nil, on(sandbox, full, off, deny)},
		{"unspecified host is the sandbox", unsetHost, strict, nil, on(sandbox, full, off, deny)},
		{"gateway default", gatewayH, nil, nil, on(gatewayH, allowlist, onMiss, deny)},
		{"node default", node, nil, nil, on(node, allowlist, onMiss, deny)},
		{"sandbox ignores document", sandbox, strict, nil, on(sandbox, full, off, deny)},
		{"sandbox: gateway alone chooses", sandbox, loose, []*approvalv1.ExecSettings{set(allowlist, unsetAsk, unsetSec)}, on(sandbox, allowlist, off, deny)},
		{"gateway: document stricter", gatewayH, strict, []*approvalv1.ExecSettings{loose}, on(gatewayH, allowlist, always, deny)},
		{"gateway: gateway stricter", gatewayH, loose, []*approvalv1.ExecSettings{strict}, on(gatewayH, allowlist, always, deny)},
		{"node: document stricter", node, set(deny, unsetAsk, unsetSec), []*approvalv1.ExecSettings{loose}, on(node, deny, off, deny)},
		{"gateway full both", gatewayH, loose, []*approvalv1.ExecSettings{loose}, on(gatewayH, full, off, full)},
		{"unset document defers", gatewayH, set(unsetSec, unsetAsk, unsetSec), []*approvalv1.ExecSettings{loose}, on(gatewayH, full, off, full)},
		{"unset gateway defers to document", gatewayH, loose, nil, on(gatewayH, full, off, full)},
		{"session cannot loosen gateway", gatewayH, nil, []*approvalv1.ExecSettings{set(deny, unsetAsk, unsetSec), set(full, unsetAsk, unsetSec)}, on(gatewayH, deny, onMiss, deny)},
		{"fallback capped by security", gatewayH, nil, []*approvalv1.ExecSettings{set(unsetSec, unsetAsk, full)}, on(gatewayH, allowlist, onMiss, allowlist)},
		{"fallback capped by deny", sandbox, nil, []*approvalv1.ExecSettings{set(deny, always, full)}, on(sandbox, deny, always, deny)},
		{"document fallback capped", node, set(unsetSec, unsetAsk, full), nil, on(node, allowlist, onMiss, allowlist)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := execpolicy.Effective(tc.host, tc.doc, tc.exec...)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Effective (-want +got)\n%s", diff)
			}
		})
	}
}

func TestNeeded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		host approvalv1.Host
		s    *approvalv1.ExecSettings
		want bool
	}{
		{"sandbox defaults", sandbox, nil, false},
		{"unspecified host, full and off", unsetHost, set(full, off, unsetSec), false},
		{"sandbox full, fallback irrelevant", sandbox, set(full, off, full), false},
		{"sandbox allowlist", sandbox, set(allowlist, unsetAsk, unsetSec), true},
		{"sandbox asks always", sandbox, set(unsetSec, always, unsetSec), true},
		{"sandbox deny", sandbox, set(deny, unsetAsk, unsetSec), true},
		{"sandbox unknown security", sandbox, set(approvalv1.Security(7), off, unsetSec), true},
		// Deny rules hold in the sandbox too: only the approval service
		// applies them.
		{"sandbox full with deny rules", sandbox, &approvalv1.ExecSettings{Security: full, Ask: off, Deny: []*approvalv1.DenyRule{{Id: "x", Pattern: "/usr/bin/rm"}}}, true},
		// The document may be stricter than what the caller holds.
		{"gateway full and off", gatewayH, set(full, off, unsetSec), true},
		{"node defaults", node, nil, true},
		{"unknown host", approvalv1.Host(9), set(full, off, unsetSec), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := execpolicy.Needed(tc.host, tc.s); got != tc.want {
				t.Errorf("Needed(%v, %v) = %v, want %v", tc.host, tc.s, got, tc.want)
			}
		})
	}
}

func TestTighten(t *testing.T) {
	t.Parallel()
	gw := &approvalv1.ExecSettings{Host: gatewayH}
	pinned := &approvalv1.ExecSettings{Host: node, Node: "mac-1"}
	strict := set(deny, always, unsetSec)
	type refusal struct {
		field string
		err   error
	}
	for _, tc := range []struct {
		name    string
		base    *approvalv1.ExecSettings
		o       execpolicy.Override
		want    *approvalv1.ExecSettings
		refused []refusal
	}{
		{"nil base takes sandbox defaults", nil, execpolicy.Override{}, on(sandbox, full, off, unsetSec), nil},
		{"gateway defaults", gw, execpolicy.Override{}, on(gatewayH, allowlist, onMiss, unsetSec), nil},
		{"fallback kept as set", set(unsetSec, unsetAsk, allowlist), execpolicy.Override{}, on(sandbox, full, off, allowlist), nil},
		{"tighten security", nil, execpolicy.Override{Security: "allowlist"}, on(sandbox, allowlist, off, unsetSec), nil},
		{"tighten ask and security", nil, execpolicy.Override{Ask: "always", Security: "deny"}, on(sandbox, deny, always, unsetSec), nil},
		{"same value applies", gw, execpolicy.Override{Security: "allowlist", Ask: "on-miss"}, on(gatewayH, allowlist, onMiss, unsetSec), nil},
		{"looser security refused", gw, execpolicy.Override{Security: "full"}, on(gatewayH, allowlist, onMiss, unsetSec), []refusal{{"security", execpolicy.ErrLooser}}},
		{"less asking refused", gw, execpolicy.Override{Ask: "off"}, on(gatewayH, allowlist, onMiss, unsetSec), []refusal{{"ask", execpolicy.ErrLooser}}},
		{"stored override never loosens", strict, execpolicy.Override{Security: "full", Ask: "off"}, on(sandbox, deny, always, unsetSec), []refusal{{"security", execpolicy.ErrLooser}, {"ask", execpolicy.ErrLooser}}},
		{"unknown words refused", nil, execpolicy.Override{Host: "moon", Security: "some", Ask: "never"}, on(sandbox, full, off, unsetSec), []refusal{{"host", execpolicy.ErrUnknownWord}, {"security", execpolicy.ErrUnknownWord}, {"ask", execpolicy.ErrUnknownWord}}},
		{"host gateway from sandbox refused", nil, execpolicy.Override{Host: "gateway"}, on(sandbox, full, off, unsetSec), []refusal{{"host", execpolicy.ErrLooser}}},
		{"host node from gateway refused", gw, execpolicy.Override{Host: "node"}, on(gatewayH, allowlist, onMiss, unsetSec), []refusal{{"host", execpolicy.ErrLooser}}},
		{"host gateway on gateway applies", gw, execpolicy.Override{Host: "gateway"}, on(gatewayH, allowlist, onMiss, unsetSec), nil},
		// The sandbox isolates, so its own defaults apply there.
		{"host sandbox from gateway takes sandbox defaults", gw, execpolicy.Override{Host: "sandbox"}, on(sandbox, full, off, unsetSec), nil},
		{"host sandbox keeps what the gateway set", on(gatewayH, allowlist, onMiss, unsetSec), execpolicy.Override{Host: "sandbox"}, on(sandbox, allowlist, onMiss, unsetSec), nil},
		{"looser security judged against the new host", gw, execpolicy.Override{Host: "sandbox", Security: "full"}, on(sandbox, full, off, unsetSec), nil},
		{"node without node host", nil, execpolicy.Override{Node: "mac-1"}, on(sandbox, full, off, unsetSec), []refusal{{"node", execpolicy.ErrNotNodeHost}}},
		{"node after moving to the sandbox", pinned, execpolicy.Override{Host: "sandbox", Node: "mac-1"}, &approvalv1.ExecSettings{Host: sandbox, Node: "mac-1", Security: full, Ask: off}, []refusal{{"node", execpolicy.ErrNotNodeHost}}},
		{"node on node host", &approvalv1.ExecSettings{Host: node}, execpolicy.Override{Node: "mac-2"}, &approvalv1.ExecSettings{Host: node, Node: "mac-2", Security: allowlist, Ask: onMiss}, nil},
		{"the gateway's node", pinned, execpolicy.Override{Node: "mac-1"}, &approvalv1.ExecSettings{Host: node, Node: "mac-1", Security: allowlist, Ask: onMiss}, nil},
		{"another node than the gateway's", pinned, execpolicy.Override{Node: "mac-2"}, &approvalv1.ExecSettings{Host: node, Node: "mac-1", Security: allowlist, Ask: onMiss}, []refusal{{"node", execpolicy.ErrOtherNode}}},
		{"unknown base security counts as deny", set(approvalv1.Security(7), unsetAsk, unsetSec), execpolicy.Override{Security: "full"}, on(sandbox, deny, off, unsetSec), []refusal{{"security", execpolicy.ErrLooser}}},
		{"other fields kept", &approvalv1.ExecSettings{SafeBins: []string{"jq"}, ApprovalTimeoutSeconds: 5}, execpolicy.Override{}, &approvalv1.ExecSettings{Host: sandbox, Security: full, Ask: off, SafeBins: []string{"jq"}, ApprovalTimeoutSeconds: 5}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, refused := execpolicy.Tighten(tc.base, tc.o)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Tighten settings (-want +got)\n%s", diff)
			}
			if len(refused) != len(tc.refused) {
				t.Fatalf("refused = %v, want %v", refused, tc.refused)
			}
			for i, r := range refused {
				if r.Field != tc.refused[i].field || !errors.Is(r, tc.refused[i].err) {
					t.Errorf("refused[%d] = %v, want %s: %v", i, r, tc.refused[i].field, tc.refused[i].err)
				}
			}
		})
	}
}

// Tighten never leaves the base's host for another than the sandbox nor
// makes security or ask looser, whatever the override says.
func TestTightenNeverLoosens(t *testing.T) {
	t.Parallel()
	hosts := []string{"", "sandbox", "gateway", "node", "moon"}
	secs := []string{"", "deny", "allowlist", "full", "x"}
	asks := []string{"", "off", "on-miss", "always", "x"}
	for _, bh := range []approvalv1.Host{unsetHost, sandbox, gatewayH, node} {
		for _, bs := range []approvalv1.Security{unsetSec, deny, allowlist, full} {
			for _, ba := range []approvalv1.Ask{unsetAsk, off, onMiss, always} {
				base := on(bh, bs, ba, unsetSec)
				ref, _ := execpolicy.Tighten(base, execpolicy.Override{})
				for _, h := range hosts {
					for _, s := range secs {
						for _, a := range asks {
							got, _ := execpolicy.Tighten(base, execpolicy.Override{Host: h, Security: s, Ask: a})
							if got.Host != ref.Host && got.Host != sandbox {
								t.Fatalf("Tighten(%v, %s %s %s) moved to host %v", base, h, s, a, got.Host)
							}
							// Moving to the sandbox takes the sandbox's defaults for
							// what the base left unset: its isolation protects.
							if got.Host != ref.Host {
								continue
							}
							if execpolicy.StricterSecurity(got.Security, ref.Security) != got.Security {
								t.Fatalf("Tighten(%v, %s %s %s) security %v looser than %v", base, h, s, a, got.Security, ref.Security)
							}
							if execpolicy.StricterAsk(got.Ask, ref.Ask) != got.Ask {
								t.Fatalf("Tighten(%v, %s %s %s) ask %v less than %v", base, h, s, a, got.Ask, ref.Ask)
							}
						}
					}
				}
			}
		}
	}
}

func TestWord(t *testing.T) {
	t.Parallel()
	for w, h := range execpolicy.Hosts {
		if got := execpolicy.Word(execpolicy.Hosts, h); got != w {
			t.Errorf("Word(%v) = %q, want %q", h, got, w)
		}
	}
	for w, s := range execpolicy.Securities {
		if got := execpolicy.Word(execpolicy.Securities, s); got != w {
			t.Errorf("Word(%v) = %q, want %q", s, got, w)
		}
	}
	for w, a := range execpolicy.Asks {
		if got := execpolicy.Word(execpolicy.Asks, a); got != w {
			t.Errorf("Word(%v) = %q, want %q", a, got, w)
		}
	}
	if got := execpolicy.Word(execpolicy.Securities, unsetSec); got != "default" {
		t.Errorf("Word(unset) = %q, want default", got)
	}
}
