package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/display"
	"github.com/conch-sh/conch/services/internal/display/previewpb"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/loop"
)

// decisionSchema is what an elicitation asks for: one of the three
// answers of an approval.
var decisionSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"decision": map[string]any{
			"type":        "string",
			"title":       "Decision",
			"description": "allow-once runs this command; allow-session also allows it again in this session; allow-always also allows it from now on; deny refuses it",
			"enum":        []string{"allow-once", "allow-session", "allow-always", "deny"},
		},
	},
	"required": []string{"decision"},
}

// decisions are the answers an elicitation may give.
var decisions = execpolicy.Decisions

// callEvents is what one tool call tells its client while it runs:
// progress while it runs or waits, and each pending approval, asked
// through elicitation when the client can answer one. The approval's
// other surfaces (web, CLI, REST, chat) stay open: the first answer wins
// and an elicitation still open when another surface answered is
// withdrawn.
type callEvents struct {
	ctx       context.Context
	cancel    context.CancelFunc
	ss        *mcp.ServerSession
	token     any // the call's progress token, nil when it gave none
	elicit    bool
	approvals approvalv1.ApprovalServiceClient
	s         *session
	// notices is the call's HTTP response, nil when the call came
	// otherwise.
	notices *noticeWriter

	mu       sync.Mutex
	progress float64
	asking   sync.WaitGroup
}

var _ loop.Events = (*callEvents)(nil)

func (s *session) events(ctx context.Context, req *mcp.CallToolRequest) *callEvents {
	ctx, cancel := context.WithCancel(ctx)
	e := &callEvents{ctx: ctx, cancel: cancel, ss: req.Session, token: req.Params.GetProgressToken(), approvals: s.opts.Approvals, s: s,
		notices: requestNotices(req.Extra)}
	if p := req.Session.InitializeParams(); p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil {
		e.elicit = true
	}
	return e
}

// withdrawWait bounds how long a finished call waits for its open
// questions to be withdrawn before it answers anyway.
const withdrawWait = 2 * time.Second

// stop ends the questions still open once the call is over, and waits
// until the client has been sent the withdrawal of each. The call's
// result does not wait longer than withdrawWait: a question still open
// then ends with the session, and an answer to it finds the approval
// decided.
func (e *callEvents) stop() {
	e.cancel()
	done := make(chan struct{})
	go func() {
		e.asking.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(withdrawWait):
		e.s.opts.Logger.Warn("an approval question was not withdrawn in time; the call answers anyway")
	}
}

// Delta implements loop.Events; a tool call has no model text.
func (e *callEvents) Delta(string) error { return nil }

// KeepAlive implements loop.Events.
func (e *callEvents) KeepAlive() error {
	e.notify("still running")
	return nil
}

// Tool implements loop.Events.
func (e *callEvents) Tool(ev loop.ToolEvent) error {
	if ev.Event == "tool_output" {
		// The output as it comes, for a client that asked for progress;
		// the result holds it whole.
		if ev.Encoding == "" {
			e.notify(ev.Stream + ": " + display.Escape(ev.Output))
		}
		return nil
	}
	if ev.Event != "approval_pending" {
		return nil
	}
	var a approvalv1.Approval
	if err := restjson.New().Unmarshal(ev.Approval, &a); err != nil {
		return nil
	}
	e.notify("waiting for approval " + a.GetId() + " of: " + display.Escape(a.GetCommand()))
	e.s.log(e.ctx, e.ss, mcp.LoggingLevel("warning"), "command waits for approval "+a.GetId())
	if e.elicit {
		e.asking.Add(1)
		go func() {
			defer e.asking.Done()
			e.ask(&a)
		}()
	}
	return nil
}

// notify sends a progress notification when the client asked for them.
func (e *callEvents) notify(msg string) {
	if e.token == nil {
		return
	}
	e.mu.Lock()
	e.progress++
	p := e.progress
	e.mu.Unlock()
	_ = e.ss.NotifyProgress(e.ctx, &mcp.ProgressNotificationParams{ProgressToken: e.token, Progress: p, Message: msg})
}

// ask asks the client to answer a, and resolves a with the answer unless
// another surface answered first.
func (e *callEvents) ask(a *approvalv1.Approval) {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	go func() {
		// Withdraw the question once the approval is answered elsewhere.
		defer cancel()
		w, err := e.approvals.WatchApproval(ctx, &approvalv1.WatchApprovalRequest{Id: a.GetId()})
		if err != nil {
			return
		}
		for {
			msg, err := w.Recv()
			if err != nil || msg.GetApproval().GetState() != approvalv1.ApprovalState_APPROVAL_STATE_PENDING {
				return
			}
		}
	}()
	res, err := e.ss.Elicit(ctx, &mcp.ElicitParams{Message: approvalText(a), RequestedSchema: decisionSchema})
	if err != nil {
		if ctx.Err() != nil && e.notices != nil {
			// Withdrawn: the SDK is sending the client
			// notifications/cancelled, from a goroutine of its own; the
			// call's result must not overtake it.
			e.notices.wait(e.notices.expect(), withdrawWait)
		}
		return
	}
	decision, ok := elicitedDecision(res)
	if !ok {
		// Dismissed without an answer: the other surfaces may still answer.
		return
	}
	// The approver recorded is the key of the request that carried the
	// answer, not the one that made the call.
	by, ok := e.s.answerer()
	if !ok {
		return
	}
	if _, err := e.approvals.ResolveApproval(tenant.With(e.ctx, by), &approvalv1.ResolveApprovalRequest{Id: a.GetId(), Decision: decision}); err != nil {
		k := errs.KindOf(err)
		if k != errs.FailedPrecondition && k != errs.NotFound {
			e.s.opts.Logger.WarnContext(e.ctx, "approval answer not recorded", "approval", a.GetId(), "error", err)
		}
	}
}

// elicitedDecision is the approval decision an elicitation's answer
// gives; a declined question denies, a dismissed one gives none.
func elicitedDecision(res *mcp.ElicitResult) (approvalv1.ApprovalDecision, bool) {
	switch res.Action {
	case "accept":
		word, _ := res.Content["decision"].(string)
		d, ok := decisions[word]
		return d, ok
	case "decline":
		return approvalv1.ApprovalDecision_APPROVAL_DECISION_DENY, true
	}
	return approvalv1.ApprovalDecision_APPROVAL_DECISION_UNSPECIFIED, false
}

// approvalText is the question: the command escaped and whole, where it
// runs and what it resolves to.
func approvalText(a *approvalv1.Approval) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Allow this command to run? (approval %s)\n", a.GetId())
	fmt.Fprintf(&b, "Command: %s\n", display.Escape(a.GetCommand()))
	fmt.Fprintf(&b, "CWD: %s\n", display.Escape(a.GetCwd()))
	if paths := a.GetResolvedPaths(); len(paths) > 0 {
		fmt.Fprintf(&b, "Resolved: %s\n", display.Escape(strings.Join(paths, ", ")))
	}
	fmt.Fprintf(&b, "Host: %s", strings.ToLower(strings.TrimPrefix(a.GetHost().String(), "HOST_")))
	if p := previewpb.From(a.GetPreview()); p != nil {
		b.WriteString("\n" + strings.Join(p.Lines(), "\n"))
	}
	return b.String()
}
