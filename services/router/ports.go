package router

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/signing"
	"github.com/conch-sh/conch/services/router/apierror"
)

// portRoutes serve a sandbox's exposed ports: POST, GET and DELETE
// /api/v1/sandboxes/{id}/ports[/{port}], and the proxy to each, HTTP and
// WebSocket, through the executor, which dials the port on the sandbox's
// own loopback. A private port's URL,
// /api/v1/sandboxes/{id}/ports/{port}/proxy/, needs the account's key; a
// public one's, /ports/{token}/, is signed and expires.
type portRoutes struct {
	exec   executorv1.ExecutorServiceClient
	tokens *signing.Signer
	proxy  *httputil.ReverseProxy
	log    *slog.Logger
}

// portClaims are what a public port URL grants: the one port, while it
// is exposed as public, until it expires.
type portClaims struct {
	Account string `json:"a"`
	Sandbox string `json:"s"`
	Port    int32  `json:"p"`
	Expires int64  `json:"x"`
}

func (c portClaims) ExpiresAt() int64 { return c.Expires }

// portTarget is where a proxied request goes, carried in its context to
// the transport's dial.
type portTarget struct {
	sandbox string
	port    int32
	public  bool
}

type portTargetKey struct{}

// portSandboxPolicy makes every response from a sandbox's port a page of
// an opaque origin of its own (no allow-same-origin): its scripts run,
// but cannot read conch's storage or call its API with the browser's
// state.
const portSandboxPolicy = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

func newPortRoutes(exec executorv1.ExecutorServiceClient, internalSecret []byte, log *slog.Logger) (*portRoutes, error) {
	tokens, err := signing.NewFor(signing.Port, []signing.Key{signing.DerivedKey(signing.Port, internalSecret)})
	if err != nil {
		return nil, err
	}
	p := &portRoutes{exec: exec, tokens: tokens, log: log}
	tr := &http.Transport{
		DialContext:         p.dial,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
	}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(portTargetKey{}).(portTarget)
			scope, _ := tenant.From(pr.In.Context())
			// The connection pool is keyed by host: one per account,
			// sandbox, port and kind of URL, so that no connection let
			// in for one serves another.
			sum := sha256.Sum256([]byte(scope.Account))
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = fmt.Sprintf("%s.%d.%t.%s.port", t.sandbox, t.port, t.public, hex.EncodeToString(sum[:8]))
			pr.Out.URL.Path = "/" + pr.In.PathValue("rest")
			pr.Out.URL.RawPath = ""
			pr.Out.Host = "localhost:" + strconv.Itoa(int(t.port))
			// The key stays with conch: the sandbox's server never sees it.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("X-Api-Key")
			pr.SetXForwarded()
		},
		Transport: tr,
		// What a sandbox serves comes from conch's own origin, where the
		// approvals page keeps the user's key: it runs as an origin of
		// its own, which reaches none of conch's storage or pages, with
		// whatever policy of its own it sends besides.
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Add("Content-Security-Policy", portSandboxPolicy)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			apierror.Write(r.Context(), log, w, portError(err))
		},
	}
	return p, nil
}

func (p *portRoutes) register(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("POST /api/v1/sandboxes/{sandbox_id}/ports", auth(http.HandlerFunc(p.expose)))
	mux.Handle("GET /api/v1/sandboxes/{sandbox_id}/ports", auth(http.HandlerFunc(p.list)))
	mux.Handle("DELETE /api/v1/sandboxes/{sandbox_id}/ports/{port}", auth(http.HandlerFunc(p.close)))
	mux.Handle("/api/v1/sandboxes/{sandbox_id}/ports/{port}/proxy/{rest...}", auth(http.HandlerFunc(p.private)))
	mux.Handle("/ports/{token}/{rest...}", http.HandlerFunc(p.public))
}

// portJSON is a port as the API answers it.
func (p *portRoutes) portJSON(r *http.Request, sandbox string, pt *executorv1.Port) (map[string]any, error) {
	scope, _ := tenant.From(r.Context())
	base := strings.TrimRight(scope.PublicURL, "/")
	out := map[string]any{"port": pt.GetPort(), "public": pt.GetPublic()}
	if pt.GetExpiresAt() != nil {
		out["expires_at"] = pt.GetExpiresAt().AsTime().UTC().Format(time.RFC3339)
	}
	if !pt.GetPublic() {
		out["url"] = base + "/api/v1/sandboxes/" + url.PathEscape(sandbox) + "/ports/" + strconv.Itoa(int(pt.GetPort())) + "/proxy/"
		return out, nil
	}
	tok, err := p.tokens.Sign(portClaims{Account: scope.Account, Sandbox: sandbox, Port: pt.GetPort(), Expires: pt.GetExpiresAt().AsTime().Unix()})
	if err != nil {
		return nil, err
	}
	out["url"] = base + "/ports/" + tok + "/"
	return out, nil
}

func (p *portRoutes) expose(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Port             int32 `json:"port"`
		Public           bool  `json:"public"`
		ExpiresInSeconds int32 `json:"expires_in_seconds"`
	}
	if err := decodeSmallBody(w, r, &req, false, `{"port", "public", "expires_in_seconds"}`); err != nil {
		apiErrors(w, err)
		return
	}
	id := r.PathValue("sandbox_id")
	resp, err := p.exec.ExposePort(r.Context(), &executorv1.ExposePortRequest{SandboxId: id, Port: req.Port, Public: req.Public, ExpiresInSeconds: req.ExpiresInSeconds})
	if err != nil {
		apierror.Write(r.Context(), p.log, w, err)
		return
	}
	out, err := p.portJSON(r, id, resp.GetPort())
	if err != nil {
		apierror.Write(r.Context(), p.log, w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (p *portRoutes) list(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("sandbox_id")
	resp, err := p.exec.ListPorts(r.Context(), &executorv1.ListPortsRequest{SandboxId: id})
	if err != nil {
		apierror.Write(r.Context(), p.log, w, err)
		return
	}
	ports := []map[string]any{}
	for _, pt := range resp.GetPorts() {
		out, err := p.portJSON(r, id, pt)
		if err != nil {
			apierror.Write(r.Context(), p.log, w, err)
			return
		}
		ports = append(ports, out)
	}
	writeJSON(w, http.StatusOK, map[string]any{"ports": ports})
}

func (p *portRoutes) close(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.ParseInt(r.PathValue("port"), 10, 32)
	if err != nil {
		apiErrors(w, errs.Invalid("port", "must be a number"))
		return
	}
	if _, err := p.exec.ClosePort(r.Context(), &executorv1.ClosePortRequest{SandboxId: r.PathValue("sandbox_id"), Port: int32(port)}); err != nil {
		apierror.Write(r.Context(), p.log, w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// private proxies a request to a port by its private URL, as the key.
func (p *portRoutes) private(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.ParseInt(r.PathValue("port"), 10, 32)
	if err != nil {
		apiErrors(w, errs.Invalid("port", "must be a number"))
		return
	}
	t := portTarget{sandbox: r.PathValue("sandbox_id"), port: int32(port)}
	p.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), portTargetKey{}, t)))
}

// public proxies a request to a port by its signed URL.
func (p *portRoutes) public(w http.ResponseWriter, r *http.Request) {
	var c portClaims
	if err := p.tokens.VerifyInto(r.PathValue("token"), &c); err != nil {
		apiErrors(w, err)
		return
	}
	ctx := tenant.With(r.Context(), tenant.Scope{Account: c.Account, PublicURL: requestBaseURL(r)})
	t := portTarget{sandbox: c.Sandbox, port: c.Port, public: true}
	p.proxy.ServeHTTP(w, r.WithContext(context.WithValue(ctx, portTargetKey{}, t)))
}

// dial opens a connection to the request's port through the executor.
// It outlives the request (the transport keeps it for the next), so it
// keeps the request's scope, not its cancellation.
func (p *portRoutes) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	t, ok := ctx.Value(portTargetKey{}).(portTarget)
	if !ok {
		return nil, errors.New("router: a port connection without its target")
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := p.exec.ConnectPort(sctx)
	if err == nil {
		err = stream.Send(&executorv1.ConnectPortRequest{SandboxId: t.sandbox, Port: t.port, Public: t.public})
	}
	if err == nil {
		// The executor's first word: connected, or why not.
		_, err = stream.Recv()
	}
	if err != nil {
		cancel()
		return nil, &portDialError{err}
	}
	return &portConn{stream: stream, cancel: cancel}, nil
}

// portDialError carries the executor's refusal to the error handler.
type portDialError struct{ err error }

func (e *portDialError) Error() string { return e.err.Error() }
func (e *portDialError) Unwrap() error { return e.err }

// portError is what a client is told of a proxy's failure: the
// executor's refusal (no sandbox, a port not exposed, nothing answering)
// as the API's error, anything else as the sandbox's server failing.
func portError(err error) error {
	var d *portDialError
	if errors.As(err, &d) {
		return d.err
	}
	return errs.New(errs.Unavailable, "the sandbox's server failed: %v", err)
}

// portConn is a ConnectPort stream as a net.Conn.
type portConn struct {
	stream executorv1.ExecutorService_ConnectPortClient
	cancel context.CancelFunc
	buf    []byte
	wmu    sync.Mutex
	once   sync.Once
}

func (c *portConn) Read(b []byte) (int, error) {
	for len(c.buf) == 0 {
		m, err := c.stream.Recv()
		if err != nil {
			return 0, io.EOF
		}
		c.buf = m.GetData()
	}
	n := copy(b, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *portConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	sent := 0
	for sent < len(b) {
		n := min(len(b)-sent, 32<<10)
		if err := c.stream.Send(&executorv1.ConnectPortRequest{Data: b[sent : sent+n]}); err != nil {
			return sent, err
		}
		sent += n
	}
	return sent, nil
}

func (c *portConn) Close() error {
	c.once.Do(func() {
		_ = c.stream.CloseSend()
		c.cancel()
	})
	return nil
}

// CloseWrite ends what is sent; the port's answer still comes.
func (c *portConn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.stream.CloseSend()
}

func (c *portConn) LocalAddr() net.Addr              { return portAddr{} }
func (c *portConn) RemoteAddr() net.Addr             { return portAddr{} }
func (c *portConn) SetDeadline(time.Time) error      { return nil }
func (c *portConn) SetReadDeadline(time.Time) error  { return nil }
func (c *portConn) SetWriteDeadline(time.Time) error { return nil }

type portAddr struct{}

func (portAddr) Network() string { return "conch-port" }
func (portAddr) String() string  { return "sandbox-port" }
