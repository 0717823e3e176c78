package ui_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/conchtest"
	"github.com/conch-sh/conch/services/internal/display/displaytest"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/grpcserver"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/router"
)

const apiKey = "page-test-key-0123456789"

// stack is the router's HTTP handler in front of a real approval service
// over embedded etcd.
type stack struct {
	url   string
	svc   *approval.Server
	store *store.Store
	ctx   context.Context // the account's call scope
}

func startStack(t *testing.T) *stack {
	t.Helper()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	signer, err := tenant.NewSigner("internal-secret-for-the-page-test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(cli, approval.KeyPrefix, sealtest.Keyring(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := approval.New(st, approval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpcserver.New(grpcserver.Options{
		Name:               "approval",
		UnaryInterceptors:  []grpc.UnaryServerInterceptor{signer.UnaryServerInterceptor()},
		StreamInterceptors: []grpc.StreamServerInterceptor{signer.StreamServerInterceptor()},
	})
	svc.Register(gs.GRPC())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Shutdown(context.WithoutCancel(ctx)) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(signer.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rsvc, err := router.New(ctx, cli, router.Config{AdminKey: apiKey, AdminAccount: "dev", KeyConfig: seal.KeyConfig{SecretsKey: sealtest.KeyText(t)}}, outbound.Must(outbound.Options{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	conns := map[string]*grpc.ClientConn{}
	for _, n := range router.ServiceNames {
		conns[n] = conn
	}
	responses, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := router.NewHTTPHandler(ctx, router.HTTPOptions{Etcd: cli, Service: rsvc, Conns: conns, Metrics: http.NotFoundHandler(), ResponseObjects: responses})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &stack{url: srv.URL, svc: svc, store: st, ctx: tenant.With(ctx, tenant.Scope{Account: "dev", Session: "chat-1", Key: "key-test"})}
}

// ask creates a pending approval the way an executor would.
func (s *stack) ask(t *testing.T, cmd string) string {
	t.Helper()
	resp, err := s.svc.Authorize(s.ctx, &approvalv1.AuthorizeRequest{
		Binding:  &approvalv1.Binding{Command: cmd, Cwd: "/home/workspace", Host: approvalv1.Host_HOST_GATEWAY, Agent: "default", Session: "chat-1"},
		Segments: []*approvalv1.Segment{{Argv: []string{"rm"}, ResolvedPath: "/usr/bin/rm"}},
		Settings: &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ASK {
		t.Fatalf("authorize %q: %v", cmd, resp)
	}
	return resp.GetApproval().GetId()
}

func (s *stack) state(t *testing.T, id string) approvalv1.ApprovalState {
	t.Helper()
	a, err := s.svc.GetApproval(s.ctx, &approvalv1.GetApprovalRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return a.GetApproval().GetState()
}

func (s *stack) resolvedBy(t *testing.T, id string) string {
	t.Helper()
	a, err := s.svc.GetApproval(s.ctx, &approvalv1.GetApprovalRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return a.GetApproval().GetResolvedBy()
}

func browser(t *testing.T) context.Context { return conchtest.Browser(t) }

// waitFor polls a JavaScript expression in the page until it is true.
func waitFor(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#status").textContent`))
		t.Fatalf("waiting for %s: %v (status %q)", expr, err, status)
	}
}

func text(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return s
}

func TestApprovalsPageInChromium(t *testing.T) {
	s := startStack(t)
	long := "rm -rf " + strings.Repeat("build/very/deep/path/", 300) + "END-OF-LONG-COMMAND"
	spoof := "rm -rf /home/workspace/\u202egnp.exe\u202c \u200bhidden"
	idLong := s.ask(t, long)
	idSpoof := s.ask(t, spoof)
	// A control character cannot reach an approval through the policy
	// (it is refused first); one stored anyway must still show escaped.
	now := time.Now()
	raw := &store.Approval{ID: "ctrl-1", Account: "dev", Command: "ls\x1b[2K\rrm -rf /", Cwd: "/", Agent: "default", Host: "gateway",
		Security: "allowlist", CreatedAt: now, ExpiresAt: now.Add(time.Minute), Binding: "x"}
	if err := s.store.Create(s.ctx, raw, time.Minute); err != nil {
		t.Fatal(err)
	}

	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/ui/approvals#key="+apiKey)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelectorAll("li.approval").length === 3`)
	if h := text(t, ctx, `location.hash`); h != "" {
		t.Errorf("the key stays in the address bar: %q", h)
	}

	cmdOf := func(id string) string {
		return text(t, ctx, fmt.Sprintf(`document.querySelector('li.approval[data-id=%q] pre.command').textContent`, id))
	}
	if got := cmdOf(idLong); got != long {
		t.Errorf("long command shown as %d chars, want all %d", len(got), len(long))
	}
	// The page must not cut long commands visually either.
	if clipped := text(t, ctx, fmt.Sprintf(`(() => { const el = document.querySelector('li.approval[data-id=%q] pre.command'); return String(el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1); })()`, idLong)); clipped != "false" {
		t.Error("the long command is clipped")
	}
	if got := cmdOf(idSpoof); got != `rm -rf /home/workspace/\u202egnp.exe\u202c \u200bhidden` {
		t.Errorf("spoofed command shown as %q", got)
	}
	if got := cmdOf("ctrl-1"); got != `ls\x1b[2K\x0drm -rf /` {
		t.Errorf("control characters shown as %q", got)
	}
	if n := text(t, ctx, fmt.Sprintf(`String(document.querySelectorAll('li.approval[data-id=%q] pre.command .escaped').length)`, idSpoof)); n != "3" {
		t.Errorf("%s escapes highlighted in the spoofed command, want 3", n)
	}

	// Each approval says per command why it waits.
	if seg := text(t, ctx, fmt.Sprintf(`document.querySelector('li.approval[data-id=%q] ul.segments').textContent`, idSpoof)); !strings.Contains(seg, "/usr/bin/rm: ask") || !strings.Contains(seg, "not in the allowlist") {
		t.Errorf("segments shown as %q", seg)
	}

	// A new approval appears without a reload.
	idNew := s.ask(t, "rm -rf dist")
	waitFor(t, ctx, fmt.Sprintf(`!!document.querySelector('li.approval[data-id=%q]')`, idNew))

	click := func(id, cls string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`li.approval[data-id=%q] button.%s`, id, cls)))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, fmt.Sprintf(`!document.querySelector('li.approval[data-id=%q]')`, id))
	}
	click(idNew, "allow-once")
	if st := s.state(t, idNew); st != approvalv1.ApprovalState_APPROVAL_STATE_ALLOWED {
		t.Fatalf("after allow once: %v", st)
	}
	// The page's answer is recorded against the key it used, on the web.
	if by := s.resolvedBy(t, idNew); by != "key:admin via web" {
		t.Errorf("resolved_by = %q, want the page's key", by)
	}
	click(idLong, "deny")
	if st := s.state(t, idLong); st != approvalv1.ApprovalState_APPROVAL_STATE_DENIED {
		t.Fatalf("after deny: %v", st)
	}
	click(idSpoof, "allow-always")
	waitFor(t, ctx, `[...document.querySelectorAll("#allowlist td.pattern")].some(td => td.textContent === "/usr/bin/rm")`)

	// Allowlist editing: a bare name is refused with the policy's message.
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#pattern"), "rg"), chromedp.Click(chromedp.CSS(`#add-form button`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelector("#status").textContent.includes("Pattern does not resolve to binary")`)
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#pattern"), "/opt/tools/bin/*"), chromedp.Click(chromedp.CSS(`#add-form button`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `[...document.querySelectorAll("#allowlist td.pattern")].some(td => td.textContent === "/opt/tools/bin/*")`)
	list, err := s.svc.ListAllowlist(s.ctx, &approvalv1.ListAllowlistRequest{Agent: "default"})
	if err != nil || len(list.GetEntries()) != 2 {
		t.Fatalf("allowlist after adding: %v %v", list, err)
	}
	rm := list.GetEntries()[0].GetId()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#allowlist tr[data-id=%q] button.remove`, rm)))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, fmt.Sprintf(`!document.querySelector('#allowlist tr[data-id=%q]')`, rm))
	list, _ = s.svc.ListAllowlist(s.ctx, &approvalv1.ListAllowlistRequest{Agent: "default"})
	if len(list.GetEntries()) != 1 || list.GetEntries()[0].GetPattern() != "/opt/tools/bin/*" {
		t.Fatalf("allowlist after removing: %v", list.GetEntries())
	}
}

// The page shows every field of an approval escaped as every other
// surface does, checked with the shared table.
func TestApprovalsPageEscapesTheSharedTable(t *testing.T) {
	s := startStack(t)
	now := time.Now()
	var cases []displaytest.Case
	for _, tc := range displaytest.Cases {
		if !tc.ValidUTF8() {
			continue // the REST API carries only valid UTF-8
		}
		cases = append(cases, tc)
		// Stored directly: the policy would refuse most of these before
		// asking, and the page must still show any that got through.
		a := &store.Approval{ID: fmt.Sprintf("case-%02d", len(cases)), Account: "dev", Command: tc.In, Cwd: tc.In, Agent: tc.In, Host: "gateway",
			Security: "allowlist", Session: tc.In, CreatedAt: now, ExpiresAt: now.Add(time.Minute), Binding: "x"}
		if err := s.store.Create(s.ctx, a, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/ui/approvals#key="+apiKey)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, fmt.Sprintf(`document.querySelectorAll("li.approval").length === %d`, len(cases)))
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]map[string]any](`[...document.querySelectorAll("li.approval")].map(li => ({
		id: li.dataset.id,
		command: li.querySelector("pre.command").textContent,
		fields: Object.fromEntries([...li.querySelectorAll("dt")].map(dt => [dt.textContent, dt.nextElementSibling.textContent])),
	}))`))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]map[string]any{}
	for _, a := range got {
		byID[a["id"].(string)] = a
	}
	for i, tc := range cases {
		a := byID[fmt.Sprintf("case-%02d", i+1)]
		if a == nil {
			t.Errorf("%s: not shown", tc.Name)
			continue
		}
		if a["command"] != tc.Want {
			t.Errorf("%s: command shown as %q, want %q", tc.Name, a["command"], tc.Want)
		}
		fields := a["fields"].(map[string]any)
		for _, f := range []string{"cwd", "agent", "session"} {
			if fields[f] != tc.Want {
				t.Errorf("%s: %s shown as %q, want %q", tc.Name, f, fields[f], tc.Want)
			}
		}
	}
}
