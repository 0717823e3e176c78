package completion

import (
	"context"
	"errors"
	"net/http"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/sessions"
	"github.com/conch-sh/conch/services/router/toolhost"
	"github.com/conch-sh/conch/services/router/upstream"
)

// Toolbox is a gateway's server tools opened for a client that calls
// them itself instead of through a model (an MCP session): the tools a
// completion of the gateway would offer, planned once, and the session's
// sandbox, kept while the session lives and idle-ended as every
// session's is.
type Toolbox struct {
	svc   *Service
	scope tenant.Scope
	g     *routerv1.Gateway
	req   *Request
	plan  *toolPlan
	set   *toolhost.Set
	ready func(context.Context, string) error
	gone  func(context.Context, string)
}

// OpenToolbox plans g's tools for the session scope.Session of the caller
// in scope, for user ("" for none): the shell when the gateway offers it
// or lets a request ask for it, exec and process with it unless the
// gateway's exec security is deny, the gateway's direct tools and
// read_skill. Close releases what it holds.
func (s *Service) OpenToolbox(ctx context.Context, scope tenant.Scope, g *routerv1.Gateway, user string) (*Toolbox, error) {
	if scope.Session == "" {
		return nil, errors.New("completion: a toolbox needs a session")
	}
	req := toolboxRequest(g, user)
	t := &Toolbox{svc: s, scope: scope, g: g, req: req}
	if hasServerTools(g) {
		set, err := toolhost.Build(ctx, g, s.opts.ToolDeps)
		if err != nil {
			return nil, &upstream.Error{Status: http.StatusBadGateway, Type: "upstream_error", Code: "tools_unavailable", Message: "gateway " + g.GetName() + ": " + err.Error()}
		}
		t.set = set
	}
	plan, err := planTools(g, t.set, req, nil)
	if err != nil {
		t.closeSet()
		return nil, err
	}
	t.plan = plan
	t.ready, t.gone = s.grantHooks(scope.Account, g, plan)
	return t, nil
}

// toolboxRequest is what a toolbox asks of g, as a request would: the
// shell unless the gateway lets no request ask for it, with exec and
// process unless its exec security runs nothing.
func toolboxRequest(g *routerv1.Gateway, user string) *Request {
	req := &Request{Model: g.GetName(), User: user}
	sh := g.GetShell()
	// allow_request is true unless set: ask for presence first.
	if sh.GetEnabled() || sh == nil || sh.AllowRequest == nil || sh.GetAllowRequest() {
		req.Shell, req.ShellField = &ShellTool{}, "shell"
		req.Exec = g.GetExec().GetSecurity() != approvalv1.Security_SECURITY_DENY
	}
	return req
}

// Tools are the tools offered, as a model would see them.
func (t *Toolbox) Tools() []upstream.Tool { return t.plan.tools }

// Shell is the shell's default limits, nil when the shell is not offered.
func (t *Toolbox) Shell() *loop.Shell {
	if t.plan.shell == nil {
		return nil
	}
	sh := *t.plan.shell
	return &sh
}

// Persistent says whether /home/workspace is the user's persistent
// workspace.
func (t *Toolbox) Persistent() bool { return t.plan.persistent }

// User is the user whose workspace a persistent session uses.
func (t *Toolbox) User() string { return t.req.User }

// sandbox is the session's sandbox, found or created on first use.
func (t *Toolbox) sandbox() *sessions.Sandbox {
	return t.svc.sessions.Sandbox(t.svc.opts.Executor, t.plan.sandboxRequest(t.g, t.req), t.g, t.scope.Account, t.scope.Session, t.ready, t.svc.opts.Logger)
}

// SandboxID returns the session's sandbox, creating it when there is
// none, for calls that work on its files.
func (t *Toolbox) SandboxID(ctx context.Context) (string, error) { return t.sandbox().ID(ctx) }

// Call runs one call of the tool name with its JSON arguments and returns
// the result a model would receive; ok is false for a tool not offered.
// shell, when set, replaces the shell's limits for this call. ev, when
// set, hears pending approvals and keep-alives.
func (t *Toolbox) Call(ctx context.Context, name, arguments string, shell *loop.Shell, ev loop.Events) (result string, ok bool) {
	cfg := loop.Config{
		Executor: t.svc.opts.Executor,
		Sandbox:  t.sandbox(),
		Shell:    t.plan.shell,
		Exec: loop.ExecContext{
			Settings: sessions.Effective(t.g.GetExec(), sessions.Override{}),
			Agent:    t.g.GetName(),
			Session:  t.scope.Session,
			User:     t.req.User,
		},
		Direct:     t.plan.direct,
		Skills:     t.plan.skills,
		ExecOutput: t.plan.execOutput,
		Logger:     t.svc.opts.Logger,
	}
	if shell != nil && cfg.Shell != nil {
		cfg.Shell = shell
	}
	if t.set != nil {
		cfg.Tools = t.set
	}
	return loop.CallTool(ctx, cfg, upstream.ToolCall{ID: "call_" + name, Name: name, Arguments: arguments}, ev)
}

// Close ends the session's sandbox and the gateway's tool connections.
func (t *Toolbox) Close(ctx context.Context) {
	defer t.closeSet()
	id, err := t.svc.sessions.End(ctx, t.svc.opts.Executor, t.scope.Account, t.g.GetName(), t.scope.Session, t.plan.sandboxRequest(t.g, t.req).GetUser())
	if err != nil {
		t.svc.opts.Logger.WarnContext(ctx, "session sandbox not ended", "session", t.scope.Session, "error", err)
	}
	if id != "" && t.gone != nil {
		t.gone(ctx, id)
	}
}

func (t *Toolbox) closeSet() {
	if t.set != nil {
		t.set.Close()
	}
}
