package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	grpcstatus "google.golang.org/grpc/status"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// The Responses API (POST /v1/responses and the stored responses under
// /v1/responses/{id}) is a second front end over the completion core: it
// parses input items into the conversation, runs the same loop with the
// same tools, approvals and sandboxes as chat completions, and renders
// output items. With store (the default) a response, its input and the
// conversation so far are kept in etcd for the retention, so
// previous_response_id continues it on any router replica.
const (
	// DefaultResponseRetention is how long a stored response is kept.
	DefaultResponseRetention = 30 * 24 * time.Hour
	// maxStoredResponse bounds a stored response, compressed: a larger one
	// is not put in etcd, and the request fails (see notStored).
	maxStoredResponse = 4 << 20
	// storeTimeout bounds storing a response after it was computed.
	storeTimeout = 10 * time.Second
)

// ResponsesOptions configure the Responses API.
type ResponsesOptions struct {
	// Etcd keeps stored responses.
	Etcd *clientv3.Client
	// Retention is how long a stored response is kept; zero means
	// DefaultResponseRetention.
	Retention time.Duration
	// Limits returns an account's quotas, which stored responses count
	// against (their number and bytes); nil counts nothing.
	Limits func(ctx context.Context, account string) (quotas.Limits, error)
	// Room, when set, says whether etcd has room for a stored response
	// of size bytes now, and counts them (etcdx.SpaceWatcher.AdmitBulk);
	// size 0 asks only. A response etcd has no room for is refused
	// before its model runs, and not written after.
	Room func(size int64) error
}

// storedResponse is a response as kept for GET and previous_response_id.
type storedResponse struct {
	Response map[string]any   `json:"response"`
	Input    []map[string]any `json:"input"`
	// Conversation is every message up to and including this response's
	// output, instructions excepted (they do not carry over).
	Conversation []completion.StoredMessage `json:"conversation"`
}

// responseKey is where a stored response lives: under its account, so an
// id from another account finds nothing.
func responseKey(account, id string) string {
	return "conch/responses/" + url.PathEscape(account) + "/" + url.PathEscape(id) + "/"
}

func (h *Handler) loadResponse(ctx context.Context, account, id, field string) (*storedResponse, error) {
	var st storedResponse
	found, err := etcdx.GetBlob(ctx, h.responses.Etcd, responseKey(account, id), &st)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, &completion.FieldError{Status: http.StatusNotFound, Field: field, Code: "not_found",
			Msg: fmt.Sprintf("Response with id '%s' not found.", id)}
	}
	return &st, nil
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
	var history []upstream.Message
	if req.PreviousID != "" {
		prev, err := h.loadResponse(ctx, scope.Account, req.PreviousID, "previous_response_id")
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		history = completion.LoadMessages(prev.Conversation)
	}
	input := req.Messages
	conv := append(append([]upstream.Message(nil), history...), input...)
	if err := checkCallIDs(conv); err != nil {
		h.writeErr(w, r, err)
		return
	}
	if req.Store {
		// Refused before the model runs when the response could not be
		// stored after it: too large, no room in etcd, or none left in
		// the account's quotas.
		if err := h.roomToStore(ctx, scope.Account, conv, input); err != nil {
			h.writeErr(w, r, err)
			return
		}
	}
	req.Messages = conv
	if req.Instructions != nil && *req.Instructions != "" {
		req.Messages = append([]upstream.Message{{Role: "system", Content: *req.Instructions}}, conv...)
	}

	id := "resp_" + randomHex(24)
	created := time.Now().Unix()
	obj := responseObject(id, created, req)
	var ev loop.Events
	var s *responseStream
	if req.Stream {
		s = newResponseStream(w, obj, &itemIDs{response: id}, shellLimitsOf(g, req), req.ShellLocal)
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
		sh := newShellView(res, shellLimitsOf(g, req), req.ShellLocal)
		finish(obj, res, outputItems(res, &itemIDs{response: id}, sh))
		if !req.Store {
			return
		}
		st := &storedResponse{Response: obj, Input: req.Input, Conversation: completion.StoreMessages(append(conv, res.Turn...))}
		if err := h.storeResponse(ctx, scope.Account, id, st); err != nil {
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
	writeJSON(w, obj)
}

// shellLimitsOf is the shell the request gets, for describing its calls;
// nil when it has none.
func shellLimitsOf(g *routerv1.Gateway, req *responsesRequest) *loop.Shell {
	if req.Shell == nil && !g.GetShell().GetEnabled() {
		return nil
	}
	return completion.ShellLimits(g, req.Shell)
}

// storeResponse stores st; an error of the account's quotas is a
// *quotaError. What a failed store left (chunks, the claim) is removed.
func (h *Handler) storeResponse(ctx context.Context, account, id string, st *storedResponse) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	// etcd may have filled up while the model ran. The claim shares the
	// response's lease: it ends when the response expires.
	claim := func(ctx context.Context, size int, lease clientv3.LeaseID) error {
		if h.responses.Room != nil {
			if err := h.responses.Room(int64(size)); err != nil {
				return err
			}
		}
		if h.responses.Limits == nil {
			return nil
		}
		limits, err := h.responses.Limits(ctx, account)
		if err != nil {
			return err
		}
		err = quotas.Claim(ctx, h.responses.Etcd, quotas.StoredResponses, account, id,
			quotas.Usage{quotas.StoredResponses: 1, quotas.StoredResponseBytes: int64(size)}, limits, []clientv3.OpOption{clientv3.WithLease(lease)})
		if errs.KindOf(err) == errs.ResourceExhausted {
			return &quotaError{err}
		}
		return err
	}
	err := etcdx.PutBlobClaimed(ctx, h.responses.Etcd, h.leases, responseKey(account, id), st, maxStoredResponse, claim)
	var qe *quotaError
	if err != nil && !errors.As(err, &qe) {
		// A half-written response is never found (its head is written
		// last), but its chunks and claim would hold space and quota
		// for the whole retention. Deletes go through even when etcd
		// is out of space.
		if _, derr := etcdx.DeleteBlob(ctx, h.responses.Etcd, responseKey(account, id)); derr != nil {
			h.logger.WarnContext(ctx, "a response not stored is left in etcd until it expires", "account", account, "response", id, "error", derr)
		}
		if h.responses.Limits != nil {
			if rerr := quotas.Release(ctx, h.responses.Etcd, quotas.StoredResponses, account, id); rerr != nil {
				h.logger.WarnContext(ctx, "the claim of a response not stored is left until it expires", "account", account, "response", id, "error", rerr)
			}
		}
	}
	return err
}

// quotaError is a store refused by the account's quotas.
type quotaError struct{ error }

func (e *quotaError) Unwrap() error { return e.error }

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
	var qe *quotaError
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

// roomToStore refuses, before the model runs, a response that could not
// be stored after it: one certain to be larger than a stored response
// may be (its conversation and input alone are), one etcd has no room
// for now, and one beyond the account's quotas.
func (h *Handler) roomToStore(ctx context.Context, account string, conv, input []upstream.Message) error {
	// The stored response holds the whole conversation and the input
	// again; their text alone is a lower bound of its size.
	if n := textBytes(conv) + textBytes(input); n > etcdx.BlobMaxRaw {
		return &completion.FieldError{Status: http.StatusBadRequest, Field: "store", Code: "response_too_large",
			Msg: fmt.Sprintf("a stored response holds at most %d bytes, and this one would hold more than %d (the conversation so far and this input): continue with \"store\": false, or start a new conversation", etcdx.BlobMaxRaw, n)}
	}
	if h.responses.Room != nil {
		if err := h.responses.Room(0); err != nil {
			return errs.New(errs.Unavailable, "responses cannot be stored now (%v); send \"store\": false to run without storing", err)
		}
	}
	if h.responses.Limits == nil {
		return nil
	}
	limits, err := h.responses.Limits(ctx, account)
	if err != nil {
		return err
	}
	return quotas.Check(ctx, h.responses.Etcd, quotas.StoredResponses, account,
		quotas.Usage{quotas.StoredResponses: 1, quotas.StoredResponseBytes: 0}, limits)
}

// textBytes is the text of msgs: their contents and tool arguments.
func textBytes(msgs []upstream.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
		for _, c := range m.ToolCalls {
			n += len(c.Arguments)
		}
	}
	return n
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
	obj["conch"] = conchOf(res.Result)
}

func (h *Handler) getResponse(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	st, err := h.loadResponse(r.Context(), account, r.PathValue("id"), "")
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	writeJSON(w, st.Response)
}

func (h *Handler) deleteResponse(w http.ResponseWriter, r *http.Request) {
	account, err := tenant.Account(r.Context())
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	id := r.PathValue("id")
	found, err := etcdx.DeleteBlob(r.Context(), h.responses.Etcd, responseKey(account, id))
	if err != nil {
		h.writeErr(w, r, err)
		return
	}
	if err := quotas.Release(r.Context(), h.responses.Etcd, quotas.StoredResponses, account, id); err != nil {
		h.writeErr(w, r, err)
		return
	}
	if !found {
		h.writeErr(w, r, &completion.FieldError{Status: http.StatusNotFound, Code: "not_found", Msg: fmt.Sprintf("Response with id '%s' not found.", id)})
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "response.deleted", "deleted": true})
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
	st, err := h.loadResponse(r.Context(), account, r.PathValue("id"), "")
	if err != nil {
		h.writeErr(w, r, err)
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
	writeJSON(w, list)
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
