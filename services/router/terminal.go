package router

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/signing"
	"github.com/conch-sh/conch/services/router/apierror"
)

// terminalRoutes serves GET /api/v1/sandboxes/{id}/terminal: a WebSocket
// to a login shell on a terminal in the sandbox. Binary frames carry bytes
// both ways; text frames carry JSON: {"type": "resize", "rows", "cols"}
// from the client, {"type": "approval_pending", "approval"} and
// {"type": "exit", "exit_code", "reason"} to it.
//
// A browser cannot set a WebSocket's headers: it opens the terminal with
// ?token=, a short-lived token for that one sandbox that a key asked for
// (POST /api/v1/sandboxes/{id}/terminal:token), good while the key is.
type terminalRoutes struct {
	exec     executorv1.ExecutorServiceClient
	gateways gatewayGetter
	keys     keyChecker
	tokens   *signing.Signer
	log      *slog.Logger
}

// keyChecker says whether a key still authenticates.
type keyChecker interface {
	KeyLive(ctx context.Context, account, keyID string) (bool, error)
}

// Terminal tokens' lifetimes (docs/reference/sandboxes.md#terminal).
const (
	DefaultTerminalTokenTTL = time.Minute
	MaxTerminalTokenTTL     = 10 * time.Minute
)

// terminalClaims are what a terminal token grants: opening the terminal
// of one sandbox, as the key that asked for it, with its scope.
type terminalClaims struct {
	Account string `json:"a"`
	Key     string `json:"k"`
	Admin   bool   `json:"adm,omitempty"`
	User    string `json:"u,omitempty"`
	Session string `json:"ses,omitempty"`
	Sandbox string `json:"s"`
	Expires int64  `json:"x"`
}

func (c terminalClaims) ExpiresAt() int64 { return c.Expires }

// tokenSecret is the secret the keys of tokens routers sign for each other
// are derived from: the cluster's internal secret, or, without one, a
// random one, and a token then verifies only at the router that signed
// it.
var randomTokenSecret = sync.OnceValue(func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
})

func tokenSecret(internalSecret string) []byte {
	if internalSecret == "" {
		return randomTokenSecret()
	}
	return []byte(internalSecret)
}

func newTerminalRoutes(exec executorv1.ExecutorServiceClient, gateways gatewayGetter, keys keyChecker, internalSecret string, log *slog.Logger) (*terminalRoutes, error) {
	tokens, err := signing.NewFor(signing.Terminal, []signing.Key{signing.DerivedKey(signing.Terminal, tokenSecret(internalSecret))})
	if err != nil {
		return nil, err
	}
	return &terminalRoutes{exec: exec, gateways: gateways, keys: keys, tokens: tokens, log: log}, nil
}

func (t *terminalRoutes) register(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	byKey := auth(http.HandlerFunc(t.serve))
	mux.Handle("GET /api/v1/sandboxes/{sandbox_id}/terminal", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("token") && r.Header.Get("Authorization") == "" {
			t.serveToken(w, r)
			return
		}
		byKey.ServeHTTP(w, r)
	}))
	mux.Handle("POST /api/v1/sandboxes/{sandbox_id}/terminal:token", auth(http.HandlerFunc(t.mint)))
}

// mint answers a token that opens the terminal of the sandbox, for
// expires_in_seconds (default 60, at most 600), and its URL.
func (t *terminalRoutes) mint(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req struct {
		ExpiresInSeconds int64 `json:"expires_in_seconds"`
	}
	if err := decodeSmallBody(w, r, &req, true, `{"expires_in_seconds": N}`); err != nil {
		apiErrors(w, err)
		return
	}
	ttl := DefaultTerminalTokenTTL
	if req.ExpiresInSeconds != 0 {
		if req.ExpiresInSeconds < 0 || req.ExpiresInSeconds > int64(MaxTerminalTokenTTL/time.Second) {
			apiErrors(w, errs.Invalid("expires_in_seconds", "must be 1-%d, got %d", int64(MaxTerminalTokenTTL/time.Second), req.ExpiresInSeconds))
			return
		}
		ttl = time.Duration(req.ExpiresInSeconds) * time.Second
	}
	scope, ok := tenant.From(ctx)
	if !ok {
		apierror.Write(ctx, t.log, w, errs.New(errs.Unauthenticated, "no scope"))
		return
	}
	id := r.PathValue("sandbox_id")
	// Only for a sandbox the key may see.
	if _, err := t.exec.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id}); err != nil {
		apierror.Write(ctx, t.log, w, err)
		return
	}
	exp := time.Now().Add(ttl).Truncate(time.Second)
	tok, err := t.tokens.Sign(terminalClaims{Account: scope.Account, Key: scope.Key, Admin: scope.Admin, User: scope.User, Session: scope.Session, Sandbox: id, Expires: exp.Unix()})
	if err != nil {
		apierror.Write(ctx, t.log, w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{
		"token":      tok,
		"url":        "/api/v1/sandboxes/" + url.PathEscape(id) + "/terminal?token=" + url.QueryEscape(tok),
		"expires_at": exp.UTC().Format(time.RFC3339),
	})
}

// serveToken opens a terminal with a token instead of a key: the token's
// sandbox only, while it has not expired and its key still authenticates.
func (t *terminalRoutes) serveToken(w http.ResponseWriter, r *http.Request) {
	var c terminalClaims
	if err := t.tokens.VerifyInto(r.URL.Query().Get("token"), &c); err != nil {
		apiErrors(w, errs.NewReason(errs.Unauthenticated, errs.ReasonInvalidAPIKey, "%s", errs.Public(err).Message))
		return
	}
	if c.Sandbox != r.PathValue("sandbox_id") {
		apiErrors(w, errs.New(errs.PermissionDenied, "terminal token is for another sandbox"))
		return
	}
	live, err := t.keys.KeyLive(r.Context(), c.Account, c.Key)
	if err != nil {
		apierror.Write(r.Context(), t.log, w, errs.New(errs.Unavailable, "authentication is unavailable; try again"))
		return
	}
	if !live {
		apiErrors(w, errs.NewReason(errs.Unauthenticated, errs.ReasonInvalidAPIKey, "terminal token's key was revoked"))
		return
	}
	scope := tenant.Scope{Account: c.Account, Key: c.Key, Admin: c.Admin, User: c.User, Session: c.Session, PublicURL: requestBaseURL(r)}
	t.serve(w, r.WithContext(tenant.With(r.Context(), scope)))
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
