package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// headerTransport adds headers to every request of an MCP client.
type headerTransport http.Header

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpConnect opens an MCP session on the router's endpoint path as the
// holder of key, with headers added (name, value, ...).
func mcpConnect(t *testing.T, d *dev, key, path string, opts *mcp.ClientOptions, headers ...string) *mcp.ClientSession {
	t.Helper()
	h := headerTransport{"Authorization": {"Bearer " + key}}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = []string{headers[i+1]}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "conch-e2e", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: d.URL + path, HTTPClient: &http.Client{Transport: h}}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", path, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpShell is the shell's result of a call (docs/reference/openai-api.md).
type mcpShell struct {
	Stdout, Stderr, Error string
	Outcome               struct {
		Type     string
		ExitCode int `json:"exit_code"`
	}
}

// shell runs command with the shell tool and returns its result.
func shell(t *testing.T, ctx context.Context, cs *mcp.ClientSession, command string) mcpShell {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "shell", Arguments: map[string]any{"command": command}})
	if err != nil {
		t.Fatalf("shell %q: %v", command, err)
	}
	var out mcpShell
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("shell %q: structured content %s: %v", command, b, err)
	}
	return out
}

// sessionHasSandbox reports whether a running sandbox belongs to the
// session.
func sessionHasSandbox(t *testing.T, d *dev, session string) bool {
	t.Helper()
	code, body := d.call("GET", "/api/v1/sandboxes", d.Key, nil)
	if code != http.StatusOK {
		t.Fatalf("list sandboxes = %d %s", code, body)
	}
	var list struct {
		Sandboxes []struct{ Session, State string }
	}
	_ = json.Unmarshal(body, &list)
	for _, sb := range list.Sandboxes {
		if sb.Session == session && sb.State == "ready" {
			return true
		}
	}
	return false
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCP drives conch's MCP endpoint with the official Go SDK's client.
func TestMCP(t *testing.T) {
	d := startDev(t)
	createGateway(t, d, map[string]any{"name": "mcp-persist", "upstream": map[string]any{"provider": "scripted"},
		"shell": map[string]any{"allow_data_persistence": true}})
	createGateway(t, d, map[string]any{"name": "mcp-strict", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})

	t.Run("initialize and list tools", func(t *testing.T) {
		cs := mcpConnect(t, d, d.Key, "/mcp", nil)
		if got := cs.InitializeResult().ServerInfo.Name; got != "conch" {
			t.Fatalf("server name = %q", got)
		}
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		tools := map[string]*mcp.Tool{}
		for _, tl := range res.Tools {
			tools[tl.Name] = tl
		}
		for _, name := range []string{"shell", "exec", "process", "read_file", "write_file", "list_files", "stat", "delete"} {
			if tools[name] == nil {
				t.Errorf("tool %s not listed; got %v", name, res.Tools)
			}
		}
		if a := tools["shell"].Annotations; a == nil || a.DestructiveHint == nil || !*a.DestructiveHint {
			t.Errorf("shell annotations = %+v", a)
		}
		if a := tools["read_file"].Annotations; a == nil || !a.ReadOnlyHint {
			t.Errorf("read_file annotations = %+v", a)
		}
		if tools["public_url"] != nil {
			t.Errorf("public_url offered without a persistent workspace")
		}
	})

	t.Run("the gateway's direct and moved tools and skills", func(t *testing.T) {
		hook, _ := startWebhook(t)
		calc := startMCP(t)
		createGateway(t, d, map[string]any{"name": "mcp-tools", "upstream": map[string]any{"provider": "scripted"},
			"shell": map[string]any{"tools": map[string]any{"mode": "whitelist", "names": []string{"add"}}},
			"tools": map[string]any{
				"webhooks": []any{map[string]any{"name": "get_users", "description": "List the users of the CRM.", "url": hook.URL,
					"parameters_schema": `{"type":"object","properties":{"filter":{"type":"string","enum":["active","inactive"]}},"required":["filter"]}`}},
				"mcp_servers": []any{map[string]any{"name": "calc", "url": calc.URL}},
			},
			"skills": []any{map[string]any{"name": "greet", "description": "how to greet", "content": "Say hello."}},
		})
		cs := mcpConnect(t, d, d.Key, "/mcp/mcp-tools", nil)
		list, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, tl := range list.Tools {
			names[tl.Name] = true
		}
		if !names["get_users"] || !names["read_skill"] || names["add"] {
			t.Fatalf("tools = %v: want get_users and read_skill offered, add moved into the shell", names)
		}
		if r := shell(t, t.Context(), cs, "add --a 2 --b 40"); !strings.Contains(r.Stdout, "42") {
			t.Fatalf("moved tool in the shell = %+v", r)
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get_users", Arguments: map[string]any{"filter": "active"}})
		if err != nil || res.IsError || !strings.Contains(toolText(res), "John Doe") {
			t.Fatalf("direct tool = %+v %q, %v", res, toolText(res), err)
		}
		res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get_users", Arguments: map[string]any{"filter": "everyone"}})
		if err != nil || !res.IsError || !strings.Contains(toolText(res), "filter") {
			t.Fatalf("direct tool with a bad argument = %+v %q, %v", res, toolText(res), err)
		}
		res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_skill", Arguments: map[string]any{"name": "greet"}})
		if err != nil || res.IsError || toolText(res) != "Say hello." {
			t.Fatalf("read_skill = %+v %q, %v", res, toolText(res), err)
		}
	})

	t.Run("its commands are in the audit trail", func(t *testing.T) {
		cs := mcpConnect(t, d, d.Key, "/mcp", nil)
		if r := shell(t, t.Context(), cs, "echo audited-over-mcp"); r.Outcome.ExitCode != 0 {
			t.Fatalf("shell = %+v", r)
		}
		recs := auditUntil(t, d, d.Key, "q=audited-over-mcp", func(r []auditRecord) bool { return len(r) > 0 })
		if out := recs[0]; len(recs) != 1 || out.Kind != "outcome" || out.Outcome == nil || out.Outcome.ExitCode != 0 ||
			out.Gateway != "default" || out.Host != "sandbox" || out.Session == "" {
			t.Fatalf("audit records of a command run over MCP: %+v", recs)
		}
	})

	t.Run("shell files persist in a session and not across sessions", func(t *testing.T) {
		one := mcpConnect(t, d, d.Key, "/mcp", nil)
		if r := shell(t, t.Context(), one, "echo kept > a.txt && cd /tmp"); r.Outcome.Type != "exit" || r.Outcome.ExitCode != 0 {
			t.Fatalf("write = %+v", r)
		}
		if r := shell(t, t.Context(), one, "cat /home/workspace/a.txt; pwd"); r.Stdout != "kept\n/tmp\n" {
			t.Fatalf("same session read = %+v", r)
		}
		two := mcpConnect(t, d, d.Key, "/mcp/default", nil)
		if r := shell(t, t.Context(), two, "cat /home/workspace/a.txt"); r.Outcome.ExitCode == 0 {
			t.Fatalf("another session sees the file: %+v", r)
		}

		// Ending the session releases its sandbox at once.
		if !sessionHasSandbox(t, d, one.ID()) {
			t.Fatalf("no sandbox of session %s listed", one.ID())
		}
		if err := one.Close(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for sessionHasSandbox(t, d, one.ID()) {
			if time.Now().After(deadline) {
				t.Fatal("the sandbox outlived its MCP session")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("bad input is a tool error naming the field", func(t *testing.T) {
		cs := mcpConnect(t, d, d.Key, "/mcp", nil)
		for _, tc := range []struct {
			args map[string]any
			want string
		}{
			{map[string]any{"command": 5}, "command"},
			{map[string]any{}, "command: required"},
			{map[string]any{"command": "true", "timeout_seconds": 0}, "timeout_seconds"},
			{map[string]any{"command": "true", "shell": "bash"}, "shell: not an argument"},
		} {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "shell", Arguments: tc.args})
			if err != nil || !res.IsError || !strings.Contains(toolText(res), tc.want) {
				t.Errorf("shell %v = %+v, %v; want a tool error naming %q", tc.args, res, err, tc.want)
			}
		}
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "nope", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("unknown tool: %v", err)
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "conch-e2e", Version: "1"}, nil)
		tr := &mcp.StreamableClientTransport{Endpoint: d.URL + "/mcp/nope", HTTPClient: &http.Client{Transport: headerTransport{"Authorization": {"Bearer " + d.Key}}}}
		if _, err := c.Connect(t.Context(), tr, nil); err == nil || !strings.Contains(err.Error(), "Not Found") {
			t.Errorf("unknown gateway: %v", err)
		}
	})

	t.Run("file round trip with the REST file API", func(t *testing.T) {
		cs := mcpConnect(t, d, d.Key, "/mcp/mcp-persist", nil, "X-Shell-User-Id", "mcp-alice")
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "/notes/a.txt", "content": "from mcp\n"}})
		if err != nil || res.IsError {
			t.Fatalf("write_file = %+v, %v", res, err)
		}
		code, body := d.call("GET", "/api/v1/shell/io/download?path=/notes/a.txt", d.Key, nil, "X-Shell-User-Id", "mcp-alice")
		if code != http.StatusOK || string(body) != "from mcp\n" {
			t.Fatalf("REST download = %d %q", code, body)
		}
		if r := shell(t, t.Context(), cs, "cat notes/a.txt && echo more >> notes/a.txt"); r.Stdout != "from mcp\n" {
			t.Fatalf("shell read = %+v", r)
		}
		res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "notes/a.txt"}})
		if err != nil || res.IsError || toolText(res) != "from mcp\nmore\n" {
			t.Fatalf("read_file = %+v, %v", res, err)
		}
		// d.call sends its body as JSON: the file holds the quoted string.
		if code, body := d.call("PUT", "/api/v1/shell/io/upload?path=/notes/b.txt", d.Key, "from rest", "X-Shell-User-Id", "mcp-alice"); code != http.StatusOK {
			t.Fatalf("REST upload = %d %s", code, body)
		}
		// A sandbox takes in the workspace when it starts: the user's next
		// session reads the upload.
		next := mcpConnect(t, d, d.Key, "/mcp/mcp-persist", nil, "X-Shell-User-Id", "mcp-alice")
		res, err = next.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "/notes/b.txt"}})
		if err != nil || res.IsError || toolText(res) != `"from rest"` {
			t.Fatalf("read_file of a REST upload = %+v %q, %v", res, toolText(res), err)
		}
		res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "/../../etc/passwd"}})
		if err != nil || !res.IsError || !strings.Contains(toolText(res), "path") {
			t.Fatalf("read_file outside the workspace = %+v, %v", res, err)
		}
		res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "public_url", Arguments: map[string]any{"path": "/notes/a.txt"}})
		if err != nil || res.IsError || !strings.Contains(toolText(res), "/public/v1/files/") {
			t.Fatalf("public_url = %+v, %v", res, err)
		}
		rr, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "conch://workspace/notes/a.txt"})
		if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "from mcp\nmore\n" || !strings.HasPrefix(rr.Contents[0].MIMEType, "text/plain") {
			t.Fatalf("read resource = %+v, %v", rr, err)
		}
	})

	t.Run("resource subscription sees a command's change", func(t *testing.T) {
		updated := make(chan string, 4)
		cs := mcpConnect(t, d, d.Key, "/mcp", &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			updated <- r.Params.URI
		}})
		shell(t, t.Context(), cs, "echo 1 > watched.txt")
		list, err := cs.ListResources(t.Context(), nil)
		if err != nil || len(list.Resources) == 0 || list.Resources[0].URI != "conch://workspace/watched.txt" {
			t.Fatalf("list resources = %+v, %v", list, err)
		}
		if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "conch://workspace/watched.txt"}); err != nil {
			t.Fatal(err)
		}
		shell(t, t.Context(), cs, "echo 22 > watched.txt")
		select {
		case uri := <-updated:
			if uri != "conch://workspace/watched.txt" {
				t.Fatalf("updated %q", uri)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no resource update notification")
		}
	})

	t.Run("approval answered through elicitation", func(t *testing.T) {
		var asked []string
		var mu sync.Mutex
		cs := mcpConnect(t, d, d.Key, "/mcp/mcp-strict", &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked = append(asked, r.Params.Message)
			mu.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "allow-once"}}, nil
		}})
		if r := shell(t, t.Context(), cs, "touch /tmp/mcp-elicited"); r.Outcome.Type != "exit" || r.Outcome.ExitCode != 0 {
			t.Fatalf("approved command = %+v", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(asked) != 1 || !strings.Contains(asked[0], "Command: touch /tmp/mcp-elicited") || !strings.Contains(asked[0], "CWD: ") {
			t.Fatalf("elicitations = %q", asked)
		}
		_, body := d.call("GET", "/api/v1/approvals?state=allowed", d.Key, nil)
		var list struct {
			Approvals []struct {
				Command    string
				ResolvedBy string `json:"resolved_by"`
			}
		}
		_ = json.Unmarshal(body, &list)
		found := false
		for _, a := range list.Approvals {
			if a.Command == "touch /tmp/mcp-elicited" {
				found = true
				if !strings.HasPrefix(a.ResolvedBy, "key:") || !strings.HasSuffix(a.ResolvedBy, " via mcp") {
					t.Errorf("resolved_by = %q", a.ResolvedBy)
				}
			}
		}
		if !found {
			t.Fatalf("approval not in the allowed list: %s", body)
		}
	})

	t.Run("an elicitation is withdrawn when REST answers first", func(t *testing.T) {
		// The question reaches the client, the user does not answer it,
		// and REST answers meanwhile: conch tells the client the question
		// is withdrawn (notifications/cancelled for it, which ends the
		// handler's context) and the call returns REST's answer.
		asked := make(chan string, 1)
		withdrawn := make(chan struct{})
		cs := mcpConnect(t, d, d.Key, "/mcp/mcp-strict", &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- r.Params.Message
			select {
			case <-ctx.Done():
				close(withdrawn)
				return nil, ctx.Err()
			case <-t.Context().Done():
				// The test failed or ended: closing the session must not
				// wait on this handler.
				return nil, errors.New("no answer")
			}
		}})
		const command = "touch /tmp/mcp-raced"
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "shell", Arguments: map[string]any{"command": command}})
			if err != nil {
				t.Errorf("shell %q: %v", command, err)
			}
			done <- res
		}()
		var question string
		select {
		case question = <-asked:
		case <-time.After(30 * time.Second):
			t.Fatal("the client was never asked")
		}
		_, id, ok := strings.Cut(question, "(approval ")
		id, _, _ = strings.Cut(id, ")")
		if !ok || id == "" || !strings.Contains(question, "Command: "+command) {
			t.Fatalf("question = %q", question)
		}
		if code, body := d.call("POST", "/api/v1/approvals/"+id+":resolve", d.Key, map[string]string{"decision": "deny"}); code != http.StatusOK {
			t.Fatalf("REST resolve = %d %s", code, body)
		}
		select {
		case <-withdrawn:
		case <-time.After(10 * time.Second):
			t.Fatal("the client was not told the question was withdrawn")
		}
		var res *mcp.CallToolResult
		select {
		case res = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the call did not return after REST answered")
		}
		if res == nil {
			t.FailNow() // the call's error is reported above
		}
		var r mcpShell
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &r); err != nil || r.Outcome.Type != "error" || !strings.Contains(r.Error, "not allowed") {
			t.Fatalf("denied command = %s (%v)", b, err)
		}
		// REST's answer is the one recorded, not the question's.
		_, body := d.call("GET", "/api/v1/approvals/"+id, d.Key, nil)
		var a struct {
			State      string
			ResolvedBy string `json:"resolved_by"`
		}
		if err := json.Unmarshal(body, &a); err != nil || a.State != "denied" || strings.HasSuffix(a.ResolvedBy, " via mcp") {
			t.Fatalf("approval after REST answered = %s", body)
		}
	})

	t.Run("approval answered from REST while the client waits", func(t *testing.T) {
		progress := make(chan string, 16)
		logs := make(chan string, 16)
		cs := mcpConnect(t, d, d.Key, "/mcp/mcp-strict", &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				progress <- r.Params.Message
			},
			LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
				logs <- string(r.Params.Level) + " " + r.Params.Data.(string)
			},
		})
		if err := cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
		answered := allowWhenPending(t, d, "touch /tmp/mcp-rest", func(pendingApproval) {})
		params := &mcp.CallToolParams{Name: "shell", Arguments: map[string]any{"command": "touch /tmp/mcp-rest"}}
		params.SetProgressToken("p1")
		res, err := cs.CallTool(t.Context(), params)
		if err != nil || res.IsError || !strings.Contains(toolText(res), "[exit code 0]") {
			t.Fatalf("command = %+v, %v", res, err)
		}
		if code := <-answered; code != http.StatusOK {
			t.Fatalf("REST resolve = %d", code)
		}
		select {
		case msg := <-progress:
			if !strings.Contains(msg, "waiting for approval") {
				t.Fatalf("progress = %q", msg)
			}
		default:
			t.Fatal("no progress notification while waiting")
		}
		select {
		case msg := <-logs:
			if !strings.HasPrefix(msg, "warning command waits for approval") {
				t.Fatalf("log message = %q", msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no log message at level info")
		}
	})

	t.Run("cancellation ends the wait and the command", func(t *testing.T) {
		progress := make(chan string, 16)
		cs := mcpConnect(t, d, d.Key, "/mcp/mcp-strict", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress <- r.Params.Message
		}})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			params := &mcp.CallToolParams{Name: "shell", Arguments: map[string]any{"command": "touch /tmp/mcp-cancelled"}}
			params.SetProgressToken("p2")
			_, err := cs.CallTool(ctx, params)
			done <- err
		}()
		select {
		case <-progress:
		case <-time.After(30 * time.Second):
			t.Fatal("no progress notification")
		}
		cancel()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("cancelled call succeeded")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("cancelled call did not return")
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, body := d.call("GET", "/api/v1/approvals?state=pending", d.Key, nil)
			if !strings.Contains(string(body), "touch /tmp/mcp-cancelled") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("approval still pending after the call was cancelled: %s", body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("cancellation stops a running command", func(t *testing.T) {
		cs := mcpConnect(t, d, d.Key, "/mcp", nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "shell", Arguments: map[string]any{"command": "touch started; sleep 2; touch survived"}})
			done <- err
		}()
		deadline := time.Now().Add(15 * time.Second)
		for shell(t, t.Context(), cs, "test -e started").Outcome.ExitCode != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the command did not start")
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("cancelled call succeeded")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("cancelled call did not return")
		}
		// Had the command gone on, it would have finished by now.
		if r := shell(t, t.Context(), cs, "sleep 3; test -e survived"); r.Outcome.ExitCode == 0 {
			t.Fatal("the command ran on after its call was cancelled")
		}
	})

	t.Run("a client that goes away stops its command", func(t *testing.T) {
		cs := mcpConnect(t, d, d.Key, "/mcp", nil)
		ctx, cancel := context.WithCancel(t.Context())
		call := []byte(`{"jsonrpc":"2.0","id":"gone","method":"tools/call","params":{"name":"shell","arguments":{"command":"touch started; sleep 2; touch survived"}}}`)
		req, _ := http.NewRequestWithContext(ctx, "POST", d.URL+"/mcp", bytes.NewReader(call))
		req.Header.Set("Authorization", "Bearer "+d.Key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		deadline := time.Now().Add(15 * time.Second)
		for shell(t, t.Context(), cs, "test -e started").Outcome.ExitCode != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the command did not start")
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel() // the connection closes
		<-done
		if r := shell(t, t.Context(), cs, "sleep 3; test -e survived"); r.Outcome.ExitCode == 0 {
			t.Fatal("the command ran on after its client went away")
		}
	})

	t.Run("another account is refused", func(t *testing.T) {
		cs := mcpConnect(t, d, d.Key, "/mcp", nil)
		other := newAccount(t, d, "mcp-other")
		msg := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`)
		req, _ := http.NewRequestWithContext(t.Context(), "POST", d.URL+"/mcp", bytes.NewReader(msg))
		req.Header.Set("Authorization", "Bearer "+other)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), "shell") {
			t.Fatalf("another account's session = %d %s", resp.StatusCode, body)
		}
		if code, _ := d.call("POST", "/mcp", "", map[string]any{}); code != http.StatusUnauthorized {
			t.Fatalf("no key = %d", code)
		}
		// The owner's session still works.
		if r := shell(t, t.Context(), cs, "echo mine"); r.Stdout != "mine\n" {
			t.Fatalf("owner's call = %+v", r)
		}
	})
}

// TestMCPStdioBridge runs `conch mcp` as a desktop client does: spawned,
// spoken to over stdin and stdout.
func TestMCPStdioBridge(t *testing.T) {
	d := startDev(t)
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "mcp", "--server", d.URL, "--api-key", d.Key, "--gateway", "default")
	cmd.Env = cleanEnv()
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("conch mcp stderr:\n%s", stderr.String())
		}
	})
	updated := make(chan string, 4)
	c := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		updated <- r.Params.URI
	}})
	cs, err := c.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect through conch mcp: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("list tools = %+v, %v", tools, err)
	}
	if r := shell(t, t.Context(), cs, "echo bridged > b.txt && cat b.txt"); r.Stdout != "bridged\n" {
		t.Fatalf("shell through the bridge = %+v", r)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "/b.txt"}})
	if err != nil || toolText(res) != "bridged\n" {
		t.Fatalf("read_file through the bridge = %+v, %v", res, err)
	}

	// What the router sends outside any call reaches the client too.
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "conch://workspace/b.txt"}); err != nil {
		t.Fatal(err)
	}
	shell(t, t.Context(), cs, "echo changed > b.txt")
	select {
	case uri := <-updated:
		if uri != "conch://workspace/b.txt" {
			t.Fatalf("updated %q", uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no resource update through the bridge")
	}
}

// TestMCPStdioBridgeFailures runs `conch mcp` as a desktop client does
// where it cannot work: the client's handshake is answered with an error
// that says why in plain words, the same line is the bridge's stderr,
// and the bridge exits with code 1. A bridge that cannot start says so
// in one line and exits non-zero.
func TestMCPStdioBridgeFailures(t *testing.T) {
	d := startDev(t)
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "http://" + freeAddr(t)
	tests := []struct {
		name string
		args []string
		// wantAnswer is in the handshake's error, and the whole of stderr
		// is "conch mcp: " and it; empty: the bridge never started.
		wantAnswer string
		wantStderr string
		wantCode   int
	}{
		{"nothing listens", []string{"--server", nowhere, "--api-key", "conch_some-key-0123456789"},
			"conch at " + nowhere + " is unreachable: connection refused", "", 1},
		{"a wrong key", []string{"--server", d.URL, "--api-key", "conch_not-a-key-at-all"},
			"conch refused the API key (401): invalid API key", "", 1},
		{"an unknown gateway", []string{"--server", d.URL, "--api-key", d.Key, "--gateway", "nope"},
			"no MCP endpoint at /mcp/nope (404): gateway nope not found", "", 1},
		{"no key", []string{"--server", d.URL, "--data-dir", t.TempDir()},
			"", "conch: no API key: set --api-key or CONCH_API_KEY", 1},
		{"a bad flag", []string{"--server", d.URL, "--no-such-flag"},
			"", "conch mcp: unknown flag --no-such-flag (see 'conch mcp --help')", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"mcp"}, tt.args...)...)
			cmd.Env = cleanEnv()
			stderr := &lockedBuffer{}
			cmd.Stderr = stderr
			c := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil)
			cs, err := c.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
			if err == nil {
				cs.Close()
				t.Fatal("connected through a bridge that cannot work")
			}
			if tt.wantAnswer != "" && !strings.Contains(err.Error(), tt.wantAnswer) {
				t.Errorf("handshake error %q, want it to say %q", err, tt.wantAnswer)
			}
			// The client closed the bridge's stdin and waited for it.
			if st := cmd.ProcessState; st == nil || !st.Exited() || st.ExitCode() != tt.wantCode {
				t.Errorf("conch mcp ended %v, want exit code %d", st, tt.wantCode)
			}
			got := stderr.String()
			want := "conch mcp: " + tt.wantAnswer + "\n"
			if tt.wantAnswer == "" {
				if strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, tt.wantStderr) {
					t.Errorf("stderr %q, want one line starting %q", got, tt.wantStderr)
				}
			} else if got != want {
				t.Errorf("stderr %q, want %q", got, want)
			}
		})
	}
}

// TestMCPStdioBridgeWhenConchStops stops conch dev under an open session
// of `conch mcp`: the client's next call is answered with an error that
// says conch is unreachable, and the bridge exits with code 1.
func TestMCPStdioBridgeWhenConchStops(t *testing.T) {
	d := startDev(t)
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "mcp", "--server", d.URL, "--api-key", d.Key)
	cmd.Env = cleanEnv()
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect through conch mcp: %v", err)
	}
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatalf("list tools while conch runs: %v", err)
	}
	if _, err := d.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	want := "conch at " + d.URL + " is unreachable: connection refused"
	if _, err := cs.ListTools(t.Context(), nil); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("list tools once conch stopped = %v, want an error saying %q", err, want)
	}
	_ = cs.Close()
	if st := cmd.ProcessState; st == nil || !st.Exited() || st.ExitCode() != 1 {
		t.Errorf("conch mcp ended %v, want exit code 1", st)
	}
	if got := stderr.String(); got != "conch mcp: "+want+"\n" {
		t.Errorf("stderr %q, want %q", got, "conch mcp: "+want+"\n")
	}
}
