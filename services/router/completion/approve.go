package completion

import (
	"context"
	"sync"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/notify"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/router/loop"
)

// sessionEvents asks, in a streamed completion of a session whose account
// forwards approvals to sessions, the conversation's user to answer each
// pending approval with /approve: plain OpenAI clients see it as text.
type sessionEvents struct {
	loop.Events
	ctx       context.Context
	approvals approvalv1.ApprovalServiceClient

	once sync.Once
	cfg  *approvalv1.ForwardingConfig
}

func (e *sessionEvents) Tool(ev loop.ToolEvent) error {
	if err := e.Events.Tool(ev); err != nil || ev.Event != "approval_pending" {
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
	return e.Events.Delta(notify.Text(&a) + "\n")
}
