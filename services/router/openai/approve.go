package openai

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/notify"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/loop"
)

// approveCommand reports whether the last message is the user's /approve.
func approveCommand(req *chatRequest) (string, bool) {
	last := req.Messages[len(req.Messages)-1]
	text := strings.TrimSpace(last.Content)
	if last.Role != "user" || (text != "/approve" && !strings.HasPrefix(text, "/approve ")) {
		return "", false
	}
	return text, true
}

// approve answers one of the session's pending approvals from the
// conversation itself (forwarding mode session or both), without calling
// the model.
func (h *Handler) approve(w http.ResponseWriter, r *http.Request, scope tenant.Scope, req *chatRequest, text string) {
	var answer string
	if scope.Session == "" {
		answer = "/approve needs a session: send the X-Conch-Session-Id header of the conversation whose command asked."
	} else {
		resp, err := h.opts.Approvals.HandleChatCommand(r.Context(), &approvalv1.HandleChatCommandRequest{
			Channel: approvalv1.Channel_CHANNEL_SESSION, From: scope.Session, Text: text,
		})
		if err != nil {
			answer = "/approve refused: " + status.Convert(err).Message() + "."
		} else {
			answer = resp.GetReply()
		}
	}
	h.answer(w, req, answer)
}

// sessionEvents asks, in a streamed completion of a session whose account
// forwards approvals to sessions, the conversation's user to answer each
// pending approval with /approve: plain OpenAI clients see it as text.
type sessionEvents struct {
	*sse
	ctx       context.Context
	approvals approvalv1.ApprovalServiceClient

	once sync.Once
	cfg  *approvalv1.ForwardingConfig
}

func (e *sessionEvents) Tool(ev loop.ToolEvent) error {
	if err := e.sse.Tool(ev); err != nil || ev.Event != "approval_pending" {
		return err
	}
	e.once.Do(func() {
		if resp, err := e.approvals.GetForwarding(e.ctx, &approvalv1.GetForwardingRequest{}); err == nil {
			e.cfg = resp.GetConfig()
		}
	})
	var a approvalv1.Approval
	if restjson.New().Unmarshal(ev.Approval, &a) != nil || !notify.ToSession(e.cfg, &a) {
		return nil
	}
	return e.sse.Delta("\n\n" + notify.Text(&a) + "\n")
}
