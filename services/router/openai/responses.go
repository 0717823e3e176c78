package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	grpcstatus "google.golang.org/grpc/status"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/frontend"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/responsestore"
	"github.com/conch-sh/conch/services/router/upstream"
)

// The Responses API (POST /v1/responses and the stored responses under
// /v1/responses/{id}) is a second front end over the completion core: it
// parses input items into the conversation, runs the same loop with the
// same tools, approvals and sandboxes as chat completions, and renders
// output items. With store (the default) a response, its input and what
// it added to the conversation are kept (responsestore) for the
// retention, so previous_response_id continues it on any router replica.

// storeTimeout bounds storing a response after it was computed.
const storeTimeout = 10 * time.Second

// loadThread reads the conversation up to the stored response id, named
// by field.
func (h *Handler) loadThread(ctx context.Context, account, id, field string) (*responsestore.Thread, error) {
	t, err := h.responses.Thread(ctx, account, id)
	return t, storedErr(err, id, field)
}

// storedErr is a read of the stored response id as the client is
// answered: one not found names the field that named it.
func storedErr(err error, id, field string) error {
	if responsestore.IsNotFound(err) {
		return &completion.FieldError{Status: http.StatusNotFound, Field: field, Code: "not_found",
			Msg: fmt.Sprintf("Response with id '%s' not found.", id)}
	}
	return err
}

func (h *Handler) createResponse(w http.ResponseWriter, r *http.Request) {
	release, scope, body, ok := h.admit(w, r)
	if !ok {
		return
	}
	defer release()
	ctx := r.Context()
	req, err := parseResponsesRequest(body)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	g, err := h.core.Gateway(ctx, scope.Account, req.Model)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	var prev *responsestore.Thread
	var history []upstream.Message
	if req.PreviousID != "" {
		if prev, err = h.loadThread(ctx, scope.Account, req.PreviousID, "previous_response_id"); err != nil {
			h.writeErr(w, r, err)
			return
		}
		history = upstream.LoadMessages(prev.Messages)
		prev.Messages = nil // in history now
	}
	input := req.Messages
	conv := append(history, input...)
	if err := checkCallIDs(conv); err != nil {
		h.writeErr(w, r, err)
		return
	}
	if req.Store {
		// Refused before the model runs when the response could not be
		// stored after it: no room in etcd, or none left in the
		// account's quotas.
		if err := h.responses.Check(ctx, scope.Account, prev); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	// The response's own container outlives it, as OpenAI's does, and a
	// continuation for the same user runs in its conversation's while
	// that runs.
	req.Keep = true
	if prev != nil && req.Container == "" && !req.ShellLocal && prev.User == req.User {
		req.Continue = prev.Container
	}
	req.Messages = conv
	if req.Instructions != nil && *req.Instructions != "" {
		req.Messages = append([]upstream.Message{{Role: "system", Content: *req.Instructions}}, conv...)
	}

	id := "resp_" + frontend.RandomHex(24)
	created := time.Now().Unix()
	obj := responseObject(id, created, req)
	var ev loop.Events
	var s *responseStream
	if req.Stream {
		s = newResponseStream(w, obj, &itemIDs{response: id}, newShellView("", shellLimitsOf(g, req), req.ShellLocal, req.Shell != nil))
		ev = s
		if s.begin() != nil {
			return
		}
	}
	// The response is rendered, and stored, before the completion's
	// sandbox is torn down: the client waits for the store, the teardown
	// runs in the background.
	var notStored apiError
	req.Finish = func(ctx context.Context, res *completion.Result) {
		sh := newShellView(res.Sandbox, shellLimitsOf(g, req), req.ShellLocal, req.Shell != nil)
		finish(obj, res, outputItems(res, &itemIDs{response: id}, sh))
		if !req.Store {
			return
		}
		// What this response adds to the conversation: its input, and
		// the turn it ran.
		added := upstream.StoreMessages(append(input[:len(input):len(input)], res.Turn...))
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer cancel()
		turn := responsestore.Turn{Messages: added, Container: res.Sandbox, User: req.User}
		if err := h.responses.Put(sctx, scope.Account, id, prev, &responsestore.Response{Response: obj, Input: req.Input}, turn); err != nil {
			h.logger.ErrorContext(ctx, "response not stored", "account", scope.Account, "response", id, "error", err)
			notStored = notStoredError(id, err)
			obj["status"] = "failed"
			obj["error"] = map[string]any{"code": notStored.Code, "message": notStored.Message}
		}
	}
	res, err := h.core.Run(ctx, scope, g, &req.Request, ev)
	if err != nil {
		e := h.errorOf(ctx, err, g.GetName())
		if s == nil {
			e.write(w)
		} else {
			s.fail(e)
		}
		return
	}
	defer res.End()
	if s != nil {
		s.complete(obj)
		return
	}
	if notStored.Status != 0 {
		notStored.Response = obj
		notStored.write(w)
		return
	}
	frontend.WriteJSON(w, http.StatusOK, obj)
}

// shellLimitsOf is the shell the request gets, for describing its calls;
// nil when it has none.
func shellLimitsOf(g *routerv1.Gateway, req *responsesRequest) *loop.Shell {
	if req.Shell == nil && !g.GetShell().GetEnabled() {
		return nil
	}
	return completion.ShellLimits(g, req.Shell)
}

// notStoredError is the answer to a response that ran but could not be
// stored though store asked for it: an error, since only an error tells
// a client that asked for storing (or left the default) that nothing was
// kept. The work ran, commands included, so the body carries the
// response too, and the answer tells SDKs not to retry, which would run
// it again. The account's quota is the 429 every quota answers (of the
// same type); anything else (etcd short of space or unreachable, a
// response too large) is 507.
func notStoredError(id string, err error) apiError {
	status := http.StatusInsufficientStorage
	var qe *responsestore.QuotaError
	if errors.As(err, &qe) {
		status = http.StatusTooManyRequests
	}
	cause := errs.HideAddresses(err.Error())
	if s, ok := grpcstatus.FromError(err); ok {
		cause = errs.HideAddresses(s.Message())
	}
	return apiError{Status: status, Type: "server_error", Code: "response_not_stored", Param: "store", NoRetry: true,
		Message: fmt.Sprintf("the response ran but was not stored: %s. It is in \"response\" of this answer only: GET /v1/responses/%s and previous_response_id will not find it. Send \"store\": false to run without storing.", cause, id)}
}

// checkCallIDs refuses a tool result whose call is nowhere in the
// conversation before it: the upstream would refuse it less clearly.
func checkCallIDs(msgs []upstream.Message) error {
	calls := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			calls[c.ID] = true
		}
		if m.Role == "tool" && !calls[m.ToolCallID] {
			return badField("input", "the output for call_id %q answers no function_call or shell_call of the conversation", m.ToolCallID)
		}
	}
	return nil
}

// responseObject is the response before it ran: status in_progress, no
// output yet, the request's settings echoed.
func responseObject(id string, created int64, req *responsesRequest) map[string]any {
	echo := func(k string, def any) any {
		if v, ok := req.Top[k]; ok && string(v) != "null" {
			return v
		}
		return def
	}
	tools := []json.RawMessage{}
	if req.Tools != nil {
		tools = req.Tools
	}
	var previous any
	if req.PreviousID != "" {
		previous = req.PreviousID
	}
	return map[string]any{
		"id": id, "object": "response", "created_at": created, "status": "in_progress",
		"error": nil, "incomplete_details": nil, "instructions": echo("instructions", nil),
		"max_output_tokens": echo("max_output_tokens", nil), "model": req.Model, "output": []any{},
		"parallel_tool_calls": echo("parallel_tool_calls", true), "previous_response_id": previous,
		"reasoning": map[string]any{"effort": nil, "summary": nil}, "store": req.Store,
		"temperature": echo("temperature", nil), "text": echo("text", map[string]any{"format": map[string]any{"type": "text"}}),
		"tool_choice": echo("tool_choice", "auto"), "tools": tools, "top_p": echo("top_p", nil),
		"truncation": "disabled", "usage": nil, "user": echo("user", nil), "metadata": echo("metadata", map[string]any{}),
		"background": false, "output_text": "",
	}
}

// finish fills obj with the completion's outcome.
func finish(obj map[string]any, res *completion.Result, items []map[string]any) {
	status, incomplete := statusOf(res.Result)
	obj["status"], obj["incomplete_details"] = status, incomplete
	obj["output"], obj["output_text"] = items, outputTextOf(items)
	obj["usage"] = responseUsage(res.Result)
	obj["conch"] = conchOf(res)
}

func (h *Handler) getResponse(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	st, err := h.responses.Get(r.Context(), account, r.PathValue("id"))
	if err != nil {
		h.writeErr(w, r, storedErr(err, r.PathValue("id"), ""))
		return
	}
	frontend.WriteJSON(w, http.StatusOK, st.Response)
}

func (h *Handler) deleteResponse(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	id := r.PathValue("id")
	found, err := h.responses.Delete(r.Context(), account, id)
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if !found {
		h.writeErr(w, r, &completion.FieldError{Status: http.StatusNotFound, Code: "not_found", Msg: fmt.Sprintf("Response with id '%s' not found.", id)})
		return
	}
	frontend.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response.deleted", "deleted": true})
}

// listInputItems lists a stored response's input items, newest first
// unless order=asc, limit (1-100, 20) at a time after the item named by
// after.
func (h *Handler) listInputItems(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 100 {
			h.writeErr(w, r, badField("limit", "must be an integer from 1 to 100, got %q", v))
			return
		}
	}
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		h.writeErr(w, r, badField("order", "must be asc or desc, got %q", order))
		return
	}
	st, err := h.responses.Get(r.Context(), account, r.PathValue("id"))
	if err != nil {
		h.writeErr(w, r, storedErr(err, r.PathValue("id"), ""))
		return
	}
	items := inputItemsWithIDs(r.PathValue("id"), st.Input)
	if order == "desc" {
		for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
			items[i], items[j] = items[j], items[i]
		}
	}
	if after := q.Get("after"); after != "" {
		at := -1
		for i, it := range items {
			if it["id"] == after {
				at = i
			}
		}
		if at < 0 {
			h.writeErr(w, r, badField("after", "no input item %q in this response", after))
			return
		}
		items = items[at+1:]
	}
	more := len(items) > limit
	items = items[:min(limit, len(items))]
	list := map[string]any{"object": "list", "data": items, "has_more": more, "first_id": nil, "last_id": nil}
	if len(items) > 0 {
		list["first_id"], list["last_id"] = items[0]["id"], items[len(items)-1]["id"]
	}
	frontend.WriteJSON(w, http.StatusOK, list)
}

// inputItemsWithIDs gives input items without an id one derived from the
// response, stable across reads.
func inputItemsWithIDs(response string, input []map[string]any) []map[string]any {
	ids := &itemIDs{response: response + "/input"}
	out := make([]map[string]any, len(input))
	for i, it := range input {
		c := make(map[string]any, len(it)+1)
		for k, v := range it {
			c[k] = v
		}
		id := ids.next("item_")
		if s, _ := c["id"].(string); s == "" {
			c["id"] = id
		}
		out[i] = c
	}
	return out
}
