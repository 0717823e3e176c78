// Package openai serves the OpenAI-compatible API of the router
// (docs/reference/openai-api.md): GET /v1/models, POST /v1/chat/completions
// and the Responses API (/v1/responses), with and without streaming: thin
// front ends over the completion core, which runs conch's server tools in the
// agent loop.
package openai

import (
	"log/slog"
	"net/http"
	"time"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/frontend"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/responsestore"
	"github.com/conch-sh/conch/services/router/upstream"
)

// Handler serves /v1.
type Handler struct {
	core      *completion.Service
	responses *responsestore.Store
	logger    *slog.Logger
	mux       *http.ServeMux
}

// NewHandler returns the /v1 handler over the completion service. Requests
// must carry the caller's tenant scope (the router's auth middleware sets
// it).
func NewHandler(core *completion.Service, responses *responsestore.Store, logger *slog.Logger) *Handler {
	if logger == nil {
		logger = slog.Default()
	}
	h := &Handler{core: core, responses: responses, logger: logger, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /v1/models", h.listModels)
	h.mux.HandleFunc("GET /v1/models/{model}", h.getModel)
	h.mux.HandleFunc("POST /v1/chat/completions", h.chatCompletions)
	h.mux.HandleFunc("POST /v1/responses", h.createResponse)
	h.mux.HandleFunc("GET /v1/responses/{id}", h.getResponse)
	h.mux.HandleFunc("DELETE /v1/responses/{id}", h.deleteResponse)
	h.mux.HandleFunc("GET /v1/responses/{id}/input_items", h.listInputItems)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", "unknown path "+r.Method+" "+r.URL.Path)
	})
	return h
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
	list, err := h.core.Gateways(r.Context(), account)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	data := make([]model, len(list))
	for i, g := range list {
		data[i] = modelOf(g)
	}
	frontend.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (h *Handler) getModel(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	g, err := h.core.Gateway(r.Context(), account, r.PathValue("model"))
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	frontend.WriteJSON(w, http.StatusOK, modelOf(g))
}

// admit admits a request (frontend.Admit); when it cannot, it has
// answered and ok is false.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) (release func(), scope tenant.Scope, body []byte, ok bool) {
	release, scope, body, err := frontend.Admit(h.core, w, r)
	if err != nil {
		h.writeErr(w, r, err)
		return nil, scope, nil, false
	}
	return release, scope, body, true
}

func (h *Handler) chatCompletions(w http.ResponseWriter, r *http.Request) {
	release, scope, body, ok := h.admit(w, r)
	if !ok {
		return
	}
	defer release()
	ctx := r.Context()
	req, err := parseRequest(body)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	req.NoticesAsText = true
	g, err := h.core.Gateway(ctx, scope.Account, req.Model)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	id := "chatcmpl-" + frontend.RandomHex(12)
	created := time.Now().Unix()
	if !req.Stream {
		res, err := h.core.Run(ctx, scope, g, &req.Request, nil)
		if err != nil {
			h.errorOf(ctx, err, g.GetName()).write(w)
			return
		}
		defer res.End()
		frontend.WriteJSON(w, http.StatusOK, chatCompletion(id, created, req.Model, res))
		return
	}
	s := newSSE(w, id, created, req.Model)
	res, err := h.core.Run(ctx, scope, g, &req.Request, s)
	if err != nil {
		if !s.started {
			h.errorOf(ctx, err, g.GetName()).write(w)
			return
		}
		s.fail(h.errorOf(ctx, err, g.GetName()))
		return
	}
	defer res.End()
	s.finish(res)
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
	// Egress lists the sandbox's connections through the egress proxy;
	// absent for a sandbox without network.
	Egress        []loop.EgressConnection `json:"egress,omitempty"`
	EgressOmitted int                     `json:"egress_omitted,omitempty"`
	// Workspace says, when the request named a user, whether the
	// shell's workspace was that user's persistent one, and why not.
	Workspace *completion.Workspace `json:"workspace,omitempty"`
}

func conchOf(cres *completion.Result) conchOut {
	res := cres.Result
	calls := res.ServerToolCalls
	if calls == nil {
		calls = []loop.ServerToolCall{}
	}
	return conchOut{ServerToolCalls: calls, Egress: res.Egress, EgressOmitted: res.EgressOmitted, Workspace: cres.Workspace}
}

// chatCompletionOut is a chat.completion object, encoded from types
// rather than through a generic tree of maps.
type chatCompletionOut struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Choices []choiceOut `json:"choices"`
	Usage   usageOut    `json:"usage"`
	Conch   conchOut    `json:"conch"`
}

type choiceOut struct {
	Index        int        `json:"index"`
	Message      messageOut `json:"message"`
	FinishReason string     `json:"finish_reason"`
	Logprobs     *struct{}  `json:"logprobs"`
}

type messageOut struct {
	Role      string        `json:"role"`
	Content   *string       `json:"content"`
	Refusal   *string       `json:"refusal"`
	ToolCalls []toolCallOut `json:"tool_calls,omitempty"`
}

func chatCompletion(id string, created int64, model string, cres *completion.Result) chatCompletionOut {
	res := cres.Result
	msg := messageOut{Role: "assistant"}
	if res.Content != "" || len(res.ToolCalls) == 0 {
		msg.Content = &res.Content
	}
	if len(res.ToolCalls) > 0 {
		msg.ToolCalls = toolCallsOut(res.ToolCalls, false)
	}
	return chatCompletionOut{
		ID: id, Object: "chat.completion", Created: created, Model: model,
		Choices: []choiceOut{{Index: 0, Message: msg, FinishReason: res.FinishReason}},
		Usage:   usageOf(res),
		Conch:   conchOf(cres),
	}
}
