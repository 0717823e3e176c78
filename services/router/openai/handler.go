// Package openai serves the OpenAI-compatible API of the router (SPEC §3):
// GET /v1/models and POST /v1/chat/completions, with and without streaming,
// running conch's server tools in the agent loop.
package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/toolhost"
	"github.com/conch-sh/conch/services/router/upstream"
)

// maxBody bounds a request body: a 1 MiB command in a long conversation
// fits many times over.
const maxBody = 32 << 20

// gatewayStore is what the handler needs of the gateway store.
type gatewayStore interface {
	Get(ctx context.Context, account, name string) (*routerv1.Gateway, error)
	List(ctx context.Context, account string) ([]*routerv1.Gateway, error)
}

// Options configure the handler.
type Options struct {
	Gateways gatewayStore
	Executor executorv1.ExecutorServiceClient
	// Etcd keeps session sandboxes and /exec overrides.
	Etcd *clientv3.Client
	// Grants lets sandboxes call the tools moved into them.
	Grants *toolhost.Grants
	// ToolDeps are the HTTP clients of server tools.
	ToolDeps toolhost.Deps
	// HTTPClient calls upstreams; nil means a client with conch's defaults.
	HTTPClient *http.Client
	Retry      upstream.RetryPolicy
	Logger     *slog.Logger
	// Approvals answers /approve in a session's conversation; nil leaves
	// such messages to the model.
	Approvals approvalv1.ApprovalServiceClient
	// MaxConcurrent bounds the completions this router runs at once;
	// beyond, a completion is refused at once with 503 and Retry-After
	// rather than queued. Zero means DefaultMaxConcurrent.
	MaxConcurrent int
}

// DefaultMaxConcurrent is the default bound on concurrent completions.
const DefaultMaxConcurrent = 512

// Handler serves /v1.
type Handler struct {
	opts     Options
	sessions *sessionStore
	turns    *turnStore
	mux      *http.ServeMux
	running  chan struct{} // one token per running completion
}

// NewHandler returns the /v1 handler. Requests must carry the caller's
// tenant scope (the router's auth middleware sets it).
func NewHandler(opts Options) (*Handler, error) {
	if opts.Gateways == nil || opts.Executor == nil || opts.Etcd == nil || opts.Grants == nil {
		return nil, errors.New("openai: Gateways, Executor, Etcd and Grants are required")
	}
	if opts.ToolDeps.HTTP == nil {
		opts.ToolDeps.HTTP = opts.HTTPClient
	}
	if opts.HTTPClient == nil {
		// Upstreams take many concurrent completions: keep enough idle
		// connections per host that a busy gateway does not reconnect.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 256
		opts.HTTPClient = &http.Client{Transport: tr}
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
	h := &Handler{opts: opts, sessions: &sessionStore{cli: opts.Etcd}, turns: &turnStore{cli: opts.Etcd}, mux: http.NewServeMux(), running: make(chan struct{}, opts.MaxConcurrent)}
	h.mux.HandleFunc("GET /v1/models", h.listModels)
	h.mux.HandleFunc("GET /v1/models/{model}", h.getModel)
	h.mux.HandleFunc("POST /v1/chat/completions", h.chatCompletions)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", "unknown path "+r.Method+" "+r.URL.Path)
	})
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func modelOf(g *routerv1.Gateway) model {
	return model{ID: g.GetName(), Object: "model", Created: g.GetCreatedAt().GetSeconds(), OwnedBy: "conch"}
}

func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	list, err := h.opts.Gateways.List(r.Context(), account)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	data := make([]model, len(list))
	for i, g := range list {
		data[i] = modelOf(g)
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

func (h *Handler) getModel(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	g, err := h.gateway(r.Context(), account, r.PathValue("model"))
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	writeJSON(w, modelOf(g))
}

func (h *Handler) gateway(ctx context.Context, account, name string) (*routerv1.Gateway, error) {
	g, err := h.opts.Gateways.Get(ctx, account, name)
	if errs.KindOf(err) == errs.NotFound {
		return nil, &requestError{Status: http.StatusNotFound, Code: "model_not_found",
			Msg: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", name)}
	}
	return g, err
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (h *Handler) provider(g *routerv1.Gateway) upstream.Provider {
	u := g.GetUpstream()
	switch u.GetProvider() {
	case routerv1.Provider_PROVIDER_OPENAI:
		return &upstream.OpenAI{BaseURL: u.GetBaseUrl(), APIKey: u.GetApiKey(), Client: h.opts.HTTPClient, Retry: h.opts.Retry}
	case routerv1.Provider_PROVIDER_ANTHROPIC:
		return &upstream.Anthropic{BaseURL: u.GetBaseUrl(), APIKey: u.GetApiKey(), Client: h.opts.HTTPClient, Retry: h.opts.Retry}
	default:
		return upstream.Scripted{}
	}
}

func (h *Handler) chatCompletions(w http.ResponseWriter, r *http.Request) {
	select {
	case h.running <- struct{}{}:
		defer func() { <-h.running }()
	default:
		w.Header().Set("Retry-After", errs.RetryAfter(codes.Unavailable))
		writeError(w, http.StatusServiceUnavailable, "server_error", "overloaded",
			fmt.Sprintf("this router is running its limit of %d completions; retry in a few seconds", cap(h.running)))
		return
	}
	ctx := r.Context()
	scope, ok := tenant.From(ctx)
	if !ok {
		h.writeErr(w, r, errs.New(errs.Unauthenticated, "no account"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", fmt.Sprintf("request body is larger than %d bytes", maxBody))
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	g, err := h.gateway(ctx, scope.Account, req.Model)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if text, ok := execCommand(req); ok {
		h.execCommand(w, r, scope, g, req, text)
		return
	}
	if text, ok := approveCommand(req); ok && h.opts.Approvals != nil {
		h.approve(w, r, scope, req, text)
		return
	}
	var set *toolhost.Set
	if hasServerTools(g) {
		if set, err = toolhost.Build(ctx, g, h.opts.ToolDeps); err != nil {
			writeError(w, http.StatusBadGateway, "upstream_error", "tools_unavailable", "gateway "+g.GetName()+": "+err.Error())
			return
		}
		defer set.Close()
	}
	plan, err := planTools(g, set, req)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	var override execOverride
	if scope.Session != "" {
		if override, err = h.sessions.override(ctx, scope.Account, g.GetName(), scope.Session); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	timeout := time.Duration(g.GetUpstream().GetTimeoutSeconds()) * time.Second
	if timeout == 0 {
		timeout = 300 * time.Second
	}

	hooks := h.grantHooks(scope.Account, g, plan)
	var sb completionSandbox = &sandbox{exec: h.opts.Executor, req: plan.sandboxRequest(g, req), hooks: hooks}
	if scope.Session != "" {
		sb = h.sessions.sandbox(h.opts.Executor, plan.sandboxRequest(g, req), g, scope.Account, scope.Session, hooks, h.opts.Logger)
	}
	// A completion's own sandbox ends with it, even when the client left;
	// the client need not wait for the teardown.
	defer func() { go sb.destroy(context.WithoutCancel(ctx), h.opts.Logger) }()

	cfg := loop.Config{
		Provider: h.provider(g),
		Executor: h.opts.Executor,
		Sandbox:  sb,
		Shell:    plan.shell,
		Exec: loop.ExecContext{
			Settings: effective(g.GetExec(), override),
			Agent:    g.GetName(),
			Session:  scope.Session,
			User:     req.User,
		},
		Direct:        plan.direct,
		Skills:        plan.skills,
		ExecOutput:    plan.execOutput,
		MaxIterations: int(g.GetMaxIterations()),
		Logger:        h.opts.Logger,
	}
	if set != nil {
		cfg.Tools = set
	}
	messages, err := h.turns.splice(ctx, scope.Account, g.GetName(), req.User, req.Messages)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	ureq := &upstream.Request{Model: g.GetUpstream().GetModel(), Messages: messages, Tools: plan.tools, Extra: req.Extra}
	id := "chatcmpl-" + randomHex(12)
	created := time.Now().Unix()

	callCtx, cancel := context.WithTimeout(ctx, timeout*time.Duration(max(1, cfg.MaxIterations)))
	defer cancel()
	if !req.Stream {
		res, err := loop.Run(callCtx, cfg, ureq, nil)
		if err != nil {
			h.errorOf(ctx, err, g.GetName()).write(w)
			return
		}
		h.keepTurn(ctx, scope.Account, g.GetName(), req.User, res)
		writeJSON(w, completion(id, created, req.Model, res))
		return
	}
	s := newSSE(w, id, created, req.Model)
	var ev loop.Events = s
	if h.opts.Approvals != nil && scope.Session != "" {
		ev = &sessionEvents{sse: s, ctx: ctx, approvals: h.opts.Approvals}
	}
	res, err := loop.Run(callCtx, cfg, ureq, ev)
	if err != nil {
		if !s.started {
			h.errorOf(ctx, err, g.GetName()).write(w)
			return
		}
		s.fail(h.errorOf(ctx, err, g.GetName()))
		return
	}
	h.keepTurn(ctx, scope.Account, g.GetName(), req.User, res)
	s.finish(res)
}

// keepTurn keeps a turn that ended on client tool calls after server tools
// ran, for the client's next request. The tools have run by now: failing
// the completion would only make the client run them again, so a turn
// that cannot be kept is logged, and the next request sees what the
// client sends.
func (h *Handler) keepTurn(ctx context.Context, account, gateway, user string, res *loop.Result) {
	if err := h.turns.save(ctx, account, gateway, user, res); err != nil {
		h.opts.Logger.ErrorContext(ctx, "server tool calls of a turn not kept for the next request", "account", account, "gateway", gateway, "error", err)
	}
}

// grantHooks record, while a sandbox lives, that it may call the tools
// moved into it.
func (h *Handler) grantHooks(account string, g *routerv1.Gateway, plan *toolPlan) sandboxHooks {
	if len(plan.moved) == 0 {
		return sandboxHooks{}
	}
	grant := toolhost.Grant{Account: account, Gateway: g.GetName()}
	for _, t := range plan.moved {
		grant.Tools = append(grant.Tools, t.Name)
	}
	ttl := time.Duration(max(g.GetShell().GetSessionIdleSeconds(), defaultSessionIdle))*time.Second + time.Hour
	return sandboxHooks{
		ready: func(ctx context.Context, id string) error { return h.opts.Grants.Put(ctx, id, grant, ttl) },
		gone: func(ctx context.Context, id string) {
			if err := h.opts.Grants.Delete(ctx, id); err != nil {
				h.opts.Logger.WarnContext(ctx, "tool grant delete failed", "sandbox", id, "error", err)
			}
		},
	}
}

// hasServerTools reports whether g defines server-executable tools.
func hasServerTools(g *routerv1.Gateway) bool {
	t := g.GetTools()
	b := t.GetBuiltins()
	return len(t.GetWebhooks()) > 0 || len(t.GetMcpServers()) > 0 || b.GetRequest() || b.GetOpenUrl() || b.GetWebSearch()
}

// completionSandbox is the sandbox of a completion: its own, or its
// session's.
type completionSandbox interface {
	loop.Sandbox
	destroy(ctx context.Context, log *slog.Logger)
}

// execCommand returns the text of a last user message that is an /exec
// command.
func execCommand(req *chatRequest) (string, bool) {
	last := req.Messages[len(req.Messages)-1]
	text := strings.TrimSpace(last.Content)
	if last.Role != "user" || (text != "/exec" && !strings.HasPrefix(text, "/exec ")) {
		return "", false
	}
	return text, true
}

// execCommand sets or shows the session's exec overrides without calling
// the model.
func (h *Handler) execCommand(w http.ResponseWriter, r *http.Request, scope tenant.Scope, g *routerv1.Gateway, req *chatRequest, text string) {
	ctx := r.Context()
	var answer string
	if scope.Session == "" {
		answer = "/exec needs a session: send the X-Conch-Session-Id header to keep overrides for a conversation."
	} else {
		o, err := h.sessions.override(ctx, scope.Account, g.GetName(), scope.Session)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		if text == "/exec" {
			answer = "Session exec settings: " + describe(effective(g.GetExec(), o)) + "."
		} else if o, err = applyExecCommand(text, g.GetExec(), o); err != nil {
			answer = "/exec refused: " + err.Error() + ". Session exec settings unchanged: " + describe(effective(g.GetExec(), o)) + "."
		} else if err := h.sessions.setOverride(ctx, scope.Account, g.GetName(), scope.Session, o); err != nil {
			h.writeErr(w, r, err)
			return
		} else {
			answer = "Session exec settings now: " + describe(effective(g.GetExec(), o)) + "."
		}
	}
	h.answer(w, req, answer)
}

// answer replies with text as the assistant, without calling the model.
func (h *Handler) answer(w http.ResponseWriter, req *chatRequest, answer string) {
	res := &loop.Result{Content: answer, FinishReason: "stop"}
	id, created := "chatcmpl-"+randomHex(12), time.Now().Unix()
	if !req.Stream {
		writeJSON(w, completion(id, created, req.Model, res))
		return
	}
	s := newSSE(w, id, created, req.Model)
	if s.Delta(answer) == nil {
		s.finish(res)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}

// wire types of the response.

type toolCallOut struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func toolCallsOut(calls []upstream.ToolCall, indexed bool) []toolCallOut {
	out := make([]toolCallOut, len(calls))
	for i, c := range calls {
		out[i].ID, out[i].Type = c.ID, "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, c.Arguments
		if indexed {
			out[i].Index = &i
		}
	}
	return out
}

type usageOut struct {
	upstream.Usage
	ServerToolUse struct {
		ShellCommands int `json:"shell_commands"`
	} `json:"server_tool_use"`
}

func usageOf(res *loop.Result) usageOut {
	u := usageOut{Usage: res.Usage}
	u.ServerToolUse.ShellCommands = res.ShellCommands
	return u
}

type conchOut struct {
	ServerToolCalls []loop.ServerToolCall `json:"server_tool_calls"`
}

func conchOf(res *loop.Result) conchOut {
	calls := res.ServerToolCalls
	if calls == nil {
		calls = []loop.ServerToolCall{}
	}
	return conchOut{ServerToolCalls: calls}
}

func completion(id string, created int64, model string, res *loop.Result) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if res.Content != "" || len(res.ToolCalls) == 0 {
		msg["content"] = res.Content
	}
	if len(res.ToolCalls) > 0 {
		msg["tool_calls"] = toolCallsOut(res.ToolCalls, false)
	}
	return map[string]any{
		"id":      id,
		"object":  "chat.completion",
		"created": created,
		"model":   model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": res.FinishReason, "logprobs": nil}},
		"usage":   usageOf(res),
		"conch":   conchOf(res),
	}
}
