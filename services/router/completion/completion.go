// Package completion runs one completion of a gateway, whatever API it
// came through (chat completions, responses): it admits it, answers the
// in-conversation commands /exec and /approve, plans the tools, finds the
// sandbox, and runs the agent loop against the upstream model. The HTTP
// front ends parse their API's request into a Request and render the
// Result; everything else is here, once.
package completion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/gateways"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/sessions"
	"github.com/conch-sh/conch/services/router/toolhost"
	"github.com/conch-sh/conch/services/router/upstream"
)

// GatewayStore is what the service needs of the gateway store.
type GatewayStore interface {
	Get(ctx context.Context, account, name string) (*routerv1.Gateway, error)
	List(ctx context.Context, account string) ([]*routerv1.Gateway, error)
}

// Options configure the service.
type Options struct {
	Gateways GatewayStore
	Executor executorv1.ExecutorServiceClient
	// Etcd keeps session sandboxes and /exec overrides.
	Etcd *clientv3.Client
	// Turns keeps mixed turns; nil keeps none.
	Turns TurnKeeper
	// Grants lets sandboxes call the tools moved into them.
	Grants *toolhost.Grants
	// ToolDeps are the HTTP clients of server tools.
	ToolDeps toolhost.Deps
	// HTTPClient calls upstreams, through the outbound guard (package
	// outbound).
	HTTPClient *http.Client
	Retry      upstream.RetryPolicy
	Logger     *slog.Logger
	// Approvals answers /approve in a session's conversation; nil leaves
	// such messages to the model.
	Approvals approvalv1.ApprovalServiceClient
	// Skills finds the skills requests name; nil refuses requests that
	// name any.
	Skills SkillSource
	// MaxConcurrent bounds the completions this router runs at once;
	// beyond, a completion is refused at once rather than queued. Zero
	// means DefaultMaxConcurrent.
	MaxConcurrent int
}

// DefaultMaxConcurrent is the default bound on concurrent completions.
const DefaultMaxConcurrent = 512

// Service runs completions.
type Service struct {
	opts     Options
	sessions *sessions.Store
	turns    *turnStore
	running  chan struct{} // one token per running completion
}

// New returns the service.
func New(opts Options) (*Service, error) {
	if opts.Gateways == nil || opts.Executor == nil || opts.Etcd == nil || opts.Grants == nil || opts.HTTPClient == nil {
		return nil, errors.New("completion: Gateways, Executor, Etcd, Grants and HTTPClient are required")
	}
	if opts.Retry.Attempts == 0 {
		opts.Retry = upstream.DefaultRetry
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	return &Service{opts: opts, sessions: sessions.New(opts.Etcd), turns: &turnStore{keeper: opts.Turns}, running: make(chan struct{}, opts.MaxConcurrent)}, nil
}

// ErrOverloaded is the error of a completion refused because this router
// runs its limit of them.
type ErrOverloaded struct{ Limit int }

func (e ErrOverloaded) Error() string {
	return fmt.Sprintf("this router is running its limit of %d completions; retry in a few seconds", e.Limit)
}

// Admit takes one of the router's completion slots, or refuses at once
// with ErrOverloaded; release gives the slot back.
func (s *Service) Admit() (release func(), err error) {
	select {
	case s.running <- struct{}{}:
		return func() { <-s.running }, nil
	default:
		return nil, ErrOverloaded{Limit: cap(s.running)}
	}
}

// Gateway returns the account's gateway of that name; an unknown one is
// OpenAI's 404 model_not_found.
func (s *Service) Gateway(ctx context.Context, account, name string) (*routerv1.Gateway, error) {
	g, err := s.opts.Gateways.Get(ctx, account, name)
	if errs.KindOf(err) == errs.NotFound {
		return nil, &FieldError{Status: http.StatusNotFound, Code: "model_not_found",
			Msg: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", name)}
	}
	return g, err
}

// Gateways lists the account's gateways.
func (s *Service) Gateways(ctx context.Context, account string) ([]*routerv1.Gateway, error) {
	return s.opts.Gateways.List(ctx, account)
}

// Request is one completion, parsed from whichever API it came through.
type Request struct {
	// Model names the gateway.
	Model    string
	Messages []upstream.Message
	// ClientTools are the client's function tools: calls to them end the
	// completion for the client to answer.
	ClientTools []upstream.Tool
	// Shell is the request's shell tool entry, nil when it gave none;
	// ShellField is where, for errors ("tools[2]").
	Shell      *ShellTool
	ShellField string
	// ShellLocal says the client runs the shell tool's commands: a shell
	// call ends the completion for the client to answer, as OpenAI's
	// shell tool with a local environment does.
	ShellLocal bool
	// Container is the sandbox (a container of the Containers API) the
	// shell runs in; empty: the completion's own, or its session's.
	// ContainerField is where it was named, for errors.
	Container      string
	ContainerField string
	// Skills are mounted in the sandbox the completion creates;
	// SkillsField is where the request named them ("container.skills").
	Skills      []SkillRef
	SkillsField string
	// Keep leaves the completion's own sandbox running when it ends, for
	// the gateway's session idle time: a container of the Responses API,
	// which the response names and a continuation uses again (OpenAI keeps
	// a container for its idle lifetime).
	Keep bool
	// Continue is the sandbox of the conversation this completion
	// continues: the shell runs in it while it runs, else in a new one.
	Continue string
	// Exec asks for the rich exec and process tools.
	Exec bool
	// Editor offers the file editor beside the shell (Anthropic's code
	// execution tool has one), when the shell runs in conch's sandbox.
	Editor bool
	// Resumable lets a completion end with loop.PauseTurn and go on when
	// the client sends its turn back (loop's pause.go): a command waiting
	// for an approval longer than Pause is parked. Pause zero: a command
	// waits as long as its approval does (a stream).
	Resumable bool
	Pause     time.Duration
	// User is the end user: the owner of a persistent workspace, and the
	// scope of kept turns.
	User string
	// Extra holds the client's other top-level fields, passed upstream.
	Extra map[string]json.RawMessage
	// NoticesAsText streams a pending approval that the account forwards
	// to sessions as text asking for /approve, for clients that show only
	// text.
	NoticesAsText bool
	// Finish, when set, runs with a completion's result before its own
	// sandbox is torn down: what the answer still waits for (storing a
	// response) then does not compete with the teardown for etcd and the
	// CPU. A completion that fails does not call it.
	Finish func(ctx context.Context, res *Result)
}

// ShellTool is the limits a request sets on its shell tool; nil fields are
// the gateway's.
type ShellTool struct {
	MaxUses         *int64
	TimeoutSeconds  *int64
	MaxOutputLength *int64
	// Network narrows the gateway's network; nil keeps it.
	Network *ShellNetwork
}

// ShellNetwork is a request's narrowing of its gateway's network
// allowlist: never wider, or the request is refused naming the field.
type ShellNetwork struct {
	// AllowedDomains is a subset of the gateway's; nil keeps them, empty
	// allows none (no network).
	AllowedDomains []string
	// Ports is a subset of the gateway's; nil keeps them.
	Ports []int32
}

// FieldError is a request the client must fix: a 400 (or Status) naming
// the field.
type FieldError struct {
	Status int
	Field  string
	Msg    string
	Code   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// BadField is a 400 naming field.
func BadField(field, format string, args ...any) *FieldError {
	return &FieldError{Status: http.StatusBadRequest, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// reservedTools are the names of conch's own tools, which client tools may
// not take.
var reservedTools = map[string]bool{"shell": true, "exec": true, "process": true, "read_skill": true, loop.EditorTool: true}

var clientToolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckClientTool checks the name of a client tool given at field, on
// every API: 1-64 characters of [A-Za-z0-9_-], none of conch's own tools'
// names, and not one already in seen, which it joins.
func CheckClientTool(field, name string, seen map[string]bool) error {
	switch {
	case !clientToolName.MatchString(name):
		return BadField(field, "must be 1-64 characters of [A-Za-z0-9_-], got %q", name)
	case reservedTools[name]:
		return BadField(field, "%q is reserved for conch's server tools", name)
	case seen[name]:
		return BadField(field, "%q is defined twice", name)
	}
	seen[name] = true
	return nil
}

// Result is a completion's outcome.
type Result struct {
	*loop.Result
	// Sandbox is the sandbox the shell ran in, "" when none was made.
	Sandbox string
	// Workspace is what the completion says of the user's workspace, nil
	// when it named no user or ran no shell.
	Workspace *Workspace
	// Skills are the skills the request named, as mounted.
	Skills []MountedSkill
	// end ends the completion's own sandbox; nil when there is none.
	end func()
}

// End ends the completion's own sandbox, in the background. The caller
// calls it once the answer is sent (written and flushed), so that the
// teardown, which kills the sandbox's processes and tears down its
// namespaces and mounts, takes no CPU from the answer on its way out. It
// may be deferred right after Run returns: a handler's deferred calls run
// after its writes. It does nothing the second time, or on nil.
func (r *Result) End() {
	if r != nil && r.end != nil {
		r.end()
		r.end = nil
	}
}

// Run runs one completion of g for the caller in scope. ev receives what a
// streaming client sees; nil for a completion answered in one piece. The
// caller holds a slot from Admit.
func (s *Service) Run(ctx context.Context, scope tenant.Scope, g *routerv1.Gateway, req *Request, ev loop.Events) (*Result, error) {
	if text, ok := lastUserCommand(req, "/exec"); ok {
		answer, err := s.execCommand(ctx, scope, g, text)
		res, err := reply(answer, err, ev)
		return finish(ctx, req, res, err)
	}
	if text, ok := lastUserCommand(req, "/approve"); ok && s.opts.Approvals != nil {
		answer, err := s.approve(ctx, scope, text)
		res, err := reply(answer, err, ev)
		return finish(ctx, req, res, err)
	}
	var set *toolhost.Set
	if hasServerTools(g) {
		var err error
		if set, err = toolhost.Build(ctx, g, s.opts.ToolDeps); err != nil {
			return nil, &upstream.Error{Status: http.StatusBadGateway, Type: "upstream_error", Code: "tools_unavailable", Message: "gateway " + g.GetName() + ": " + err.Error()}
		}
		defer set.Close()
	}
	named, err := s.mountSkills(ctx, scope.Account, req)
	if err != nil {
		return nil, err
	}
	fromGateway, err := s.gatewaySkills(ctx, scope.Account, g, req)
	if err != nil {
		return nil, err
	}
	mounted := append(named[:len(named):len(named)], fromGateway...)
	if len(mounted) > contract.MaxSandboxSkills {
		return nil, BadField(req.SkillsField, "a sandbox mounts at most %d skills; with gateway %q's %d, this request names %d", contract.MaxSandboxSkills, g.GetName(), len(fromGateway), len(named))
	}
	plan, err := planTools(g, set, req, mounted)
	if err != nil {
		return nil, err
	}
	// goOnIn is a completion going on in a running sandbox: what it names
	// must be there, and the model is told of the skills that are.
	goOnIn := func(sb *executorv1.Sandbox, what string) error {
		if err := keptSkills(req, named, sb, what); err != nil {
			return err
		}
		if kept := inSandbox(mounted, sb); len(kept) != len(mounted) {
			mounted = kept
			plan, err = planTools(g, set, req, mounted)
		}
		return err
	}
	var override sessions.Override
	if scope.Session != "" {
		if override, err = s.sessions.Override(ctx, scope.Account, g.GetName(), scope.Session); err != nil {
			return nil, err
		}
	}

	ready, gone := s.grantHooks(scope.Account, g, plan)
	own := &sandbox{exec: s.opts.Executor, req: plan.sandboxRequest(g, req), ready: ready, gone: gone, log: s.opts.Logger}
	var sb completionSandbox = own
	var continued *executorv1.Sandbox // the running sandbox of the conversation continued
	if req.Container == "" && scope.Session == "" && req.Continue != "" {
		continued = s.sandboxRunning(ctx, req.Continue)
	}
	switch {
	case req.Container != "":
		if sb, err = s.container(ctx, req); err != nil {
			return nil, err
		}
	case scope.Session != "":
		if len(mounted) > 0 {
			live, err := s.sessions.Live(ctx, s.opts.Executor, scope.Account, g.GetName(), scope.Session, own.req.GetUser())
			if err != nil {
				return nil, err
			}
			if live != nil {
				if err := goOnIn(live, "the session's sandbox"); err != nil {
					return nil, err
				}
			}
		}
		sb = s.sessions.Sandbox(s.opts.Executor, plan.sandboxRequest(g, req), g, scope.Account, scope.Session, ready, s.opts.Logger)
	case continued != nil:
		if err := goOnIn(continued, "the container of the previous response,"); err != nil {
			return nil, err
		}
		sb = container(req.Continue)
	case req.Keep:
		// Kept: the executor ends it once idle (its tool grants expire
		// an hour after that).
		own.req.IdleTimeoutSeconds = int32(gateways.SessionIdle(g) / time.Second)
		sb = kept{own}
	}
	// A completion's own sandbox ends with it, even when the client left,
	// in the background: the client need not wait for the teardown. A
	// completion that succeeds hands that to its caller (Result.End), to
	// do once the answer is out; one that fails ends it here. The loop and
	// Finish have returned by then, so a completion that made no sandbox
	// has none to end and starts no goroutine for it.
	end := func() {
		if sb.Current() != "" {
			go sb.Destroy(context.WithoutCancel(ctx))
		}
	}
	defer func() {
		if end != nil {
			end()
		}
	}()

	cfg := loop.Config{
		Provider: s.provider(g),
		Executor: s.opts.Executor,
		Sandbox:  sb,
		Shell:    plan.shell,
		Exec: loop.ExecContext{
			Agent:   g.GetName(),
			Session: scope.Session,
			User:    req.User,
		},
		Editor:        plan.editor,
		Pause:         req.Pause,
		Direct:        plan.direct,
		Skills:        plan.skills,
		ExecOutput:    plan.execOutput,
		MaxIterations: int(g.GetMaxIterations()),
		Logger:        s.opts.Logger,
	}
	if plan.shell != nil || plan.execOutput > 0 {
		// Only commands are judged by the exec settings.
		cfg.Exec.Settings = sessions.Effective(g.GetExec(), override)
	}
	if set != nil {
		cfg.Tools = set
	}
	if req.Resumable && s.opts.Turns != nil {
		cfg.Parker = &parker{keeper: s.opts.Turns, account: scope.Account, gateway: g.GetName(), user: req.User, log: s.opts.Logger}
	}
	messages, err := s.turns.splice(ctx, scope.Account, g.GetName(), req.User, req.Messages)
	if err != nil {
		return nil, err
	}
	ureq := &upstream.Request{Model: g.GetUpstream().GetModel(), Messages: messages, Tools: plan.tools, Extra: req.Extra}
	if ev != nil && req.NoticesAsText && s.opts.Approvals != nil && scope.Session != "" {
		ev = &sessionEvents{Events: ev, ctx: ctx, approvals: s.opts.Approvals}
	}

	callCtx, cancel := context.WithTimeout(ctx, gateways.UpstreamTimeout(g)*time.Duration(max(1, cfg.MaxIterations)))
	defer cancel()
	res, err := loop.Run(callCtx, cfg, ureq, ev)
	if err != nil {
		return nil, err
	}
	s.keepTurn(ctx, scope.Account, g.GetName(), req.User, res)
	out := &Result{Result: res, Sandbox: sb.Current(), Workspace: plan.workspace, Skills: mounted, end: end}
	end = nil
	return finish(ctx, req, out, nil)
}

// finish runs req.Finish on a completion that succeeded.
func finish(ctx context.Context, req *Request, res *Result, err error) (*Result, error) {
	if err == nil && req.Finish != nil {
		req.Finish(ctx, res)
	}
	return res, err
}

// keepTurn keeps a turn that ended on client tool calls after server tools
// ran, for the client's next request. The tools have run by now: failing
// the completion would only make the client run them again, so a turn
// that cannot be kept is logged, and the next request sees what the
// client sends.
func (s *Service) keepTurn(ctx context.Context, account, gateway, user string, res *loop.Result) {
	if err := s.turns.save(ctx, account, gateway, user, res); err != nil {
		s.opts.Logger.ErrorContext(ctx, "server tool calls of a turn not kept for the next request", "account", account, "gateway", gateway, "error", err)
	}
}

func (s *Service) provider(g *routerv1.Gateway) upstream.Provider {
	return upstream.For(g.GetUpstream(), s.opts.HTTPClient, s.opts.Retry)
}

// grantHooks record, while a sandbox lives, that it may call the tools
// moved into it.
func (s *Service) grantHooks(account string, g *routerv1.Gateway, plan *toolPlan) (ready func(context.Context, string) error, gone func(context.Context, string)) {
	if len(plan.moved) == 0 {
		return nil, nil
	}
	grant := toolhost.Grant{Account: account, Gateway: g.GetName()}
	for _, t := range plan.moved {
		grant.Tools = append(grant.Tools, t.Name)
	}
	ttl := gateways.SessionIdle(g) + time.Hour
	ready = func(ctx context.Context, id string) error { return s.opts.Grants.Put(ctx, id, grant, ttl) }
	gone = func(ctx context.Context, id string) {
		if err := s.opts.Grants.Delete(ctx, id); err != nil {
			s.opts.Logger.WarnContext(ctx, "tool grant delete failed", "sandbox", id, "error", err)
		}
	}
	return ready, gone
}

// hasServerTools reports whether g defines server-executable tools.
func hasServerTools(g *routerv1.Gateway) bool {
	t := g.GetTools()
	b := t.GetBuiltins()
	return len(t.GetWebhooks()) > 0 || len(t.GetMcpServers()) > 0 || b.GetRequest() || b.GetOpenUrl() || b.GetWebSearch()
}

// completionSandbox is the sandbox of a completion: its own, its
// session's, or a container's.
type completionSandbox interface {
	loop.Sandbox
	// Current is the sandbox's id once the completion has one, else "".
	Current() string
	Destroy(ctx context.Context)
}

// container is a sandbox the client made through the Containers API and
// named: it outlives the completion.
type container string

func (c container) ID(context.Context) (string, error) { return string(c), nil }
func (c container) Current() string                    { return string(c) }
func (container) Destroy(context.Context)              {}

// kept is a completion's own sandbox that outlives it (Request.Keep).
type kept struct{ *sandbox }

func (kept) Destroy(context.Context) {}

// sandboxRunning returns sandbox id when it is a running sandbox of the
// caller's account (the executor answers only for the account in the
// call's scope), else nil. A conversation's sandbox that ended is no
// error: the continuation gets a new one.
func (s *Service) sandboxRunning(ctx context.Context, id string) *executorv1.Sandbox {
	resp, err := s.opts.Executor.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
	if err != nil || resp.GetSandbox().GetState() != executorv1.SandboxState_SANDBOX_STATE_READY {
		return nil
	}
	return resp.GetSandbox()
}

// container checks that the request's container is a running sandbox of
// the caller's account (the executor answers only for the account in the
// call's scope: another account's is not found) before any model call.
func (s *Service) container(ctx context.Context, req *Request) (container, error) {
	resp, err := s.opts.Executor.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: req.Container})
	if errs.KindOf(err) == errs.NotFound || (err == nil && resp.GetSandbox().GetState() != executorv1.SandboxState_SANDBOX_STATE_READY) {
		return "", &FieldError{Status: http.StatusNotFound, Field: req.ContainerField, Code: "container_not_found",
			Msg: fmt.Sprintf("No running container found with id %q.", req.Container)}
	}
	if err != nil {
		return "", err
	}
	return container(req.Container), nil
}

// lastUserCommand returns the text of a last user message that is the
// in-conversation command cmd (e.g. "/exec key=value").
func lastUserCommand(req *Request, cmd string) (string, bool) {
	if len(req.Messages) == 0 {
		return "", false
	}
	last := req.Messages[len(req.Messages)-1]
	text := strings.TrimSpace(last.Content)
	if last.Role != "user" || (text != cmd && !strings.HasPrefix(text, cmd+" ")) {
		return "", false
	}
	return text, true
}

// execCommand sets or shows the session's exec overrides without calling
// the model, and says what it did.
func (s *Service) execCommand(ctx context.Context, scope tenant.Scope, g *routerv1.Gateway, text string) (string, error) {
	if scope.Session == "" {
		return "/exec needs a session: send the X-Conch-Session-Id header to keep overrides for a conversation.", nil
	}
	o, err := s.sessions.Override(ctx, scope.Account, g.GetName(), scope.Session)
	if err != nil {
		return "", err
	}
	if text == "/exec" {
		return "Session exec settings: " + sessions.Describe(sessions.Effective(g.GetExec(), o)) + ".", nil
	}
	if o, err = sessions.ApplyExecCommand(text, g.GetExec(), o); err != nil {
		return "/exec refused: " + err.Error() + ". Session exec settings unchanged: " + sessions.Describe(sessions.Effective(g.GetExec(), o)) + ".", nil
	}
	if err := s.sessions.SetOverride(ctx, scope.Account, g.GetName(), scope.Session, o); err != nil {
		return "", err
	}
	return "Session exec settings now: " + sessions.Describe(sessions.Effective(g.GetExec(), o)) + ".", nil
}

// approve answers one of the session's pending approvals from the
// conversation itself (forwarding mode session or both), without calling
// the model.
func (s *Service) approve(ctx context.Context, scope tenant.Scope, text string) (string, error) {
	if scope.Session == "" {
		return "/approve needs a session: send the X-Conch-Session-Id header of the conversation whose command asked.", nil
	}
	resp, err := s.opts.Approvals.HandleChatCommand(ctx, &approvalv1.HandleChatCommandRequest{
		Channel: approvalv1.Channel_CHANNEL_SESSION, From: scope.Session, Text: text,
	})
	if err != nil {
		return "/approve refused: " + status.Convert(err).Message() + ".", nil
	}
	return resp.GetReply(), nil
}

// reply is the result of a completion the service answered itself, as
// the assistant, without calling the model.
func reply(text string, err error, ev loop.Events) (*Result, error) {
	if err != nil {
		return nil, err
	}
	if ev != nil {
		if err := ev.Delta(text); err != nil {
			return nil, err
		}
	}
	return &Result{Result: &loop.Result{Content: text, FinishReason: "stop", Turn: []upstream.Message{{Role: "assistant", Content: text}}}}, nil
}

// CountTokens counts the input tokens of the first model call a
// completion of req would make: its conversation, with the turns kept for
// it, and every tool it would offer, skills' descriptions included. An
// upstream that cannot count (any but Anthropic's) is Unimplemented.
func (s *Service) CountTokens(ctx context.Context, scope tenant.Scope, g *routerv1.Gateway, req *Request) (int64, error) {
	counter, ok := s.provider(g).(upstream.TokenCounter)
	if !ok {
		return 0, errs.New(errs.Unimplemented, "gateway %q's upstream does not count tokens; send the request to /v1/messages and read its usage", g.GetName())
	}
	var set *toolhost.Set
	if hasServerTools(g) {
		var err error
		if set, err = toolhost.Build(ctx, g, s.opts.ToolDeps); err != nil {
			return 0, &upstream.Error{Status: http.StatusBadGateway, Type: "upstream_error", Code: "tools_unavailable", Message: "gateway " + g.GetName() + ": " + err.Error()}
		}
		defer set.Close()
	}
	named, err := s.mountSkills(ctx, scope.Account, req)
	if err != nil {
		return 0, err
	}
	fromGateway, err := s.gatewaySkills(ctx, scope.Account, g, req)
	if err != nil {
		return 0, err
	}
	plan, err := planTools(g, set, req, append(named, fromGateway...))
	if err != nil {
		return 0, err
	}
	messages, err := s.turns.splice(ctx, scope.Account, g.GetName(), req.User, req.Messages)
	if err != nil {
		return 0, err
	}
	return counter.CountTokens(ctx, &upstream.Request{Model: g.GetUpstream().GetModel(), Messages: messages, Tools: plan.tools, Extra: req.Extra})
}
