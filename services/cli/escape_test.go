package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/conch-sh/conch/services/internal/display/displaytest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// fakeApprovals answers GET /api/v1/approvals with one approval per case
// and records the :resolve calls and the client header they carried.
type fakeApprovals struct {
	srv *httptest.Server

	mu       sync.Mutex
	clients  []string
	resolved []string
}

func newFakeApprovals(t *testing.T, list []apiApproval) *fakeApprovals {
	t.Helper()
	f := &fakeApprovals{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.clients = append(f.clients, r.Header.Get(tenant.ClientHeader))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			f.mu.Lock()
			f.resolved = append(f.resolved, r.URL.Path)
			f.mu.Unlock()
			_, _ = w.Write([]byte(`{"state": "denied"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"approvals": list})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeApprovals) client(t *testing.T) (*Client, *Options) {
	t.Helper()
	o := &Options{Server: f.srv.URL, APIKey: "k", Output: "text"}
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	return c, o
}

// jsonCases are the shared cases that can reach the CLI at all: it reads
// approvals as JSON, which carries only valid UTF-8.
func jsonCases() []displaytest.Case {
	var out []displaytest.Case
	for _, tc := range displaytest.Cases {
		if tc.ValidUTF8() {
			out = append(out, tc)
		}
	}
	return out
}

// `conch approvals list` shows each approval on one line, escaped by the
// shared function and checked with the shared table.
func TestApprovalsListEscapesTheSharedTable(t *testing.T) {
	t.Parallel()
	cases := jsonCases()
	var list []apiApproval
	for i, tc := range cases {
		list = append(list, apiApproval{ID: "id" + string(rune('A'+i)), State: "pending", Agent: tc.In, Host: "gateway", ResolvedPaths: []string{tc.In}, Command: tc.In})
	}
	f := newFakeApprovals(t, list)
	c, o := f.client(t)
	var out bytes.Buffer
	if err := listApprovals(t.Context(), c, o, "pending", "", &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(cases)+1 {
		t.Fatalf("%d lines for %d approvals:\n%s", len(lines), len(cases), out.String())
	}
	for i, tc := range cases {
		line := lines[i+1]
		if !strings.HasPrefix(line, list[i].ID+" ") || !strings.HasSuffix(line, "  "+tc.Want) || strings.Count(line, tc.Want) < 3 {
			t.Errorf("%s: line %q, want the agent, resolved path and command as %q", tc.Name, line, tc.Want)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.clients[0]; got != tenant.SurfaceCLI {
		t.Errorf("the CLI names itself %q, want %q", got, tenant.SurfaceCLI)
	}
}

// `conch chat` asks for a pending approval, and shows the tool calls, with
// the same escaping.
func TestChatApprovalEscapesTheSharedTable(t *testing.T) {
	t.Parallel()
	f := newFakeApprovals(t, nil)
	c, _ := f.client(t)
	for _, tc := range jsonCases() {
		raw, err := json.Marshal(map[string]any{"id": "A1", "command": tc.In, "cwd": tc.In, "resolved_paths": []string{tc.In}, "host": "gateway", "security": "allowlist"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		ch := &chat{c: c, in: readLines(strings.NewReader("d\n")), out: &out}
		ch.askApproval(t.Context(), raw)
		want := "  approval needed (A1): " + tc.Want + "\n    cwd " + tc.Want + ", host gateway, security allowlist, runs " + tc.Want + "\n"
		if !strings.HasPrefix(out.String(), want) {
			t.Errorf("%s: shown as\n%q\nwant\n%q", tc.Name, out.String(), want)
		}
		out.Reset()
		args, _ := json.Marshal(map[string]string{"command": tc.In})
		ch.showCall("shell", string(args))
		if got, want := out.String(), "$ "+tc.Want+"\n"; got != want {
			t.Errorf("%s: tool call shown as %q, want %q", tc.Name, got, want)
		}
		out.Reset()
		ch.showClientCalls([]streamedToolCall{{name: tc.In, arguments: tc.In}})
		if got, want := out.String(), "[client tool call "+tc.Want+" "+tc.Want+" not run: conch chat has no client tools]\n"; got != want {
			t.Errorf("%s: client tool call shown as %q, want %q", tc.Name, got, want)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.resolved) != len(jsonCases()) {
		t.Errorf("%d answers sent, want %d", len(f.resolved), len(jsonCases()))
	}
}
