package executor

import (
	"context"
	"fmt"
	"slices"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/gate"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/executor/hostexec"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/sandbox/fsview"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/router/accounts"
)

// target is where one command runs, built once per command: a sandbox,
// the executor's own machine (host gateway) or a paired node. It holds
// everything that depends on the host, so that the exec policy judges
// the command against the same filesystem, PATH and directory it then
// runs with.
type target struct {
	// e is the command's sandbox; outside a sandbox, the sandbox that
	// keeps its process records, or nil.
	e *entry
	// dir is the absolute directory the command is judged and runs in.
	dir string
	// resolver finds programs as the command's shell will; digest binds
	// an approval to a resolved file's content.
	resolver policy.Resolver
	digest   func(path string) (string, error)
	// home is where a bare cd goes; "" refuses it.
	home string
	// start starts the command.
	start func(sandbox.Options) (proc, error)
}

// target builds where p runs for account.
func (s *Service) target(ctx context.Context, account string, p *ExecParams) (*target, error) {
	t := &target{}
	if p.Host != approvalv1.Host_HOST_NODE && (!p.outside() || p.SandboxID != "") {
		// A command to a paused sandbox resumes it.
		e, err := s.Resume(ctx, account, p.SandboxID)
		if err != nil {
			return nil, err
		}
		t.e = e
	}
	switch p.Host {
	case approvalv1.Host_HOST_GATEWAY:
		if err := s.gatewayAllowed(ctx, account, p.Settings); err != nil {
			return nil, err
		}
		// The command runs on this machine: its programs are resolved,
		// and bound by content, against this filesystem and the PATH the
		// command gets.
		path := append(slices.Clone(p.PathPrepend), policy.SplitPath(hostexec.DefaultPath)...)
		t.resolver, t.digest = policy.PathResolver{Path: path}, gate.FileDigest
		t.dir = s.gatewayDir(p.Workdir)
		t.start = func(o sandbox.Options) (proc, error) { return s.gateway.Start(o) }
	case approvalv1.Host_HOST_NODE:
		c, err := s.node(ctx, account, p.Node)
		if err != nil {
			return nil, err
		}
		// A node's commands are not recorded here: the process tool's
		// calls go to the sandbox's executor, not the node's.
		if p.Background {
			return nil, errs.New(errs.InvalidArgument, "background: not available for commands on a node")
		}
		// The node resolves and digests programs on its own filesystem.
		r := c.Resolver(ctx, p.PathPrepend)
		t.resolver, t.digest = r, r.Digest
		t.dir = c.Dir(p.Workdir)
		timeout := p.Timeout
		t.start = func(o sandbox.Options) (proc, error) { return c.Start(timeout, o) }
	default:
		// The command runs in the sandbox: its programs are resolved, and
		// bound by content, in the sandbox's own filesystem and PATH,
		// through its mounts and symlinks as it sees them, never the
		// executor's. It is judged and run in one directory, whatever
		// another command's cd does meanwhile.
		sb := t.e.sb
		r := sb.Resolver(p.PathPrepend)
		t.resolver, t.digest, t.home = r, sandboxDigest(r.View), wire.WorkspaceDir
		t.dir = sb.Dir(p.Workdir)
		t.start = func(o sandbox.Options) (proc, error) { return sb.Start(o) }
	}
	return t, nil
}

// authorize asks the approval service whether p may run at t, telling ev
// while a human decides. It returns the refusal, with the policy's exact
// error string, or the plan that runs in place of the command ("" runs it
// as written).
func (s *Service) authorize(ctx context.Context, account string, t *target, p *ExecParams, ev ExecEvents) (plan, refusal string, err error) {
	if !execpolicy.Needed(p.Host, p.Settings) && !s.documentMayDeny(account, p.Agent) {
		return "", "", nil
	}
	if s.approvals == nil {
		return "", policy.ErrNotAllowed + ": no approval service to ask", nil
	}
	v, err := gate.Check(ctx, s.approvals, gate.Request{
		Resolver: t.resolver, Digest: t.digest, Home: t.home,
		Binding: &approvalv1.Binding{
			Command: p.Command, Cwd: t.dir, Env: p.Env, Host: p.Host, Node: p.Node,
			Agent: p.Agent, Session: p.Session, User: p.User,
		},
		Settings:  p.Settings,
		OnPending: func(a *approvalv1.Approval) { _ = ev.ApprovalPending(a) },
		Preview:   t.preview(s, account, p),
	})
	if err != nil {
		return "", "", err
	}
	if !v.Allowed {
		return "", v.Reason, nil
	}
	return v.Plan, "", nil
}

// preview returns how to preview p at t before a human is asked: on a
// copy of its sandbox, for a sandbox command only.
func (t *target) preview(s *Service, account string, p *ExecParams) func(context.Context) *approvalv1.Preview {
	if t.e == nil || p.outside() {
		return nil
	}
	return func(ctx context.Context) *approvalv1.Preview { return s.preview(ctx, account, t.e, p, t.dir) }
}

// documentMayDeny reports whether the account's exec-approvals document
// may hold deny rules for agent: the sandbox's full/off default skips the
// approval service only when a watch of the documents says none applies.
// Without an approval service there is no document to hold any.
func (s *Service) documentMayDeny(account, agent string) bool {
	if s.approvals == nil {
		return false
	}
	if s.denyRules == nil {
		return true
	}
	has, ok := s.denyRules.HasDenyRules(account, agent)
	return has || !ok
}

// sandboxDigest binds an approval to the content of a sandbox's file, read
// through the sandbox's view. Files the sandbox cannot change (the system
// dirs, the agent and the binary its tool commands link to) are not
// hashed.
func sandboxDigest(v *fsview.View) func(string) (string, error) {
	return func(p string) (string, error) {
		real, err := v.Resolve(p)
		if err != nil {
			return "", fmt.Errorf("executor: digest %s: %w", p, err)
		}
		if gate.SystemFile(real) || real == wire.AgentPath || real == wire.ToolPath {
			return "", nil
		}
		f, err := v.Open(real)
		if err != nil {
			return "", fmt.Errorf("executor: digest %s: %w", p, err)
		}
		defer f.Close()
		d, err := gate.ReadDigest(f)
		if err != nil {
			return "", fmt.Errorf("executor: digest %s: %w", p, err)
		}
		return d, nil
	}
}

// gatewayAllowed refuses a command on the gateway host unless the
// operator turned the host on, an admin granted it to account, and the
// command's security is one the operator allows there. The grant is read
// now, so a revoked one holds from the next command.
func (s *Service) gatewayAllowed(ctx context.Context, account string, settings *approvalv1.ExecSettings) error {
	if s.gateway == nil {
		return errGatewayOff
	}
	ok, err := accounts.HasGrant(ctx, s.etcd, account, accounts.GrantGatewayHost)
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "host gateway: reading the account's grants")
	}
	if !ok {
		return accounts.ErrNotGranted(account, accounts.GrantGatewayHost)
	}
	if settings.GetSecurity() == approvalv1.Security_SECURITY_FULL && !s.gatewayFull {
		return errs.New(errs.PermissionDenied, "host gateway: security full is not allowed on this executor's host (the operator's --gateway-host-full); use allowlist")
	}
	return nil
}
