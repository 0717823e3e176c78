package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

const mcpUsage = `usage: conch mcp [flags]

Serve conch to an MCP client that launches local processes (Claude Desktop,
Cursor, ...): MCP over stdin/stdout here, streamable HTTP to the router's
/mcp/<gateway> endpoint there. Sessions, tools, approvals and files are the
router's; when the client closes stdin the session ends and its sandbox
is released.

flags: --server URL, --api-key KEY, --gateway NAME (default default),
--user ID (the user whose persistent workspace the shell uses)
`

// MCP bridges an MCP client speaking stdio to the router's MCP endpoint.
func MCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if wantsHelp(args) {
		fmt.Fprint(stdout, mcpUsage)
		return nil
	}
	fs := flag.NewFlagSet("conch mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	o.AddFlags(fs)
	gateway := fs.String("gateway", envOr("CONCH_GATEWAY", "default"), "gateway whose tools and settings govern the session (env CONCH_GATEWAY)")
	user := fs.String("user", envOr("CONCH_USER", ""), "user whose persistent workspace the shell uses (env CONCH_USER)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("conch mcp takes no arguments, got %q", fs.Args())
	}
	if *user != "" && !tenant.ValidUserID(*user) {
		return Usagef("--user: must be 1-128 characters of [A-Za-z0-9._@-], not \".\" or \"..\"")
	}
	c, err := NewClient(&o)
	if err != nil {
		return err
	}
	header := http.Header{}
	header.Set("Authorization", "Bearer "+c.key)
	if *user != "" {
		header.Set("X-Shell-User-Id", *user)
	}
	remote, err := (&mcp.StreamableClientTransport{
		Endpoint:   c.base + "/mcp/" + url.PathEscape(*gateway),
		HTTPClient: &http.Client{Transport: headerTransport{header: header, next: http.DefaultTransport}},
	}).Connect(ctx)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", c.base, err)
	}
	local, err := (&mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}).Connect(ctx)
	if err != nil {
		return err
	}
	endpoint := c.base + "/mcp/" + url.PathEscape(*gateway)
	listen := func(ctx context.Context, version string) error {
		return listenSSE(ctx, endpoint, header, remote.SessionID(), version, local)
	}
	return bridge(ctx, local, remote, listen)
}

// bridge passes messages both ways until either side ends; the end of
// the local side (the client closed stdin) closes the remote session.
// Once the session is initialized, listen carries what the router sends
// outside any call (a subscribed resource's change) to the client: the
// SDK's transport opens that stream only for a client session of its
// own, which a bridge passing messages through does not have.
func bridge(ctx context.Context, local, remote mcp.Connection, listen func(ctx context.Context, version string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	var (
		mu   sync.Mutex
		init jsonrpc.ID
	)
	pass := func(from, to mcp.Connection, side string) {
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				errc <- fromSide(side, err)
				return
			}
			switch m := msg.(type) {
			case *jsonrpc.Request:
				if m.Method == "initialize" {
					mu.Lock()
					init = m.ID
					mu.Unlock()
				}
			case *jsonrpc.Response:
				mu.Lock()
				initialized := init.IsValid() && m.ID == init && m.Error == nil
				mu.Unlock()
				if version := protocolVersion(m.Result); initialized && version != "" && listen != nil {
					go func() {
						if err := listen(ctx, version); err != nil && ctx.Err() == nil {
							errc <- fmt.Errorf("router: %w", err)
						}
					}()
				}
			}
			err = to.Write(ctx, msg)
			if err != nil && side == "client" {
				// The router refused one message (an unsupported
				// protocol version, a bad request): the client hears it
				// as that call's error and the session goes on. A lost
				// session ends the remote side's reads.
				err = refused(ctx, local, msg, err)
			}
			if err != nil {
				errc <- fromSide(side, err)
				return
			}
		}
	}
	go pass(local, remote, "client")
	go pass(remote, local, "router")
	err := <-errc
	cancel()
	_ = remote.Close()
	_ = local.Close()
	return err
}

// refused answers the client's call msg, which the router refused with
// err, with that error; a refused notification has no one to answer.
func refused(ctx context.Context, local mcp.Connection, msg jsonrpc.Message, err error) error {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return nil
	}
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		werr = &jsonrpc.Error{Code: -32603, Message: err.Error()}
	}
	return local.Write(ctx, &jsonrpc.Response{ID: req.ID, Error: werr})
}

// fromSide is the end of the bridge: nil when the client went away, which
// is how a client ends its session.
func fromSide(side string, err error) error {
	if side == "client" && (errors.Is(err, io.EOF) || errors.Is(err, context.Canceled)) {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("%s: %w", side, err)
}

// protocolVersion is the version an initialize result agreed on.
func protocolVersion(result json.RawMessage) string {
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(result, &r)
	return r.ProtocolVersion
}

// listenSSE opens the session's stream for messages outside any call
// (MCP's GET on the endpoint) and passes each to local until the stream
// or ctx ends.
func listenSSE(ctx context.Context, endpoint string, header http.Header, session, version string, local mcp.Connection) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("session stream: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0 && len(data) > 0:
			msg, err := jsonrpc.DecodeMessage(data)
			data = data[:0]
			if err != nil {
				continue
			}
			if err := local.Write(ctx, msg); err != nil {
				return err
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		}
	}
	return sc.Err()
}

// headerTransport adds the key and the user to every request.
type headerTransport struct {
	header http.Header
	next   http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.header {
		r.Header[k] = v
	}
	return t.next.RoundTrip(r)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
