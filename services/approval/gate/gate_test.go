package gate_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/approval/gate"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/grpcserver"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// service runs the approval service over gRPC on a fixed loopback address
// so it can be restarted under the same client.
type service struct {
	t      *testing.T
	svc    *approval.Server
	signer *tenant.Signer
	addr   string
	srv    *grpcserver.Server
}

func (s *service) start() {
	s.t.Helper()
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	s.srv = grpcserver.New(grpcserver.Options{
		Name:               "approval",
		UnaryInterceptors:  []grpc.UnaryServerInterceptor{s.signer.UnaryServerInterceptor()},
		StreamInterceptors: []grpc.StreamServerInterceptor{s.signer.StreamServerInterceptor()},
		StopTimeout:        time.Second,
	})
	s.svc.Register(s.srv.GRPC())
	go func() { _ = s.srv.Serve(lis) }()
}

func setup(t *testing.T) (*service, approvalv1.ApprovalServiceClient, context.Context) {
	t.Helper()
	st, err := store.New(etcdxtest.StartForTest(t), approval.KeyPrefix, sealtest.Keyring(t))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := approval.New(st, approval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := tenant.NewSigner("internal-secret-for-gate-tests")
	if err != nil {
		t.Fatal(err)
	}
	s := &service{t: t, svc: svc, signer: signer, addr: "127.0.0.1:0"}
	s.start()
	t.Cleanup(func() { s.srv.Shutdown(context.WithoutCancel(t.Context())) })
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(signer.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := tenant.With(t.Context(), tenant.Scope{Account: "acct", Session: "s1", Key: "key-test"})
	if _, err := svc.AddAllowlistEntry(ctx, &approvalv1.AddAllowlistEntryRequest{Agent: "default", Pattern: "/usr/bin/ls"}); err != nil {
		t.Fatal(err)
	}
	return s, approvalv1.NewApprovalServiceClient(conn), ctx
}

func request(cmd string, settings *approvalv1.ExecSettings, onPending func(*approvalv1.Approval)) gate.Request {
	return gate.Request{
		Binding:   &approvalv1.Binding{Command: cmd, Cwd: "/", Host: approvalv1.Host_HOST_GATEWAY, Agent: "default", Session: "s1"},
		Settings:  settings,
		Resolver:  policy.PathResolver{Path: policy.SplitPath(policy.DefaultPath)},
		OnPending: onPending,
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	s, client, ctx := setup(t)
	gw := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY}

	v, err := gate.Check(ctx, client, request("ls -la /", gw, func(*approvalv1.Approval) { t.Error("an allowlisted command asked") }))
	if err != nil || !v.Allowed {
		t.Fatalf("allowlisted: %+v %v", v, err)
	}
	// A relative program after cd resolves where it really runs.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.AddAllowlistEntry(ctx, &approvalv1.AddAllowlistEntryRequest{Agent: "default", Pattern: dir + "/*"}); err != nil {
		t.Fatal(err)
	}
	v, err = gate.Check(ctx, client, request("cd "+dir+" && ./tool", gw, func(*approvalv1.Approval) { t.Error("an allowlisted tool asked") }))
	if err != nil || !v.Allowed {
		t.Fatalf("cd then relative tool: %+v %v", v, err)
	}
	v, err = gate.Check(ctx, client, request("ls > /etc/passwd", gw, nil))
	if err != nil || v.Allowed || v.Reason != policy.ErrUnsupportedToken+">" {
		t.Fatalf("redirect: %+v %v", v, err)
	}

	answer := func(decision approvalv1.ApprovalDecision) func(*approvalv1.Approval) {
		return func(a *approvalv1.Approval) {
			go func() {
				if _, err := s.svc.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: decision}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	v, err = gate.Check(ctx, client, request("rm -rf /tmp/x", gw, answer(approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE)))
	if err != nil || !v.Allowed || v.Approval.GetState() != approvalv1.ApprovalState_APPROVAL_STATE_ALLOWED {
		t.Fatalf("allowed once: %+v %v", v, err)
	}
	v, err = gate.Check(ctx, client, request("rm -rf /tmp/x", gw, answer(approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY)))
	if err != nil || v.Allowed || v.Reason != policy.ErrNotAllowed {
		t.Fatalf("denied: %+v %v", v, err)
	}
	quick := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, ApprovalTimeoutSeconds: 1}
	v, err = gate.Check(ctx, client, request("rm -rf /tmp/y", quick, nil))
	if err != nil || v.Allowed || v.Reason != policy.ErrTimeout {
		t.Fatalf("timeout: %+v %v", v, err)
	}
}

// A check whose caller leaves while a human decides ends the approval:
// it expires with the reason, and a late answer is a conflict.
func TestCheckAbandonsWhenTheCallerLeaves(t *testing.T) {
	t.Parallel()
	s, client, ctx := setup(t)
	for _, tc := range []struct {
		name   string
		end    func(context.CancelFunc)
		reason string
	}{
		{"cancelled", func(cancel context.CancelFunc) { cancel() }, "ended"},
		{"timed out", func(context.CancelFunc) {}, "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var id string
			v, err := gate.Check(cctx, client, request("rm -rf /tmp/"+tc.name, &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY}, func(a *approvalv1.Approval) {
				id = a.GetId()
				tc.end(cancel)
			}))
			if err == nil || v.Allowed {
				t.Fatalf("a check whose caller left: %+v %v", v, err)
			}
			got, err := s.svc.GetApproval(ctx, &approvalv1.GetApprovalRequest{Id: id})
			a := got.GetApproval()
			if err != nil || a.GetState() != approvalv1.ApprovalState_APPROVAL_STATE_EXPIRED || !strings.Contains(a.GetReason(), tc.reason) || a.GetResolvedBy() != "requester" {
				t.Fatalf("approval after the caller left: %v %v", a, err)
			}
			_, err = s.svc.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: id, Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE})
			if errs.KindOf(err) != errs.Conflict {
				t.Fatalf("answer after the caller left: %v, want conflict", err)
			}
		})
	}
}

// The wait survives the approval service restarting.
func TestCheckSurvivesRestart(t *testing.T) {
	t.Parallel()
	s, client, ctx := setup(t)
	restarted := make(chan struct{})
	var id string
	onPending := func(a *approvalv1.Approval) {
		id = a.GetId()
		go func() {
			defer close(restarted)
			s.srv.Shutdown(context.WithoutCancel(ctx))
			s.start()
			if _, err := s.svc.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
				t.Error(err)
			}
		}()
	}
	v, err := gate.Check(ctx, client, request("rm -rf /tmp/z", &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY}, onPending))
	<-restarted
	if err != nil || !v.Allowed || v.Approval.GetId() != id {
		t.Fatalf("after restart: %+v %v", v, err)
	}
}

// A script changed while the human decided does not run on the old
// approval (THREATS A10).
func TestApprovedScriptChanged(t *testing.T) {
	t.Parallel()
	s, client, ctx := setup(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "deploy.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho deploy\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(change bool) gate.Verdict {
		t.Helper()
		req := request("cd "+dir+" && ./deploy.sh", &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY}, func(a *approvalv1.Approval) {
			if change {
				if err := os.WriteFile(script, []byte("#!/bin/sh\nrm -rf ~\n"), 0o755); err != nil {
					t.Error(err)
				}
			}
			if _, err := s.svc.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
				t.Error(err)
			}
		})
		req.Digest = gate.FileDigest
		v, err := gate.Check(ctx, client, req)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := run(false); !v.Allowed {
		t.Fatalf("unchanged script: %+v", v)
	}
	v := run(true)
	if v.Allowed || !strings.HasPrefix(v.Reason, policy.ErrNotAllowed) {
		t.Fatalf("changed script: %+v", v)
	}
	if d, err := gate.FileDigest("/usr/bin/env"); err != nil || d != "" {
		t.Fatalf("system binary digest %q %v", d, err)
	}
}

// A bare cd goes to the home the shell has, and programs after it resolve
// there.
func TestSegmentsHome(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	segs := gate.Segments("cd && ./tool", "/", home, policy.PathResolver{})
	if len(segs) != 1 || segs[0].GetResolvedPath() != filepath.Join(home, "tool") {
		t.Fatalf("segments with a home: %v", segs)
	}
	if segs := gate.Segments("cd && ./tool", "/", "", policy.PathResolver{}); len(segs) != 0 {
		t.Fatalf("segments without a home: %v", segs)
	}
}

// Segments sends every program the command names, with the file a link
// really is, also for a command the policy will refuse, so that the
// approval service judges with what the caller's filesystem holds rather
// than finding nothing and asking.
func TestSegmentsResolveEveryProgram(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/bin/sh", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	r := policy.PathResolver{Path: []string{"/usr/bin", "/bin"}}
	segs := gate.Segments("./link -c 'ls' && ls | xargs git", dir, "", r)
	var names, real []string
	for _, s := range segs {
		names = append(names, s.GetArgv()[0])
		real = append(real, s.GetRealPath())
	}
	if got := strings.Join(names, " "); got != "./link ls ls xargs" {
		t.Errorf("programs sent: %q", got)
	}
	if len(real) == 0 || !strings.HasSuffix(real[0], "/dash") && !strings.HasSuffix(real[0], "/sh") && !strings.HasSuffix(real[0], "/bash") {
		t.Errorf("real path of the link: %q", real)
	}
}

// An allow-session answer lets the same commands run again in the same
// session without asking, and nowhere else; deny rules still win.
func TestAllowSession(t *testing.T) {
	t.Parallel()
	s, client, ctx := setup(t)
	answer := func(decision approvalv1.ApprovalDecision) func(*approvalv1.Approval) {
		return func(a *approvalv1.Approval) {
			go func() {
				if _, err := s.svc.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: decision}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	asked := func(t *testing.T) func(*approvalv1.Approval) {
		return func(*approvalv1.Approval) { t.Error("asked a human") }
	}
	check := func(cmd, session string, settings *approvalv1.ExecSettings, onPending func(*approvalv1.Approval)) gate.Verdict {
		t.Helper()
		req := request(cmd, settings, onPending)
		req.Binding.Session = session
		v, err := gate.Check(ctx, client, req)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	exact := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY}
	if v := check("rm -f /tmp/conch-session-a", "s1", exact, answer(approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_SESSION)); !v.Allowed {
		t.Fatalf("allow-session: %+v", v)
	}
	if v := check("rm -f /tmp/conch-session-a", "s1", exact, asked(t)); !v.Allowed {
		t.Fatalf("the same command in the same session: %+v", v)
	}
	// Another session, or other arguments, ask again.
	for _, tc := range []struct{ cmd, session string }{{"rm -f /tmp/conch-session-a", "s2"}, {"rm -f /tmp/conch-session-b", "s1"}} {
		v := check(tc.cmd, tc.session, exact, answer(approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY))
		if v.Allowed || v.Approval.GetState() != approvalv1.ApprovalState_APPROVAL_STATE_DENIED {
			t.Fatalf("%q in %s was not asked: %+v", tc.cmd, tc.session, v)
		}
	}
	// By shape: the same options, any operand.
	shape := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, ApprovalSessionByShape: true}
	if v := check("rm -f /tmp/conch-shape-a", "s3", shape, answer(approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_SESSION)); !v.Allowed {
		t.Fatalf("allow-session by shape: %+v", v)
	}
	if v := check("rm -f /tmp/conch-shape-b", "s3", shape, asked(t)); !v.Allowed {
		t.Fatalf("another operand, same shape: %+v", v)
	}
	if v := check("rm -rf /tmp/conch-shape-b", "s3", shape, answer(approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY)); v.Allowed {
		t.Fatalf("other options ran without asking: %+v", v)
	}
	// A deny rule wins over the grant.
	denied := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, Deny: []*approvalv1.DenyRule{{Id: "no-rm", Pattern: "/usr/bin/rm"}}}
	if v := check("rm -f /tmp/conch-session-a", "s1", denied, asked(t)); v.Allowed || !strings.Contains(v.Reason, "deny rule no-rm") {
		t.Fatalf("a deny rule over a session grant: %+v", v)
	}
	// An approval asked outside a session cannot be answered for one.
	v := check("rm -f /tmp/conch-nosession", "", exact, func(a *approvalv1.Approval) {
		go func() {
			_, err := s.svc.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_SESSION})
			if errs.KindOf(err) != errs.InvalidArgument {
				t.Errorf("allow-session without a session: %v", err)
			}
			_, _ = s.svc.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY})
		}()
	})
	if v.Allowed {
		t.Fatalf("without a session: %+v", v)
	}
}

// TestCheckEgress follows a network approval to each answer: allowed once,
// denied, expired, and allowed always (then asked no more).
func TestCheckEgress(t *testing.T) {
	t.Parallel()
	s, client, ctx := setup(t)
	// answer resolves the next pending approval of host:port.
	answer := func(target string, decision approvalv1.ApprovalDecision) {
		go func() {
			for ctx.Err() == nil {
				list, err := s.svc.ListApprovals(ctx, &approvalv1.ListApprovalsRequest{State: approvalv1.ApprovalState_APPROVAL_STATE_PENDING})
				if err != nil {
					if ctx.Err() == nil { // not the test ending under a late poll
						t.Error(err)
					}
					return
				}
				for _, a := range list.GetApprovals() {
					if a.GetEgress() == target {
						if _, err := s.svc.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: decision}); err != nil && ctx.Err() == nil {
							t.Error(err)
						}
						return
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	req := func(host string, timeout int32) *approvalv1.AuthorizeEgressRequest {
		return &approvalv1.AuthorizeEgressRequest{Agent: "default", Sandbox: "sb-1", Host: host, Port: 443, Session: "s1", TimeoutSeconds: timeout}
	}
	answer("once.example:443", approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE)
	if v, err := gate.CheckEgress(ctx, client, req("once.example", 0)); err != nil || !v.Allowed {
		t.Fatalf("allow-once: %+v %v", v, err)
	}
	answer("no.example:443", approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY)
	if v, err := gate.CheckEgress(ctx, client, req("no.example", 0)); err != nil || v.Allowed || !strings.HasPrefix(v.Reason, "denied by key:") {
		t.Fatalf("deny: %+v %v", v, err)
	}
	if v, err := gate.CheckEgress(ctx, client, req("late.example", 1)); err != nil || v.Allowed || v.Reason != "nobody answered in time" {
		t.Fatalf("timeout: %+v %v", v, err)
	}
	answer("always.example:443", approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ALWAYS)
	if v, err := gate.CheckEgress(ctx, client, req("always.example", 0)); err != nil || !v.Allowed {
		t.Fatalf("allow-always: %+v %v", v, err)
	}
	if v, err := gate.CheckEgress(ctx, client, req("always.example", 1)); err != nil || !v.Allowed || v.Approval != nil {
		t.Fatalf("after allow-always: %+v %v", v, err)
	}
}
