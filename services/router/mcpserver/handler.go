package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/apierror"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/upstream"
)

// DefaultSessionIdle is how long an MCP session lives without a request
// from its client: the default idle time of a session's sandbox
// (docs/reference/mcp.md).
const DefaultSessionIdle = contract.SessionIdle

// protocolVersions are the protocol versions served: those with sessions
// (Mcp-Session-Id), which hold a sandbox and let a tool call ask the
// client through elicitation while it runs.
var protocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

// Core is what the MCP server needs of the completion service.
type Core interface {
	Gateway(ctx context.Context, account, name string) (*routerv1.Gateway, error)
	OpenToolbox(ctx context.Context, scope tenant.Scope, g *routerv1.Gateway, user string) (*completion.Toolbox, error)
}

var _ Core = (*completion.Service)(nil)

// Options configure the handler.
type Options struct {
	Core       Core
	Executor   executorv1.ExecutorServiceClient
	Approvals  approvalv1.ApprovalServiceClient
	Workspaces workspacev1.WorkspaceServiceClient
	// SessionIdle ends a session after this long without a request; 0
	// means DefaultSessionIdle.
	SessionIdle time.Duration
	Logger      *slog.Logger
	// Claims counts open sessions against their account's quota; nil
	// counts nothing.
	Claims Claims
	// Version is conch's version, told to clients.
	Version string
}

// Claims counts an account's open sessions against its quota.
type Claims interface {
	// Claim counts session id of account, or is the quota's error.
	Claim(ctx context.Context, account, id string) error
	// Release stops counting it.
	Release(ctx context.Context, account, id string)
}

// Handler serves MCP's streamable HTTP transport behind the router's
// bearer auth, which has put the caller's scope in each request's
// context.
type Handler struct {
	opts Options
	sdk  http.Handler

	mu       sync.Mutex
	sessions map[string]*session
}

// NewHandler returns the handler.
func NewHandler(opts Options) (*Handler, error) {
	if opts.Core == nil || opts.Executor == nil || opts.Approvals == nil || opts.Workspaces == nil {
		return nil, errors.New("mcpserver: Core, Executor, Approvals and Workspaces are required")
	}
	if opts.SessionIdle <= 0 {
		opts.SessionIdle = DefaultSessionIdle
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{opts: opts, sessions: map[string]*session{}}
	sdk := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if s, ok := r.Context().Value(sessionKey{}).(*session); ok {
			return s.server
		}
		return nil
	}, &mcp.StreamableHTTPOptions{
		SessionTimeout: opts.SessionIdle,
		// The router may be reached through any name; bearer auth, not
		// the Host header, guards it.
		DisableLocalhostProtection: true,
	})
	// Every request carries the scope the router authenticated it with to
	// the session's handlers (mcp.RequestExtra.TokenInfo): a session acts
	// as the key of each request, not of the one that opened it, and the
	// SDK refuses a request of another account on the session.
	h.sdk = auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		scope, ok := tenant.From(r.Context())
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		extra := map[string]any{scopeExtra: scope}
		if w, ok := r.Context().Value(noticeKey{}).(*noticeWriter); ok {
			extra[noticeExtra] = w
		}
		return &auth.TokenInfo{UserID: scope.Account, Expiration: time.Now().Add(time.Hour), Extra: extra}, nil
	}, nil)(sdk)
	return h, nil
}

// scopeExtra is the key of a request's scope in its TokenInfo.
const scopeExtra = "conch.scope"

// requestScope is the scope of the HTTP request that carried an MCP
// request.
func requestScope(extra *mcp.RequestExtra) (tenant.Scope, bool) {
	if extra == nil || extra.TokenInfo == nil {
		return tenant.Scope{}, false
	}
	sc, ok := extra.TokenInfo.Extra[scopeExtra].(tenant.Scope)
	return sc, ok
}

type sessionKey struct{}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	scope, ok := tenant.From(r.Context())
	if !ok {
		h.fail(w, r, errs.NewReason(errs.Unauthenticated, errs.ReasonInvalidAPIKey, "missing credentials"))
		return
	}
	gateway := r.PathValue("gateway")
	if gateway == "" {
		gateway = "default"
	}
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		s := h.lookup(id)
		// Another account's session is not found, as any object of
		// another account is (docs/reference/errors.md).
		if s == nil || s.scope.Account != scope.Account || s.gateway.GetName() != gateway {
			h.fail(w, r, errs.New(errs.NotFound, "session not found: start a new one with initialize"))
			return
		}
		h.serveSession(w, r, s)
		return
	}
	if r.Method != http.MethodPost {
		h.fail(w, r, errs.Invalid("Mcp-Session-Id", "header required: start a session with initialize"))
		return
	}
	s, err := h.open(r.Context(), scope, gateway)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if c := h.opts.Claims; c != nil {
		if err := c.Claim(r.Context(), scope.Account, s.id); err != nil {
			s.close(context.WithoutCancel(r.Context()))
			if errs.KindOf(err) != errs.ResourceExhausted {
				// A session that cannot be counted is refused as briefly
				// unavailable; why is etcd's, not the caller's to read.
				h.opts.Logger.ErrorContext(r.Context(), "MCP session not counted", "error", err)
				err = errs.New(errs.Unavailable, "MCP sessions cannot be counted against the account's quota; try again")
			}
			h.fail(w, r, err)
			return
		}
	}
	// The client may use the session as soon as it reads the answer to
	// initialize, before this request's handler returns: it is known
	// from the start, and forgotten unless that initialize succeeded.
	h.mu.Lock()
	h.sessions[s.id] = s
	h.mu.Unlock()
	h.sdk.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	ss := s.live()
	if ss == nil {
		h.end(context.WithoutCancel(r.Context()), s)
		return
	}
	go func() {
		_ = ss.Wait()
		h.end(context.WithoutCancel(r.Context()), s)
	}()
}

// EndKey ends the sessions opened with the key keyID of account, when it
// is revoked: the sandbox they hold goes with them, and their next
// request finds no session.
func (h *Handler) EndKey(account, keyID string) {
	h.mu.Lock()
	var ended []*session
	for _, s := range h.sessions {
		if s.scope.Account == account && s.scope.Key == keyID {
			ended = append(ended, s)
		}
	}
	h.mu.Unlock()
	for _, s := range ended {
		if ss := s.live(); ss != nil {
			_ = ss.Close()
		}
		h.end(context.Background(), s)
	}
}

// end forgets a session and releases what it holds.
func (h *Handler) end(ctx context.Context, s *session) {
	h.mu.Lock()
	_, live := h.sessions[s.id]
	delete(h.sessions, s.id)
	h.mu.Unlock()
	if !live {
		return
	}
	s.close(ctx)
	if c := h.opts.Claims; c != nil {
		c.Release(ctx, s.scope.Account, s.id)
	}
}

// serveSession serves a request of the live session s. A client that
// goes away while a tool call runs will never read its result: the call
// is cancelled as if the client had said so, which stops its command.
// (Before protocol version 2026-07-28 the SDK lets such a call run on.)
func (h *Handler) serveSession(w http.ResponseWriter, r *http.Request, s *session) {
	r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, s))
	var call jsonrpc.ID
	if r.Method == http.MethodPost && r.Body != nil {
		body, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
		if err != nil {
			h.fail(w, r, errs.New(errs.InvalidArgument, "request body: %v", err))
			return
		}
		if msg, err := jsonrpc.DecodeMessage(body); err == nil {
			switch m := msg.(type) {
			case *jsonrpc.Request:
				if m.IsCall() && m.Method == "tools/call" {
					call = m.ID
				}
			case *jsonrpc.Response:
				// An answer to the server's question (an elicitation):
				// its key is who answered.
				if sc, ok := tenant.From(r.Context()); ok {
					s.answeredBy(sc)
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if call.IsValid() {
		nw := newNoticeWriter(w)
		w, r = nw, r.WithContext(context.WithValue(r.Context(), noticeKey{}, nw))
	}
	h.sdk.ServeHTTP(w, r)
	if call.IsValid() && r.Context().Err() != nil {
		h.cancelCall(r, call)
	}
}

// cancelCall cancels the call id of r's session through the SDK, as the
// client's notifications/cancelled would.
func (h *Handler) cancelCall(r *http.Request, id jsonrpc.ID) {
	note, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": map[string]any{"requestId": id.Raw(), "reason": "the client went away"}})
	if err != nil {
		return
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), http.MethodPost, r.URL.String(), bytes.NewReader(note))
	if err != nil {
		return
	}
	for _, k := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "Authorization"} {
		if v := r.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	h.sdk.ServeHTTP(discardResponse{header: http.Header{}}, req)
}

// discardResponse is the response of a request nobody reads.
type discardResponse struct{ header http.Header }

func (d discardResponse) Header() http.Header       { return d.header }
func (discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (discardResponse) WriteHeader(int)             {}

func (h *Handler) lookup(id string) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id]
}

// open makes a session's server for the caller in scope on gateway.
func (h *Handler) open(ctx context.Context, scope tenant.Scope, gateway string) (*session, error) {
	g, err := h.opts.Core.Gateway(ctx, scope.Account, gateway)
	if err != nil {
		var fe *completion.FieldError
		if errors.As(err, &fe) {
			return nil, errs.New(errs.NotFound, "gateway %s not found", gateway)
		}
		h.opts.Logger.ErrorContext(ctx, "gateway lookup failed", "gateway", gateway, "error", err)
		return nil, errs.New(errs.Unavailable, "gateways are unavailable; try again")
	}
	id, err := newSessionID()
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "mcp: session id")
	}
	scope.Session, scope.Surface = id, tenant.SurfaceMCP
	tb, err := h.opts.Core.OpenToolbox(ctx, scope, g, scope.User)
	if err != nil {
		var fe *completion.FieldError
		if errors.As(err, &fe) {
			return nil, &errs.Error{Kind: errs.InvalidArgument, Field: fe.Field, Err: err}
		}
		return nil, err
	}
	s := &session{id: id, scope: scope, gateway: g, toolbox: tb, opts: &h.opts, subscribed: map[string]fileState{}}
	s.server = mcp.NewServer(&mcp.Implementation{Name: "conch", Title: "conch: sandboxed shell, files and approvals", Version: h.opts.Version}, &mcp.ServerOptions{
		Instructions:              instructions(g, tb),
		GetSessionID:              func() string { return id },
		SupportedProtocolVersions: protocolVersions,
		SubscribeHandler:          s.subscribe,
		UnsubscribeHandler:        s.unsubscribe,
		Capabilities: &mcp.ServerCapabilities{
			Logging:   &mcp.LoggingCapabilities{},
			Tools:     &mcp.ToolCapabilities{},
			Resources: &mcp.ResourceCapabilities{Subscribe: true},
		},
	})
	s.addTools()
	s.addResources()
	// Added last, so it runs first: each request acts as the key that
	// sent it. A key revoked since the session opened is refused by the
	// router's auth before it gets here, and what a request does is
	// recorded against its own key.
	s.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			sc, ok := s.actAs(req.GetExtra())
			if !ok {
				return nil, errors.New("mcpserver: the request carries no credentials of the session's account")
			}
			return next(tenant.With(ctx, sc), method, req)
		}
	})
	return s, nil
}

func newSessionID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "mcp-" + hex.EncodeToString(b), nil
}

// session is one MCP session: its server, its caller and its tools.
type session struct {
	id      string
	scope   tenant.Scope
	gateway *routerv1.Gateway
	toolbox *completion.Toolbox
	server  *mcp.Server
	opts    *Options

	mu         sync.Mutex
	subscribed map[string]fileState // resource URI → what the client last heard
	closed     bool
	// responder is the scope of the request that last carried an answer
	// to a question the server asked the client.
	responder tenant.Scope
}

func (s *session) answeredBy(sc tenant.Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.responder = sc
}

// answerer is the scope an answer to the server's question acts as: the
// session's account and conversation with the key of the request that
// carried the answer.
func (s *session) answerer() (tenant.Scope, bool) {
	s.mu.Lock()
	r := s.responder
	s.mu.Unlock()
	if r.Account != s.scope.Account || r.Key == "" {
		return tenant.Scope{}, false
	}
	sc := s.scope
	sc.Key, sc.Admin = r.Key, r.Admin
	return sc, true
}

// live is the session's initialized MCP session, nil when there is none.
func (s *session) live() *mcp.ServerSession {
	for ss := range s.server.Sessions() {
		if ss.ID() == s.id && ss.InitializeParams() != nil {
			return ss
		}
	}
	return nil
}

// close releases the session's sandbox and tools.
func (s *session) close(ctx context.Context) {
	s.mu.Lock()
	done := s.closed
	s.closed = true
	s.mu.Unlock()
	if done {
		return
	}
	s.toolbox.Close(tenant.With(ctx, s.scope))
}

// ctx is ctx with the caller of the request being served (put there by
// the session's receiving middleware) as the scope of the calls it makes
// to the services, else the session's opener.
func (s *session) ctx(ctx context.Context) context.Context {
	if _, ok := tenant.From(ctx); ok {
		return ctx
	}
	return tenant.With(ctx, s.scope)
}

// actAs is the scope calls made for a request carried by extra run as:
// the session's account, conversation and user, with the key (and
// admin flag and surface) of that request. ok is false when the request
// carries no scope of the session's account.
func (s *session) actAs(extra *mcp.RequestExtra) (tenant.Scope, bool) {
	r, ok := requestScope(extra)
	if !ok || r.Account != s.scope.Account {
		return tenant.Scope{}, false
	}
	sc := s.scope
	sc.Key, sc.Admin = r.Key, r.Admin
	return sc, true
}

// log sends a log message to the client, which chose the least level it
// hears.
func (s *session) log(ctx context.Context, ss *mcp.ServerSession, level mcp.LoggingLevel, msg string) {
	_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: level, Logger: "conch", Data: msg})
}

// fail answers err in the envelope of conch's REST API; an upstream's
// error (tool servers that cannot be reached) keeps its own status, type
// and code, as on /v1.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ue *upstream.Error
	if errors.As(err, &ue) {
		apierror.WriteAnswer(w, errs.Answer{Status: ue.Status, Type: ue.Type, Code: ue.Code, Message: ue.Message})
		return
	}
	apierror.Write(r.Context(), h.opts.Logger, w, err)
}
