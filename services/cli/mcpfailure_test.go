package cli

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFailureTransport(t *testing.T) {
	t.Parallel()
	const rpcError = `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"unsupported protocol version"}}`
	for _, tt := range []struct {
		name    string
		method  string
		session string
		status  int
		body    string
		// wantMsg empty: the response passes as it is.
		wantMsg  string
		wantEnds bool
	}{
		{"a refused key", "POST", "", 401, `{"error":{"code":"invalid_api_key","message":"invalid API key","type":"invalid_request_error"}}`,
			"conch refused the API key (401): invalid API key", true},
		{"an unknown gateway", "POST", "", 404, `{"error":{"message":"gateway nope not found"}}`,
			"no MCP endpoint at /mcp/nope (404): gateway nope not found", true},
		{"a session conch no longer has", "POST", "s1", 404, "session not found\n",
			"conch no longer has this MCP session (404): session not found", true},
		{"a forbidden call", "POST", "s1", 403, `{"error":"not yours"}`,
			"conch refused the request (403): not yours", true},
		{"a server error", "POST", "s1", 503, "draining\nmore", "conch failed the request (503): draining", false},
		{"an error with no body", "POST", "s1", 413, "", "conch refused the request (413): Request Entity Too Large", false},
		{"a JSON-RPC answer passes", "POST", "", 400, rpcError, "", false},
		{"success passes", "POST", "s1", 200, `{"jsonrpc":"2.0","id":1,"result":{}}`, "", false},
		{"what is not a message passes", "GET", "s1", 404, "session not found", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+"/mcp/nope", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			if tt.session != "" {
				req.Header.Set("Mcp-Session-Id", tt.session)
			}
			resp, err := failureTransport{server: srv.URL, next: http.DefaultTransport}.RoundTrip(req)
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("RoundTrip = %v, want the response", err)
				}
				defer resp.Body.Close()
				if body, _ := io.ReadAll(resp.Body); resp.StatusCode != tt.status || string(body) != tt.body {
					t.Fatalf("response %d %q, want %d %q as conch sent it", resp.StatusCode, body, tt.status, tt.body)
				}
				return
			}
			var f *remoteFailure
			if !errors.As(err, &f) || f.Error() != tt.wantMsg || f.ends != tt.wantEnds {
				t.Fatalf("RoundTrip = %v, %v; want a failure %q (ends %v)", resp, err, tt.wantMsg, tt.wantEnds)
			}
		})
	}
}

func TestFailureTransportUnreachable(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "http://" + lis.Addr().String()
	_ = lis.Close() // nothing listens there now
	req, err := http.NewRequestWithContext(t.Context(), "POST", server+"/mcp/default", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = failureTransport{server: server, next: http.DefaultTransport}.RoundTrip(req)
	var f *remoteFailure
	if want := "conch at " + server + " is unreachable: connection refused"; !errors.As(err, &f) || f.Error() != want || !f.ends {
		t.Fatalf("RoundTrip = %v, want a failure %q that ends the session", err, want)
	}
}

func TestServerMessage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 200)
	for _, tt := range []struct {
		body, want string
	}{
		{`{"error":{"message":"invalid API key","type":"x"}}`, "invalid API key"},
		{`{"error":"plain"}`, "plain"},
		{`{"code":5,"message":"grpc-gateway's"}`, "grpc-gateway's"},
		{"  first line\nsecond", "first line"},
		{"", "Not Found"},
		{long, long[:300] + "…"},
	} {
		if got := serverMessage(http.StatusNotFound, []byte(tt.body)); got != tt.want {
			t.Errorf("serverMessage(%q) = %q, want %q", tt.body, got, tt.want)
		}
	}
}
