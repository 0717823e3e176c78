package router

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/coder/websocket"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/apierror"
)

// terminalRoutes serves GET /api/v1/sandboxes/{id}/terminal: a WebSocket
// to a login shell on a terminal in the sandbox. Binary frames carry bytes
// both ways; text frames carry JSON: {"type": "resize", "rows", "cols"}
// from the client, {"type": "approval_pending", "approval"} and
// {"type": "exit", "exit_code", "reason"} to it.
type terminalRoutes struct {
	exec     executorv1.ExecutorServiceClient
	gateways gatewayGetter
	log      *slog.Logger
}

func (t *terminalRoutes) register(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("GET /api/v1/sandboxes/{sandbox_id}/terminal", auth(http.HandlerFunc(t.serve)))
}

// terminalMessage is a text frame's JSON.
type terminalMessage struct {
	Type     string          `json:"type"`
	Rows     uint32          `json:"rows,omitempty"`
	Cols     uint32          `json:"cols,omitempty"`
	ExitCode *int32          `json:"exit_code,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Approval json.RawMessage `json:"approval,omitempty"`
}

func (t *terminalRoutes) serve(w http.ResponseWriter, r *http.Request) {
	size := &executorv1.TerminalSize{Rows: 24, Cols: 80}
	for _, q := range []struct {
		name string
		v    *uint32
	}{{"rows", &size.Rows}, {"cols", &size.Cols}} {
		if s := r.URL.Query().Get(q.name); s != "" {
			n, err := strconv.ParseUint(s, 10, 16)
			if err != nil {
				apiErrors(w, errs.Invalid(q.name, "must be a number of characters"))
				return
			}
			*q.v = uint32(n)
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	start, err := t.start(ctx, r.PathValue("sandbox_id"), size)
	if err != nil {
		apierror.Write(ctx, t.log, w, err)
		return
	}
	stream, err := t.exec.Terminal(ctx)
	if err == nil {
		err = stream.Send(&executorv1.TerminalRequest{Message: &executorv1.TerminalRequest_Start{Start: start}})
	}
	// The terminal's first word decides the answer: an error (refused,
	// not found) is the API's, before any upgrade.
	var first *executorv1.TerminalResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err != nil {
		apierror.Write(ctx, t.log, w, err)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered
	}
	defer c.CloseNow()
	// Keystrokes and sizes to the terminal.
	go func() {
		defer cancel()
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			m := &executorv1.TerminalRequest{Message: &executorv1.TerminalRequest_Input{Input: b}}
			if typ == websocket.MessageText {
				var msg terminalMessage
				if json.Unmarshal(b, &msg) != nil || msg.Type != "resize" {
					_ = c.Close(websocket.StatusUnsupportedData, `text frames are {"type": "resize", "rows", "cols"}`)
					return
				}
				m = &executorv1.TerminalRequest{Message: &executorv1.TerminalRequest_Resize{Resize: &executorv1.TerminalSize{Rows: msg.Rows, Cols: msg.Cols}}}
			}
			if stream.Send(m) != nil {
				return
			}
		}
	}()
	// The terminal's output to the client.
	for m := first; ; {
		switch e := m.GetMessage().(type) {
		case *executorv1.TerminalResponse_Output:
			if c.Write(ctx, websocket.MessageBinary, e.Output) != nil {
				return
			}
		case *executorv1.TerminalResponse_ApprovalPending:
			a, _ := restjson.New().Marshal(e.ApprovalPending.GetApproval())
			if t.text(ctx, c, terminalMessage{Type: "approval_pending", Approval: a}) != nil {
				return
			}
		case *executorv1.TerminalResponse_Exit:
			code := e.Exit.GetExitCode()
			_ = t.text(ctx, c, terminalMessage{Type: "exit", ExitCode: &code, Reason: e.Exit.GetReason()})
			_ = c.Close(websocket.StatusNormalClosure, "")
			return
		}
		var err error
		if m, err = stream.Recv(); err != nil {
			reason := errs.Public(err).Message
			if errors.Is(ctx.Err(), context.Canceled) {
				return
			}
			if len(reason) > 120 {
				reason = reason[:120]
			}
			_ = c.Close(websocket.StatusInternalError, reason)
			return
		}
	}
}

// start is a terminal's first message: for a sandbox made for a gateway,
// with the gateway's exec settings, which judge the login shell as they
// judge its commands.
func (t *terminalRoutes) start(ctx context.Context, id string, size *executorv1.TerminalSize) (*executorv1.TerminalStart, error) {
	start := &executorv1.TerminalStart{SandboxId: id, Size: size}
	sb, err := t.exec.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
	if err != nil {
		return nil, err
	}
	if agent := sb.GetSandbox().GetAgent(); agent != "" {
		scope, err := tenant.Account(ctx)
		if err != nil {
			return nil, err
		}
		g, err := t.gateways.Get(ctx, scope, agent)
		if err != nil {
			return nil, err
		}
		start.Agent, start.Settings = agent, g.GetExec()
	}
	return start, nil
}

func (t *terminalRoutes) text(ctx context.Context, c *websocket.Conn, m terminalMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return c.Write(ctx, websocket.MessageText, b)
}
