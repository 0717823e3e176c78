package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"

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
	return bridge(ctx, local, remote)
}

// bridge passes messages both ways until either side ends; the end of
// the local side (the client closed stdin) closes the remote session.
func bridge(ctx context.Context, local, remote mcp.Connection) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	pass := func(from, to mcp.Connection, side string) {
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				errc <- fromSide(side, err)
				return
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
