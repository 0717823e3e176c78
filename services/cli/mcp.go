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
	"os"
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

When conch is unreachable, refuses the key, has no such gateway or fails
a request, the client's request is answered with an error that says so
(e.g. "conch refused the API key (401): invalid API key"), and the same
line goes to stderr. When the session cannot go on, or never began, the
bridge then exits with code 1. When it cannot start at all (bad flags, no
key), it says why in one line on stderr and exits non-zero.
`

var mcpGroup = &group{
	name:    "mcp",
	summary: "serve a gateway to an MCP client over stdio",
	usage:   mcpUsage,
	flags:   func(string) *flag.FlagSet { return new(mcpFlags).flagSet("") },
}

// mcpFlags are the values of conch mcp's flags.
type mcpFlags struct {
	Options
	gateway, user string
}

// flagSet is conch mcp's flag set, bound to f: what the command parses
// and what its help lists. A command alone, it has no commands to tell
// apart.
func (f *mcpFlags) flagSet(string) *flag.FlagSet {
	fs := f.newFlagSet("conch mcp")
	fs.StringVar(&f.gateway, "gateway", "", "the gateway `NAME` whose tools and settings govern the session (env CONCH_GATEWAY, else default)")
	fs.StringVar(&f.user, "user", "", "the `USER` whose persistent workspace the shell uses (env CONCH_USER)")
	return fs
}

// MCP bridges an MCP client speaking stdio to the router's MCP endpoint.
func MCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	// A desktop client shows the bridge's stderr in a log: a bad flag is
	// one line there, not the flags' list (as on every command).
	var f mcpFlags
	if _, _, err := mcpGroup.parse(stdout, args, f.flagSet); err != nil {
		return err
	}
	if f.gateway == "" {
		f.gateway = envOr("CONCH_GATEWAY", "default")
	}
	if f.user == "" {
		f.user = os.Getenv("CONCH_USER")
	}
	if f.user != "" && !tenant.ValidUserID(f.user) {
		return Usagef("--user: must be %s", tenant.UserIDRule)
	}
	c, err := NewClient(&f.Options)
	if err != nil {
		return err
	}
	header := http.Header{}
	header.Set("Authorization", "Bearer "+c.key)
	if f.user != "" {
		header.Set("X-Shell-User-Id", f.user)
	}
	endpoint := c.base + "/mcp/" + url.PathEscape(f.gateway)
	remote, err := (&mcp.StreamableClientTransport{
		Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: failureTransport{
			server: c.base, next: headerTransport{header: header, next: http.DefaultTransport},
		}},
	}).Connect(ctx)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", c.base, err)
	}
	local, err := (&mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}).Connect(ctx)
	if err != nil {
		return err
	}
	listen := func(ctx context.Context, version string) error {
		return listenSSE(ctx, c.base, endpoint, header, remote.SessionID(), version, local)
	}
	if err := bridge(ctx, local, remote, listen, stderr); errors.Is(err, errBridgeFailed) {
		// Said on stderr already, and to the client.
		return &ExitError{Code: 1}
	} else if err != nil {
		return err
	}
	return nil
}

// errBridgeFailed ends a bridge whose failure it has said on stderr.
var errBridgeFailed = errors.New("conch mcp: the bridge failed")

// bridge passes messages both ways until either side ends; the end of
// the local side (the client closed stdin) closes the remote session.
// Once the session is initialized, listen carries what the router sends
// outside any call (a subscribed resource's change) to the client: the
// SDK's transport opens that stream only for a client session of its
// own, which a bridge passing messages through does not have. A stream
// that broke (conch stopped, a proxy cut it) opens again after the next
// call conch answers; the call met by a conch that went away says so.
//
// What does not reach conch, or what conch refuses other than with a
// JSON-RPC answer, is said on stderr as one line (see failed). The
// bridge then ends with errBridgeFailed when the session cannot go on,
// and when the client leaves before a session began.
func bridge(ctx context.Context, local, remote mcp.Connection, listen func(ctx context.Context, version string) error, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	var (
		mu   sync.Mutex
		init jsonrpc.ID
		// up is set once the router has answered a call: it is reached,
		// takes the key and serves the gateway.
		up bool
		// version is the session's protocol version, once initialized;
		// listening, whether listen runs.
		version   string
		listening bool
		// said is the last line written to stderr: a failure met by
		// several requests in a row (the client's probe, then its
		// handshake) is said once.
		said string
	)
	say := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		if line != said {
			fmt.Fprintf(stderr, "conch mcp: %s\n", line)
			said = line
		}
	}
	isUp := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return up
	}
	failedBeforeUp := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !up && said != ""
	}
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
				if init.IsValid() && m.ID == init && m.Error == nil {
					version = protocolVersion(m.Result)
				}
				answered := side == "router" && m.Error == nil
				up = up || answered
				// The stream opens with the session, and opens again
				// after a call conch answered once it broke.
				open := answered && version != "" && listen != nil && !listening
				listening = listening || open
				v := version
				mu.Unlock()
				if open {
					go func() {
						err := listen(ctx, v)
						mu.Lock()
						listening = false
						mu.Unlock()
						if err != nil && ctx.Err() == nil {
							errc <- fmt.Errorf("router: %w", err)
						}
					}()
				}
			}
			err = to.Write(ctx, msg)
			if err != nil && side == "client" {
				err = failed(ctx, local, msg, err, isUp(), say)
			}
			if err != nil {
				if !errors.Is(err, errBridgeFailed) {
					err = fromSide(side, err)
				}
				errc <- err
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
	var rf *remoteFailure
	switch {
	case errors.As(err, &rf):
		// The router's side: the session's stream failed.
		say(rf.Error())
		return errBridgeFailed
	case err == nil && failedBeforeUp():
		// The client left after failures, before any session began.
		return errBridgeFailed
	}
	return err
}

// codeInternal is JSON-RPC's internal error: the code of the answers the
// bridge makes up for what did not reach conch.
const codeInternal = -32603

// codeRejected is the code of the MCP SDK's "rejected by transport",
// which says nothing of why: such an error is answered with its whole
// text instead.
const codeRejected = -32005

// failed handles the client's message msg, which conch did not take
// (err), when the session is up or not: a call gets err as its answer (a
// notification has no one to answer). A JSON-RPC answer of conch's (an
// unsupported protocol version) passes as it is, and the session goes
// on. Anything else is also said on stderr; it ends the bridge
// (errBridgeFailed) when the session cannot go on: conch became
// unreachable, or refused the key, the endpoint or the session once the
// session was up, or the handshake (initialize) itself failed. Before
// that, a client's probe (server/discover) that fails is answered, and
// the client goes on to its handshake.
func failed(ctx context.Context, local mcp.Connection, msg jsonrpc.Message, err error, up bool, say func(string)) error {
	req, _ := msg.(*jsonrpc.Request)
	handshake := req != nil && req.Method == "initialize"
	var (
		rf   *remoteFailure
		werr *jsonrpc.Error
		end  bool
	)
	switch {
	case errors.As(err, &rf):
		werr = &jsonrpc.Error{Code: codeInternal, Message: rf.Error()}
		say(rf.Error())
		end = (up && rf.ends) || (!up && handshake)
	case errors.As(err, &werr) && werr.Code != codeRejected:
	default:
		werr = &jsonrpc.Error{Code: codeInternal, Message: err.Error()}
		say(err.Error())
		end = !up && handshake
	}
	if req != nil && req.IsCall() {
		if err := local.Write(ctx, &jsonrpc.Response{ID: req.ID, Error: werr}); err != nil {
			return err
		}
	}
	if end {
		return errBridgeFailed
	}
	return nil
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
// (MCP's GET on the endpoint of conch at server) and passes each to local
// until the stream or ctx ends. The stream's end, or its break, is no
// error: only failing to open it, or to pass a message on, is.
func listenSSE(ctx context.Context, server, endpoint string, header http.Header, session, version string, local mcp.Connection) error {
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
		if ctx.Err() != nil {
			return err
		}
		return unreachable(server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return httpFailure(req, resp.StatusCode, body)
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
	return nil
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
