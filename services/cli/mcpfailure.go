package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A remoteFailure is a request of the bridge that conch did not answer
// in MCP's terms: conch was unreachable, or it refused the request with
// an HTTP error rather than a JSON-RPC answer. Its message says what
// happened in plain words, for the user of the MCP client, who sees it
// as the answer to their request.
type remoteFailure struct {
	msg string
	// ends reports that the session cannot go on: conch is unreachable,
	// refused the key, or has no such endpoint or session.
	ends bool
	err  error
}

func (f *remoteFailure) Error() string { return f.msg }
func (f *remoteFailure) Unwrap() error { return f.err }

// failureTransport turns what goes wrong with the bridge's messages to
// conch into a *remoteFailure. The MCP SDK would say "rejected by
// transport" for an unreachable server and drop the body of an HTTP
// error; the client's user would learn nothing. An HTTP error whose body
// is a JSON-RPC answer (an unsupported protocol version) passes as it
// is: the SDK hands that answer to the client.
type failureTransport struct {
	// server is conch's URL as the user gave it.
	server string
	next   http.RoundTripper
}

// RoundTrip sends r; only messages (POSTs) are judged: the SDK's own
// GETs and DELETEs keep their handling.
func (t failureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if r.Method != http.MethodPost {
		return resp, err
	}
	if err != nil {
		if r.Context().Err() != nil {
			return nil, err
		}
		return nil, unreachable(t.server, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	if msg, err := jsonrpc.DecodeMessage(body); err == nil {
		if answer, ok := msg.(*jsonrpc.Response); ok && answer.Error != nil {
			resp.Body = io.NopCloser(bytes.NewReader(body))
			return resp, nil
		}
	}
	return nil, httpFailure(r, resp.StatusCode, body)
}

// maxErrorBody bounds what is read of an HTTP error's body.
const maxErrorBody = 64 << 10

// unreachable is the failure of a request that did not reach conch at
// server.
func unreachable(server string, err error) *remoteFailure {
	return &remoteFailure{msg: fmt.Sprintf("conch at %s is unreachable: %s", server, netReason(err)), ends: true, err: err}
}

// netReason is why a connection failed, in the words of the system
// ("connection refused"), without the layers of addresses around them.
func netReason(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return fmt.Sprintf("cannot resolve %s: %s", dns.Name, dns.Err)
	}
	var sys *os.SyscallError
	if errors.As(err, &sys) {
		return sys.Err.Error()
	}
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		return "timed out"
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Err.Error()
	}
	return err.Error()
}

// httpFailure is the failure of request r, which conch answered with the
// HTTP error code and body.
func httpFailure(r *http.Request, code int, body []byte) *remoteFailure {
	msg := serverMessage(code, body)
	f := &remoteFailure{ends: true}
	switch {
	case code == http.StatusUnauthorized:
		f.msg = fmt.Sprintf("conch refused the API key (%d): %s", code, msg)
	case code == http.StatusForbidden:
		f.msg = fmt.Sprintf("conch refused the request (%d): %s", code, msg)
	case code == http.StatusNotFound && r.Header.Get("Mcp-Session-Id") != "":
		f.msg = fmt.Sprintf("conch no longer has this MCP session (%d): %s", code, msg)
	case code == http.StatusNotFound:
		f.msg = fmt.Sprintf("no MCP endpoint at %s (%d): %s", r.URL.Path, code, msg)
	case code >= 500:
		f.msg, f.ends = fmt.Sprintf("conch failed the request (%d): %s", code, msg), false
	default:
		f.msg, f.ends = fmt.Sprintf("conch refused the request (%d): %s", code, msg), false
	}
	return f
}

// serverMessage is what the body of conch's HTTP error says: the message
// of its JSON error, else its first line of text, else the status.
func serverMessage(code int, body []byte) string {
	var shaped struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &shaped) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var text string
		switch {
		case json.Unmarshal(shaped.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(shaped.Error, &text) == nil && text != "":
			return text
		case shaped.Message != "":
			return shaped.Message
		}
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if line = strings.TrimSpace(line); line != "" {
		const most = 300
		if len(line) > most {
			cut := most
			for cut > 0 && !utf8.RuneStart(line[cut]) {
				cut--
			}
			line = line[:cut] + "…"
		}
		return line
	}
	return http.StatusText(code)
}
