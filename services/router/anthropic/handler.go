// Package anthropic serves Anthropic's Messages API on the router
// (docs/reference/anthropic-api.md): POST /v1/messages, streamed and not,
// a front end over the completion core like the OpenAI APIs. Any
// gateway's upstream answers it; Anthropic's code execution tool runs in
// conch's sandbox, its calls shown as Anthropic shows its own, and the
// client's tools pass through to the client.
package anthropic

import (
	"log/slog"
	"net/http"
	"time"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"

	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/frontend"
	"github.com/conch-sh/conch/services/router/gateways"
)

// Handler serves /v1/messages.
type Handler struct {
	core   *completion.Service
	logger *slog.Logger
	mux    *http.ServeMux
	// now is the clock of containers' expires_at.
	now func() time.Time
	// pause is how long a request without a stream waits for an approval
	// before it answers pause_turn; 0: as long as the approval.
	pause time.Duration
}

// NewHandler returns the Messages API's handler over the completion
// service. Requests must carry the caller's tenant scope (the router's
// auth middleware sets it).
// A request without a stream that waits for an approval longer than pause
// answers stop_reason pause_turn; sent back, it goes on (loop's pause.go).
func NewHandler(core *completion.Service, pause time.Duration, logger *slog.Logger) *Handler {
	if logger == nil {
		logger = slog.Default()
	}
	h := &Handler{core: core, logger: logger, mux: http.NewServeMux(), now: time.Now, pause: pause}
	h.mux.HandleFunc("POST /v1/messages", h.messages)
	h.mux.HandleFunc("POST /v1/messages/count_tokens", h.countTokens)
	h.mux.HandleFunc("GET /v1/models", h.listModels)
	h.mux.HandleFunc("GET /v1/models/{model}", h.getModel)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		newError(http.StatusNotFound, "unknown path "+r.Method+" "+r.URL.Path).write(w)
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// begin admits a request (frontend.Admit), parses it (generate: for a
// message, which needs max_tokens) and finds its gateway. When it cannot,
// it has answered and ok is false; else release gives the slot back.
func (h *Handler) begin(w http.ResponseWriter, r *http.Request, generate bool) (release func(), scope tenant.Scope, req *request, g *routerv1.Gateway, ok bool) {
	release, scope, body, err := frontend.Admit(h.core, w, r)
	if err == nil {
		req, err = parse(body, generate)
	}
	if err == nil {
		g, err = h.core.Gateway(r.Context(), scope.Account, req.Model)
	}
	if err != nil {
		if release != nil {
			release()
		}
		errorOf(r.Context(), h.logger, err, "").write(w)
		return nil, scope, nil, nil, false
	}
	return release, scope, req, g, true
}

func (h *Handler) messages(w http.ResponseWriter, r *http.Request) {
	release, scope, req, g, ok := h.begin(w, r, true)
	if !ok {
		return
	}
	defer release()
	ctx := r.Context()
	// The message's own container outlives it, for the gateway's session
	// idle time, and a request naming it runs there again: Anthropic's
	// containers live on between requests.
	req.Keep = true
	// A call waiting for a human pauses a message without a stream, as
	// Anthropic pauses long server tools; a stream waits, kept alive.
	req.Resumable = true
	if !req.Stream {
		req.Pause = h.pause
	}
	idle := gateways.SessionIdle(g)
	id := "msg_" + frontend.RandomHex(12)
	if !req.Stream {
		res, err := h.core.Run(ctx, scope, g, &req.Request, nil)
		if err != nil {
			errorOf(ctx, h.logger, err, g.GetName()).write(w)
			return
		}
		defer res.End()
		frontend.WriteJSON(w, http.StatusOK, message(id, req.Model, res, containerOf(res, idle, h.now())))
		return
	}
	s := newStream(w, id, req.Model)
	res, err := h.core.Run(ctx, scope, g, &req.Request, s)
	if err != nil {
		e := errorOf(ctx, h.logger, err, g.GetName())
		if !s.started {
			e.write(w)
			return
		}
		s.fail(e)
		return
	}
	defer res.End()
	s.finish(res, containerOf(res, idle, h.now()))
}

// modelOf is a gateway as Anthropic's model object.
func modelOf(g *routerv1.Gateway) map[string]any {
	return map[string]any{"type": "model", "id": g.GetName(), "display_name": g.GetName(),
		"created_at": g.GetCreatedAt().AsTime().UTC().Format(time.RFC3339)}
}

// listModels lists the account's gateways as Anthropic's SDKs read a
// model list: all of them on one page.
func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		errorOf(r.Context(), h.logger, err, "").write(w)
		return
	}
	list, err := h.core.Gateways(r.Context(), account)
	if err != nil {
		errorOf(r.Context(), h.logger, err, "").write(w)
		return
	}
	data := make([]map[string]any, len(list))
	for i, g := range list {
		data[i] = modelOf(g)
	}
	page := map[string]any{"data": data, "has_more": false, "first_id": nil, "last_id": nil}
	if len(list) > 0 {
		page["first_id"], page["last_id"] = list[0].GetName(), list[len(list)-1].GetName()
	}
	frontend.WriteJSON(w, http.StatusOK, page)
}

func (h *Handler) getModel(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		errorOf(r.Context(), h.logger, err, "").write(w)
		return
	}
	g, err := h.core.Gateway(r.Context(), account, r.PathValue("model"))
	if err != nil {
		errorOf(r.Context(), h.logger, err, "").write(w)
		return
	}
	frontend.WriteJSON(w, http.StatusOK, modelOf(g))
}

// countTokens counts a request's input tokens as its gateway's upstream
// would see them, conch's tools included, when the upstream can count
// (Anthropic's); others answer 501.
func (h *Handler) countTokens(w http.ResponseWriter, r *http.Request) {
	release, scope, req, g, ok := h.begin(w, r, false)
	if !ok {
		return
	}
	defer release()
	ctx := r.Context()
	n, err := h.core.CountTokens(ctx, scope, g, &req.Request)
	if err != nil {
		errorOf(ctx, h.logger, err, g.GetName()).write(w)
		return
	}
	frontend.WriteJSON(w, http.StatusOK, map[string]any{"input_tokens": n})
}
