package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/notify"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

func newServer(t *testing.T) (*Server, context.Context) {
	t.Helper()
	return newServerWith(t, Options{})
}

func newServerWith(t *testing.T, opts Options) (*Server, context.Context) {
	t.Helper()
	st, err := store.New(etcdxtest.StartForTest(t), KeyPrefix, sealtest.Keyring(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, tenant.With(t.Context(), tenant.Scope{Account: "acct", Session: "s1", Key: "key-test"})
}

var gatewaySettings = &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY}

func segs(pairs ...string) []*approvalv1.Segment {
	var out []*approvalv1.Segment
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, &approvalv1.Segment{Argv: []string{pairs[i]}, ResolvedPath: pairs[i+1]})
	}
	return out
}

func binding(cmd string) *approvalv1.Binding {
	return &approvalv1.Binding{Command: cmd, Cwd: "/home/workspace", Host: approvalv1.Host_HOST_GATEWAY, Agent: "default", Session: "s1", Env: map[string]string{"LANG": "C"}}
}

func TestAuthorizeAskResolveUseOnce(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	resolved := segs("rm", "/usr/bin/rm")
	req := &approvalv1.AuthorizeRequest{Binding: binding("rm -rf build"), Segments: resolved, Settings: gatewaySettings}
	resp, err := s.Authorize(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ASK || resp.GetApproval().GetState() != approvalv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Fatalf("authorize: %v", resp)
	}
	id := resp.GetApproval().GetId()
	if got := resp.GetApproval().GetResolvedPaths(); len(got) != 1 || got[0] != "/usr/bin/rm" {
		t.Fatalf("resolved paths %q", got)
	}
	// Not yet decided.
	if _, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: req.Binding, Segments: resolved, Settings: gatewaySettings, ApprovalId: id}); errs.KindOf(err) != errs.FailedPrecondition {
		t.Fatalf("use while pending: %v", err)
	}
	if _, err := s.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: id, Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
		t.Fatal(err)
	}
	// Any change of the binding makes the approval useless (THREATS A10).
	for name, b := range map[string]*approvalv1.Binding{
		"cwd":     {Command: "rm -rf build", Cwd: "/", Host: approvalv1.Host_HOST_GATEWAY, Agent: "default", Session: "s1", Env: map[string]string{"LANG": "C"}},
		"env":     {Command: "rm -rf build", Cwd: "/home/workspace", Host: approvalv1.Host_HOST_GATEWAY, Agent: "default", Session: "s1", Env: map[string]string{"LANG": "C", "X": "1"}},
		"session": {Command: "rm -rf build", Cwd: "/home/workspace", Host: approvalv1.Host_HOST_GATEWAY, Agent: "default", Session: "s2", Env: map[string]string{"LANG": "C"}},
		"command": {Command: "rm -rf /", Cwd: "/home/workspace", Host: approvalv1.Host_HOST_GATEWAY, Agent: "default", Session: "s1", Env: map[string]string{"LANG": "C"}},
	} {
		_, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: b, Segments: resolved, Settings: gatewaySettings, ApprovalId: id})
		if errs.KindOf(err) != errs.PermissionDenied {
			t.Errorf("approval reused with another %s: %v", name, err)
		}
	}
	if _, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: req.Binding, Segments: segs("rm", "/tmp/rm"), Settings: gatewaySettings, ApprovalId: id}); errs.KindOf(err) != errs.PermissionDenied {
		t.Errorf("approval reused with another resolved binary: %v", err)
	}
	other := tenant.With(t.Context(), tenant.Scope{Account: "other", Session: "s1"})
	if _, err := s.Authorize(other, &approvalv1.AuthorizeRequest{Binding: req.Binding, Segments: resolved, Settings: gatewaySettings, ApprovalId: id}); errs.KindOf(err) != errs.NotFound {
		t.Errorf("approval used from another account: %v", err)
	}
	used, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: req.Binding, Segments: resolved, Settings: gatewaySettings, ApprovalId: id})
	if err != nil || used.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ALLOW {
		t.Fatalf("use: %v %v", used, err)
	}
	if _, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: req.Binding, Segments: resolved, Settings: gatewaySettings, ApprovalId: id}); errs.KindOf(err) != errs.FailedPrecondition {
		t.Fatalf("allow-once used twice: %v", err)
	}
}

// A caller that resolved the command's programs and found none is
// believed: the service never finds them on its own host instead.
func TestAuthorizeTrustsTheCallersResolution(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	if _, err := s.AddAllowlistEntry(ctx, &approvalv1.AddAllowlistEntryRequest{Agent: "default", Pattern: "/usr/bin/env"}); err != nil {
		t.Fatal(err)
	}
	settings := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_OFF}
	resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("env"), Settings: settings})
	if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ALLOW {
		t.Fatalf("resolved on the service's host: %v %v", resp, err)
	}
	resp, err = s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("env"), Settings: settings, Resolved: true})
	if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_DENY || !strings.Contains(resp.GetSegments()[0].GetReason(), "env: not found") {
		t.Fatalf("not found by the caller: %v %v", resp, err)
	}
}

func TestAllowAlwaysRecordsInnerProgram(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	resolved := segs("sh", "/bin/sh", "rm", "/usr/bin/rm")
	resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("sh -c 'rm -rf build'"), Segments: resolved, Settings: gatewaySettings})
	if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ASK {
		t.Fatalf("authorize: %v %v", resp, err)
	}
	if _, err := s.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: resp.GetApproval().GetId(), Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ALWAYS}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListAllowlist(ctx, &approvalv1.ListAllowlistRequest{Agent: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetEntries()) != 1 || list.GetEntries()[0].GetPattern() != "/usr/bin/rm" {
		t.Fatalf("allowlist after allow-always: %v", list.GetEntries())
	}
	// Now rm runs at once and its use is recorded.
	again, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm -rf dist"), Segments: segs("rm", "/usr/bin/rm"), Settings: gatewaySettings})
	if err != nil || again.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ALLOW {
		t.Fatalf("after allow-always: %v %v", again, err)
	}
	list, _ = s.ListAllowlist(ctx, &approvalv1.ListAllowlistRequest{Agent: "default"})
	e := list.GetEntries()[0]
	if e.GetLastUsedAt() == 0 || e.GetLastUsedCommand() != "rm -rf dist" || e.GetLastResolvedPath() != "/usr/bin/rm" {
		t.Fatalf("use not recorded: %v", e)
	}
	// A script run by a shell records nothing.
	resp, _ = s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("bash run.sh"), Segments: segs("bash", "/bin/bash"), Settings: gatewaySettings})
	if _, err := s.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: resp.GetApproval().GetId(), Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ALWAYS}); err != nil {
		t.Fatal(err)
	}
	list, _ = s.ListAllowlist(ctx, &approvalv1.ListAllowlistRequest{Agent: "default"})
	if len(list.GetEntries()) != 1 {
		t.Fatalf("allow-always of a shell script recorded %v", list.GetEntries())
	}
}

func TestTimeoutFallback(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	for _, tc := range []struct {
		fallback approvalv1.Security
		cmd      string
		resolved []*approvalv1.Segment
		want     approvalv1.PolicyDecision
		reason   string
	}{
		{approvalv1.Security_SECURITY_DENY, "rm x", segs("rm", "/usr/bin/rm"), approvalv1.PolicyDecision_POLICY_DECISION_DENY, policy.ErrTimeout},
		{approvalv1.Security_SECURITY_ALLOWLIST, "rm x", segs("rm", "/usr/bin/rm"), approvalv1.PolicyDecision_POLICY_DECISION_DENY, policy.ErrTimeout},
		{approvalv1.Security_SECURITY_ALLOWLIST, "wc -l", segs("wc", "/usr/bin/wc"), approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, ""},
	} {
		settings := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, Ask: approvalv1.Ask_ASK_ALWAYS, AskFallback: tc.fallback, ApprovalTimeoutSeconds: 1}
		b := binding(tc.cmd)
		resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: b, Segments: tc.resolved, Settings: settings})
		if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ASK {
			t.Fatalf("%s: authorize %v %v", tc.cmd, resp, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var last *store.Approval
		err = s.store.Watch(wctx, "acct", resp.GetApproval().GetId(), func(a *store.Approval) bool { last = a; return true })
		cancel()
		if err != nil || last.State != store.StateExpired {
			t.Fatalf("%s: watch ended %v in %+v", tc.cmd, err, last)
		}
		got, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: b, Segments: tc.resolved, Settings: settings, ApprovalId: resp.GetApproval().GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetDecision() != tc.want || (tc.reason != "" && got.GetReason() != tc.reason) {
			t.Errorf("%s with fallback %v: %v %q, want %v %q", tc.cmd, tc.fallback, got.GetDecision(), got.GetReason(), tc.want, tc.reason)
		}
	}
}

func TestEvaluateAndDocument(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	resp, err := s.Evaluate(ctx, &approvalv1.EvaluateRequest{Command: "ls 'x", Host: approvalv1.Host_HOST_GATEWAY, Cwd: "/"})
	if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_DENY || !strings.Contains(resp.GetReason(), "without closing quote") {
		t.Fatalf("unparsable: %v %v", resp, err)
	}
	resp, err = s.Evaluate(ctx, &approvalv1.EvaluateRequest{Command: "ls > /etc/passwd", Host: approvalv1.Host_HOST_GATEWAY, Cwd: "/"})
	if err != nil || resp.GetReason() != policy.ErrUnsupportedToken+">" {
		t.Fatalf("redirect: %v %v", resp, err)
	}
	resp, err = s.Evaluate(ctx, &approvalv1.EvaluateRequest{Command: "ls > x", Host: approvalv1.Host_HOST_SANDBOX, Cwd: "/"})
	if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ALLOW || resp.GetSecurity() != approvalv1.Security_SECURITY_FULL {
		t.Fatalf("sandbox default: %v %v", resp, err)
	}
	// The document's stricter settings win for host gateway.
	doc := `{"version": 1, "defaults": {"security": "deny"}, "agents": {}}`
	if _, err := s.PutExecApprovals(ctx, &approvalv1.PutExecApprovalsRequest{Document: []byte(doc)}); err != nil {
		t.Fatal(err)
	}
	resp, _ = s.Evaluate(ctx, &approvalv1.EvaluateRequest{Command: "true", Host: approvalv1.Host_HOST_GATEWAY, Cwd: "/", Settings: &approvalv1.ExecSettings{Security: approvalv1.Security_SECURITY_FULL}})
	if resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_DENY || resp.GetReason() != policy.ErrNotAllowed {
		t.Fatalf("document deny: %v", resp)
	}
	got, err := s.GetExecApprovals(ctx, &approvalv1.GetExecApprovalsRequest{})
	if err != nil || !strings.Contains(string(got.GetDocument()), `"security": "deny"`) {
		t.Fatalf("get: %s %v", got.GetDocument(), err)
	}
	bad := `{"version": 1, "agents": {"main": {"allowlist": [{"pattern": "rg"}]}}}`
	if _, err := s.PutExecApprovals(ctx, &approvalv1.PutExecApprovalsRequest{Document: []byte(bad)}); errs.KindOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), policy.ErrPatternNotBinary) {
		t.Fatalf("invalid put: %v", err)
	}
	after, _ := s.GetExecApprovals(ctx, &approvalv1.GetExecApprovalsRequest{})
	if string(after.GetDocument()) != string(got.GetDocument()) {
		t.Fatal("an invalid put changed the document")
	}
	if _, err := s.AddAllowlistEntry(ctx, &approvalv1.AddAllowlistEntryRequest{Agent: "main", Pattern: "rg"}); errs.KindOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), policy.ErrPatternNotBinary) {
		t.Fatalf("bare pattern: %v", err)
	}
	if _, err := s.RemoveAllowlistEntry(ctx, &approvalv1.RemoveAllowlistEntryRequest{Agent: "main", EntryId: "nope"}); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("remove unknown: %v", err)
	}
}

// TestEvaluateWithSandboxSegments checks that for host sandbox the verdict
// rests on the programs a new sandbox finds, not on the approval host's,
// and that the segments count for no other host.
func TestEvaluateWithSandboxResolution(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	for _, p := range []string{"/opt/image/bin/only-in-sandbox", "/usr/bin/ls"} {
		if _, err := s.AddAllowlistEntry(ctx, &approvalv1.AddAllowlistEntryRequest{Agent: "main", Pattern: p}); err != nil {
			t.Fatal(err)
		}
	}
	allowlist := &approvalv1.ExecSettings{Security: approvalv1.Security_SECURITY_ALLOWLIST, Ask: approvalv1.Ask_ASK_OFF}
	found := &approvalv1.SandboxResolution{Segments: []*approvalv1.Segment{{Argv: []string{"only-in-sandbox"}, ResolvedPath: "/opt/image/bin/only-in-sandbox"}}}
	nothing := &approvalv1.SandboxResolution{}
	tests := []struct {
		name     string
		host     approvalv1.Host
		command  string
		sandbox  *approvalv1.SandboxResolution
		want     approvalv1.PolicyDecision
		resolved string
	}{
		{"found in the sandbox", approvalv1.Host_HOST_SANDBOX, "only-in-sandbox --x", found, approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, "/opt/image/bin/only-in-sandbox"},
		{"host unset is the sandbox", approvalv1.Host_HOST_UNSPECIFIED, "only-in-sandbox", found, approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, "/opt/image/bin/only-in-sandbox"},
		{"not found in the sandbox", approvalv1.Host_HOST_SANDBOX, "ls", found, approvalv1.PolicyDecision_POLICY_DECISION_DENY, ""},
		{"nothing found in the sandbox", approvalv1.Host_HOST_SANDBOX, "ls", nothing, approvalv1.PolicyDecision_POLICY_DECISION_DENY, ""},
		{"not asked: the approval host's", approvalv1.Host_HOST_SANDBOX, "ls", nil, approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, "/usr/bin/ls"},
		{"ignored for the gateway host", approvalv1.Host_HOST_GATEWAY, "only-in-sandbox", found, approvalv1.PolicyDecision_POLICY_DECISION_DENY, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Evaluate(ctx, &approvalv1.EvaluateRequest{Command: tt.command, Agent: "main", Host: tt.host, Cwd: "/home/workspace", Settings: allowlist, SandboxResolution: tt.sandbox})
			if err != nil || resp.GetDecision() != tt.want || len(resp.GetSegments()) == 0 || resp.GetSegments()[0].GetResolvedPath() != tt.resolved {
				t.Fatalf("evaluate = %v, %v; want %v with %q resolved", resp, err, tt.want, tt.resolved)
			}
		})
	}
}

// fakeChat records messages posted to its webhook, Slack and Telegram
// endpoints.
type fakeChat struct {
	mu   sync.Mutex
	msgs map[string][]string
	srv  *httptest.Server
}

func newFakeChat(t *testing.T) *fakeChat {
	f := &fakeChat{msgs: map[string][]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		var key string
		switch {
		case r.URL.Path == "/slack/chat.postMessage":
			if r.Header.Get("Authorization") != "Bearer xoxb-test" {
				_, _ = w.Write([]byte(`{"ok": false, "error": "invalid_auth"}`))
				return
			}
			key = "slack:" + fmt.Sprint(m["channel"])
		case r.URL.Path == "/tg/botTOKEN/sendMessage":
			key = "telegram:" + fmt.Sprint(m["chat_id"])
		case r.URL.Path == "/hook":
			key = "webhook:" + r.Header.Get("X-Conch-Signature")[:7]
		default:
			http.NotFound(w, r)
			return
		}
		f.mu.Lock()
		f.msgs[key] = append(f.msgs[key], fmt.Sprint(m["text"]))
		f.mu.Unlock()
		_, _ = w.Write([]byte(`{"ok": true}`))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// allowed is a guard that lets forwarding reach the fake on loopback, as
// an operator's --outbound-allow would.
func (f *fakeChat) allowed() *outbound.Guard {
	return outbound.Must(outbound.Options{Allow: []string{f.srv.Listener.Addr().String()}})
}

func (f *fakeChat) count() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.msgs {
		out[k] = len(v)
	}
	return out
}

func TestForwardingExactlyOnceAndChatCommands(t *testing.T) {
	t.Parallel()
	chat := newFakeChat(t)
	s, ctx := newServerWith(t, Options{Outbound: chat.allowed()})
	cfg := &approvalv1.ForwardingConfig{
		Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS, AgentFilter: []string{"default"}, SessionFilter: "/^s[0-9]$/",
		Targets: []*approvalv1.ForwardTarget{
			{Channel: approvalv1.Channel_CHANNEL_SLACK, To: "C123"},
			{Channel: approvalv1.Channel_CHANNEL_TELEGRAM, To: "42"},
			{Channel: approvalv1.Channel_CHANNEL_WEBHOOK, To: chat.srv.URL + "/hook"},
		},
		Channels:  &approvalv1.ChannelSettings{SlackToken: "xoxb-test", SlackBaseUrl: chat.srv.URL + "/slack", TelegramToken: "TOKEN", TelegramBaseUrl: chat.srv.URL + "/tg", WebhookSecret: "s3cret"},
		Approvers: []*approvalv1.Approver{{Channel: approvalv1.Channel_CHANNEL_SLACK, Id: "U999"}},
	}
	put, err := s.PutForwarding(ctx, &approvalv1.PutForwardingRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if ch := put.GetConfig().GetChannels(); ch.GetSlackToken() != "" || !ch.GetSlackTokenSet() || !ch.GetWebhookSecretSet() {
		t.Fatalf("secrets not redacted: %v", ch)
	}
	// Three replicas compete; only the leader sends, once.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		n := &notify.Notifier{Store: s.store, Convert: approvalTo, Sender: s.cfg.Sender, Name: fmt.Sprintf("replica-%d", i), SessionTTL: 5}
		wg.Go(func() { _ = n.Run(rctx) })
	}
	defer wg.Wait()
	defer cancel()
	const approvals = 5
	var ids []string
	for i := range approvals {
		resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding(fmt.Sprintf("rm -rf build%d \u202e", i)), Segments: segs("rm", "/usr/bin/rm"), Settings: gatewaySettings})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetApproval().GetId())
	}
	// Another session and another agent are filtered out.
	other := binding("rm x")
	other.Session = "discord-1"
	if _, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: other, Segments: segs("rm", "/usr/bin/rm"), Settings: gatewaySettings}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"slack:C123": approvals, "telegram:42": approvals, "webhook:sha256=": approvals}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := chat.count()
		if fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("messages %v, want %v", got, want)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	chat.mu.Lock()
	text := chat.msgs["slack:C123"][0]
	chat.mu.Unlock()
	for _, part := range []string{"Exec approval request (id: ", "Command: rm -rf build", `\u202e`, "CWD: /home/workspace", "Agent: default", "Resolved: /usr/bin/rm", "Host: gateway", "Security: allowlist", "/approve "} {
		if !strings.Contains(text, part) {
			t.Errorf("message lacks %q:\n%s", part, text)
		}
	}
	if strings.ContainsRune(text, '\u202e') {
		t.Error("message carries a raw bidi override")
	}

	// Inbound commands count only from configured approvers.
	if _, err := s.HandleChatCommand(ctx, &approvalv1.HandleChatCommandRequest{Channel: approvalv1.Channel_CHANNEL_SLACK, From: "U000", Text: "/approve " + ids[0] + " allow-once"}); errs.KindOf(err) != errs.PermissionDenied {
		t.Fatalf("stranger: %v", err)
	}
	if _, err := s.HandleChatCommand(ctx, &approvalv1.HandleChatCommandRequest{Channel: approvalv1.Channel_CHANNEL_TELEGRAM, From: "U999", Text: "/approve " + ids[0] + " allow-once"}); errs.KindOf(err) != errs.PermissionDenied {
		t.Fatalf("approver id on another channel: %v", err)
	}
	if _, err := s.HandleChatCommand(ctx, &approvalv1.HandleChatCommandRequest{Channel: approvalv1.Channel_CHANNEL_SLACK, From: "U999", Text: "/approve " + ids[0] + " maybe"}); errs.KindOf(err) != errs.InvalidArgument {
		t.Fatalf("bad decision: %v", err)
	}
	reply, err := s.HandleChatCommand(ctx, &approvalv1.HandleChatCommandRequest{Channel: approvalv1.Channel_CHANNEL_SLACK, From: "U999", Text: "/approve " + ids[0] + " deny"})
	if err != nil || !strings.Contains(reply.GetReply(), "denied") || reply.GetApproval().GetState() != approvalv1.ApprovalState_APPROVAL_STATE_DENIED {
		t.Fatalf("approver: %v %v", reply, err)
	}
	if _, err := s.HandleChatCommand(ctx, &approvalv1.HandleChatCommandRequest{Channel: approvalv1.Channel_CHANNEL_SLACK, From: "U999", Text: "/approve " + ids[0] + " allow-once"}); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("second answer: %v", err)
	}
	// The targets that were asked hear how it ended, once.
	want["slack:C123"]++
	want["telegram:42"]++
	want["webhook:sha256="]++
	deadline = time.Now().Add(30 * time.Second)
	for fmt.Sprint(chat.count()) != fmt.Sprint(want) {
		if time.Now().After(deadline) {
			t.Fatalf("after the answer: messages %v, want %v", chat.count(), want)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	chat.mu.Lock()
	last := chat.msgs["slack:C123"][len(chat.msgs["slack:C123"])-1]
	chat.mu.Unlock()
	if want := "Exec approval " + ids[0] + ": denied (deny) by slack:U999."; last != want {
		t.Fatalf("outcome message %q, want %q", last, want)
	}
}

func TestConcurrentResolveThroughService(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm x"), Segments: segs("rm", "/usr/bin/rm"), Settings: gatewaySettings})
	if err != nil {
		t.Fatal(err)
	}
	var ok, conflict atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, err := s.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: resp.GetApproval().GetId(), Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ALWAYS})
			if err == nil {
				ok.Add(1)
			} else if errs.KindOf(err) == errs.Conflict {
				conflict.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || conflict.Load() != 9 {
		t.Fatalf("%d ok %d conflicts", ok.Load(), conflict.Load())
	}
	list, _ := s.ListAllowlist(ctx, &approvalv1.ListAllowlistRequest{Agent: "default"})
	if len(list.GetEntries()) != 1 {
		t.Fatalf("allowlist %v", list.GetEntries())
	}
}

// When the leading replica stops, another takes over: it announces new
// approvals, does not announce again what the first one sent, and sends
// the outcome of an approval answered while no replica led.
func TestForwardingFailover(t *testing.T) {
	t.Parallel()
	chat := newFakeChat(t)
	s, ctx := newServerWith(t, Options{Outbound: chat.allowed()})
	_, err := s.PutForwarding(ctx, &approvalv1.PutForwardingRequest{Config: &approvalv1.ForwardingConfig{
		Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_BOTH,
		Targets:  []*approvalv1.ForwardTarget{{Channel: approvalv1.Channel_CHANNEL_TELEGRAM, To: "7"}},
		Channels: &approvalv1.ChannelSettings{TelegramToken: "TOKEN", TelegramBaseUrl: chat.srv.URL + "/tg"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitCount := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for chat.count()["telegram:7"] != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d messages, want %d", chat.count()["telegram:7"], want)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	ask := func() string {
		t.Helper()
		resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm x"), Segments: segs("rm", "/usr/bin/rm"), Settings: gatewaySettings})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetApproval().GetId()
	}
	first, stopFirst := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = (&notify.Notifier{Store: s.store, Convert: approvalTo, Sender: s.cfg.Sender, Name: "first", SessionTTL: 5}).Run(first)
	}()
	answered := ask()
	waitCount(1)
	stopFirst()
	<-done
	if _, err := s.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: answered, Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
		t.Fatal(err)
	}
	second, stopSecond := context.WithCancel(ctx)
	defer stopSecond()
	go func() {
		_ = (&notify.Notifier{Store: s.store, Convert: approvalTo, Sender: s.cfg.Sender, Name: "second", SessionTTL: 5}).Run(second)
	}()
	waitCount(2)
	chat.mu.Lock()
	outcome := chat.msgs["telegram:7"][1]
	chat.mu.Unlock()
	if !strings.Contains(outcome, "Exec approval "+answered+": allowed") {
		t.Fatalf("second message %q, want the outcome of %s", outcome, answered)
	}
	ask()
	waitCount(3)
	ask()
	waitCount(4)
}

// Long commands are judged whole; one too long to review is refused rather
// than put to a human.
func TestLongCommands(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	always := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, Security: approvalv1.Security_SECURITY_FULL, Ask: approvalv1.Ask_ASK_ALWAYS}
	long := "rm -rf " + strings.Repeat("a", 200<<10)
	resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding(long), Segments: segs("rm", "/usr/bin/rm"), Settings: always})
	if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ASK || resp.GetApproval().GetCommand() != long {
		t.Fatalf("200 KiB command: %v %v", resp.GetDecision(), err)
	}
	got, err := s.GetApproval(ctx, &approvalv1.GetApprovalRequest{Id: resp.GetApproval().GetId()})
	if err != nil || got.GetApproval().GetCommand() != long {
		t.Fatalf("stored long command: %v", err)
	}
	huge := "rm -rf " + strings.Repeat("a", 300<<10)
	resp, err = s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding(huge), Segments: segs("rm", "/usr/bin/rm"), Settings: always})
	if err != nil || resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_DENY || !strings.HasPrefix(resp.GetReason(), policy.ErrNotAllowed) {
		t.Fatalf("300 KiB command: %v %q %v", resp.GetDecision(), resp.GetReason(), err)
	}
	ev, err := s.Evaluate(ctx, &approvalv1.EvaluateRequest{Command: "ls " + strings.Repeat("b", 2<<20), Host: approvalv1.Host_HOST_GATEWAY, Cwd: "/"})
	if err != nil || ev.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_DENY {
		t.Fatalf("2 MiB command: %v %v", ev.GetDecision(), err)
	}
}

func TestForwardingValidation(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	tests := []struct {
		name string
		cfg  *approvalv1.ForwardingConfig
		want string
	}{
		{"session is no target", &approvalv1.ForwardingConfig{Targets: []*approvalv1.ForwardTarget{{Channel: approvalv1.Channel_CHANNEL_SESSION, To: "s1"}}}, "want webhook, slack or telegram"},
		{"session is no approver channel", &approvalv1.ForwardingConfig{Approvers: []*approvalv1.Approver{{Channel: approvalv1.Channel_CHANNEL_SESSION, Id: "s1"}}}, "session's own user"},
		{"approver without id", &approvalv1.ForwardingConfig{Approvers: []*approvalv1.Approver{{Channel: approvalv1.Channel_CHANNEL_SLACK}}}, "channel and id required"},
		{"webhook target not a URL", &approvalv1.ForwardingConfig{Targets: []*approvalv1.ForwardTarget{{Channel: approvalv1.Channel_CHANNEL_WEBHOOK, To: "file:///etc/passwd"}}}, "http"},
		{"bad session filter", &approvalv1.ForwardingConfig{SessionFilter: "/(/"}, "session_filter"},
	}
	for _, tt := range tests {
		_, err := s.PutForwarding(ctx, &approvalv1.PutForwardingRequest{Config: tt.cfg})
		if errs.KindOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want InvalidArgument with %q", tt.name, err, tt.want)
		}
	}
}

// A session answers only its own approvals, and only in mode session or
// both.
func TestSessionChatCommands(t *testing.T) {
	t.Parallel()
	s, ctx := newServer(t)
	put := func(mode approvalv1.ForwardMode) {
		t.Helper()
		if _, err := s.PutForwarding(ctx, &approvalv1.PutForwardingRequest{Config: &approvalv1.ForwardingConfig{Enabled: true, Mode: mode}}); err != nil {
			t.Fatal(err)
		}
	}
	put(approvalv1.ForwardMode_FORWARD_MODE_SESSION)
	resp, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm x"), Segments: segs("rm", "/usr/bin/rm"), Settings: gatewaySettings})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetApproval().GetId()
	in := func(session string) context.Context {
		sc, _ := tenant.From(ctx)
		sc.Session = session
		return tenant.With(ctx, sc)
	}
	cmd := func(ctx context.Context, from string) error {
		_, err := s.HandleChatCommand(ctx, &approvalv1.HandleChatCommandRequest{Channel: approvalv1.Channel_CHANNEL_SESSION, From: from, Text: "/approve " + id + " allow-once"})
		return err
	}
	if err := cmd(in("s2"), "s2"); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("another session: %v, want NotFound", err)
	}
	if err := cmd(in("s2"), "s1"); errs.KindOf(err) != errs.PermissionDenied {
		t.Fatalf("claiming another session: %v, want PermissionDenied", err)
	}
	put(approvalv1.ForwardMode_FORWARD_MODE_TARGETS)
	if err := cmd(in("s1"), "s1"); errs.KindOf(err) != errs.FailedPrecondition {
		t.Fatalf("mode targets: %v, want FailedPrecondition", err)
	}
	put(approvalv1.ForwardMode_FORWARD_MODE_BOTH)
	if err := cmd(in("s1"), "s1"); err != nil {
		t.Fatalf("own session: %v", err)
	}
}

// The skill dirs are where sandboxes put the commands of moved tools.
func TestDefaultSkillDirsAreTheSandboxTools(t *testing.T) {
	if !slices.Contains(DefaultSkillDirs, wire.ToolsDir) {
		t.Fatalf("DefaultSkillDirs %v lack the sandbox's %s", DefaultSkillDirs, wire.ToolsDir)
	}
}
