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

func TestRefused(t *testing.T) {
	t.Parallel()
	id, _ := jsonrpc.MakeID("c1")
	protocol := &jsonrpc.Error{Code: -32602, Message: "unsupported protocol version"}
	for _, tt := range []struct {
		name     string
		msg      jsonrpc.Message
		err      error
		wantCode int64 // 0: nothing sent
		wantMsg  string
	}{
		{"call refused with a JSON-RPC error", &jsonrpc.Request{ID: id, Method: "server/discover"}, fmt.Errorf("sending: %w", protocol), -32602, "unsupported protocol version"},
		{"call refused otherwise", &jsonrpc.Request{ID: id, Method: "tools/list"}, errors.New("sending: Bad Request"), -32603, "sending: Bad Request"},
		{"notification refused", &jsonrpc.Request{Method: "notifications/initialized"}, errors.New("Bad Request"), 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			local := &recorder{}
			if err := refused(t.Context(), local, tt.msg, tt.err); err != nil {
				t.Fatal(err)
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
