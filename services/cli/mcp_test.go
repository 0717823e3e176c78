package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// recorder is the client side of a bridge, keeping what it is sent.
type recorder struct{ sent []jsonrpc.Message }

func (r *recorder) Read(context.Context) (jsonrpc.Message, error) { return nil, io.EOF }
func (r *recorder) Write(_ context.Context, m jsonrpc.Message) error {
	r.sent = append(r.sent, m)
	return nil
}
func (*recorder) Close() error      { return nil }
func (*recorder) SessionID() string { return "" }

func TestFailed(t *testing.T) {
	t.Parallel()
	id, _ := jsonrpc.MakeID("c1")
	call := func(method string) *jsonrpc.Request { return &jsonrpc.Request{ID: id, Method: method} }
	protocol := &jsonrpc.Error{Code: -32602, Message: "unsupported protocol version"}
	keyRefused := &remoteFailure{msg: "conch refused the API key (401): invalid API key", ends: true}
	busy := &remoteFailure{msg: "conch failed the request (503): draining"}
	for _, tt := range []struct {
		name     string
		msg      jsonrpc.Message
		err      error
		up       bool
		wantCode int64 // 0: nothing sent
		wantMsg  string
		wantSaid bool
		wantEnd  bool
	}{
		{"conch's JSON-RPC answer passes", call("server/discover"), fmt.Errorf("sending: %w", protocol), false, -32602, "unsupported protocol version", false, false},
		{"a failed handshake ends the bridge", call("initialize"), fmt.Errorf("sending: %w", keyRefused), false, codeInternal, keyRefused.msg, true, true},
		{"a failed probe before the handshake does not", call("server/discover"), fmt.Errorf("sending: %w", keyRefused), false, codeInternal, keyRefused.msg, true, false},
		{"a refused key ends an open session", call("tools/list"), keyRefused, true, codeInternal, keyRefused.msg, true, true},
		{"a failed call leaves an open session", call("tools/call"), busy, true, codeInternal, busy.msg, true, false},
		{"a failed notification is said, not answered", &jsonrpc.Request{Method: "notifications/initialized"}, keyRefused, true, 0, "", true, true},
		{"anything else is answered with its text", call("tools/list"), errors.New("sending: Bad Request"), true, codeInternal, "sending: Bad Request", true, false},
		{"the SDK's rejection is answered with the whole text", call("tools/list"),
			fmt.Errorf("sending: %w: odd", &jsonrpc.Error{Code: codeRejected, Message: "rejected by transport"}), true, codeInternal, "sending: rejected by transport: odd", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			local := &recorder{}
			var said []string
			err := failed(t.Context(), local, tt.msg, tt.err, tt.up, func(line string) { said = append(said, line) })
			if ended := errors.Is(err, errBridgeFailed); ended != tt.wantEnd || (err != nil && !ended) {
				t.Fatalf("failed = %v, want the bridge ended: %v", err, tt.wantEnd)
			}
			if tt.wantSaid != (len(said) == 1) || (tt.wantSaid && tt.wantMsg != "" && said[0] != tt.wantMsg) {
				t.Errorf("said %q on stderr, want one line: %v (%q)", said, tt.wantSaid, tt.wantMsg)
			}
			if tt.wantCode == 0 {
				if len(local.sent) != 0 {
					t.Fatalf("sent %v for a notification", local.sent)
				}
				return
			}
			if len(local.sent) != 1 {
				t.Fatalf("sent %d messages, want 1", len(local.sent))
			}
			resp, ok := local.sent[0].(*jsonrpc.Response)
			var werr *jsonrpc.Error
			if !ok || resp.ID != id || !errors.As(resp.Error, &werr) || werr.Code != tt.wantCode || werr.Message != tt.wantMsg {
				t.Fatalf("sent %+v, want error %d %q for the call", local.sent[0], tt.wantCode, tt.wantMsg)
			}
		})
	}
}

func TestFromSide(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		side    string
		err     error
		wantNil bool
	}{
		{"client", io.EOF, true},
		{"client", fmt.Errorf("read: %w", io.EOF), true},
		{"router", context.Canceled, true},
		{"router", errors.New("session not found"), false},
		{"client", errors.New("line too long"), false},
	} {
		if got := fromSide(tt.side, tt.err); (got == nil) != tt.wantNil {
			t.Errorf("fromSide(%s, %v) = %v, want nil: %v", tt.side, tt.err, got, tt.wantNil)
		}
	}
}
