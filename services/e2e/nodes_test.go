package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

// nodeProc is a running `conch node`.
type nodeProc struct {
	stderr *lockedBuffer
	done   chan struct{} // closed when it exits, err then set
	err    error
}

// startNode runs `conch node` against d.
func startNode(t *testing.T, d *dev, name, token, workdir string) *nodeProc {
	t.Helper()
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "node", "--join", d.URL, "--name", name, "--workdir", workdir)
	cmd.Env = append(cleanEnv(), "CONCH_NODE_TOKEN="+token)
	n := &nodeProc{stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = n.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.err = cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			t.Errorf("conch node did not stop on SIGTERM")
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("conch node stderr:\n%s", tail(n.stderr.String(), 2000))
		}
	})
	return n
}

type nodeList struct {
	Nodes []struct {
		Name      string `json:"name"`
		Connected bool   `json:"connected"`
		Platform  string `json:"platform"`
		Executor  string `json:"executor"`
	} `json:"nodes"`
}

// TestNodes pairs a machine with the cluster and runs exec commands on it
// through the agent loop, behind the allowlist and approvals; an unknown
// node is `Node not found`; an unpaired node is disconnected and its token
// refused.
func TestNodes(t *testing.T) {
	d := startDev(t)

	code, body := d.call("POST", "/api/v1/nodes", d.Key, map[string]string{"name": "laptop"})
	var created struct {
		Token string `json:"token"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &created) != nil || !strings.HasPrefix(created.Token, "conch_node_") {
		t.Fatalf("create node = %d %s", code, body)
	}
	for _, tc := range []struct {
		name string
		code int
	}{{"laptop", http.StatusConflict}, {"../x", http.StatusBadRequest}, {"", http.StatusBadRequest}, {"a b", http.StatusBadRequest}} {
		if code, body := d.call("POST", "/api/v1/nodes", d.Key, map[string]string{"name": tc.name}); code != tc.code {
			t.Errorf("create node %q = %d %s, want %d", tc.name, code, body, tc.code)
		}
	}

	// A wrong token or another node's name is refused, and conch node
	// exits rather than retrying forever.
	for _, tc := range []struct{ name, token, want string }{
		{"laptop", "conch_node_wrong", "invalid node token"},
		{"desktop", created.Token, `pairs node "laptop"`},
	} {
		n := startNode(t, d, tc.name, tc.token, t.TempDir())
		select {
		case <-n.done:
			if n.err == nil || !strings.Contains(n.stderr.String(), tc.want) {
				t.Fatalf("node %s with a bad token: %v, stderr %s", tc.name, n.err, n.stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("node %s with a bad token kept running", tc.name)
		}
	}

	workdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(workdir, "marker"), []byte("on the node\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	laptop := startNode(t, d, "laptop", created.Token, workdir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var list nodeList
		_, body := d.call("GET", "/api/v1/nodes", d.Key, nil)
		_ = json.Unmarshal(body, &list)
		if len(list.Nodes) == 1 && list.Nodes[0].Connected {
			if list.Nodes[0].Platform != runtime.GOOS+"/"+runtime.GOARCH || list.Nodes[0].Executor == "" {
				t.Fatalf("connected node = %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node never connected: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	const gw = "on-the-laptop"
	createGateway(t, d, map[string]any{"name": gw, "upstream": map[string]any{"provider": "scripted"}, "exec": map[string]any{"host": "node", "node": "laptop"}})
	if code, body := d.call("POST", "/api/v1/exec-approvals/agents/"+gw+"/allowlist", d.Key, map[string]string{"pattern": "/usr/bin/cat"}); code != http.StatusOK {
		t.Fatalf("allowlist: %d %s", code, body)
	}
	chat := func(model, command string) string {
		t.Helper()
		code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
			"model":    model,
			"messages": []map[string]string{{"role": "user", "content": "run: " + command}},
			"tools":    []map[string]string{{"type": "exec"}},
		})
		if code != http.StatusOK {
			t.Fatalf("chat %q = %d %s", command, code, body)
		}
		return string(body)
	}
	if out := chat(gw, "cat marker"); !strings.Contains(out, `on the node\\n`) {
		t.Fatalf("an allowlisted command did not run on the node: %s", out)
	}
	if out := chat(gw, "pwd"); !strings.Contains(out, workdir) {
		t.Fatalf("pwd on the node: %s", out)
	}

	// Anything else waits for a human, with the node's paths, then runs
	// there.
	answered := allowWhenPending(t, d, "touch made-on-node", func(a pendingApproval) {
		if a.Host != "node" || a.Cwd != workdir || len(a.ResolvedPaths) != 1 || a.ResolvedPaths[0] != "/usr/bin/touch" {
			t.Errorf("pending approval = %+v, want host node, cwd %s, /usr/bin/touch", a, workdir)
		}
	})
	out := chat(gw, "touch made-on-node")
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("resolve = %d", code)
	}
	if _, err := os.Stat(filepath.Join(workdir, "made-on-node")); err != nil || !strings.Contains(out, `\"exit_code\":0`) {
		t.Fatalf("approved command did not run on the node (%v): %s", err, out)
	}

	// A node the account has not connected is not found.
	createGateway(t, d, map[string]any{"name": "on-nowhere", "upstream": map[string]any{"provider": "scripted"}, "exec": map[string]any{"host": "node", "node": "nowhere", "security": "full", "ask": "off"}})
	if out := chat("on-nowhere", "true"); !strings.Contains(out, "Node not found") {
		t.Fatalf("unknown node: %s", out)
	}
	// Another account does not reach this account's node.
	other := newAccount(t, d, "nodes-other")
	if code, body := d.call("POST", "/api/v1/gateways", other, map[string]any{"name": "steal", "upstream": map[string]any{"provider": "scripted"}, "exec": map[string]any{"host": "node", "node": "laptop", "security": "full", "ask": "off"}}); code != http.StatusOK {
		t.Fatalf("other gateway = %d %s", code, body)
	}
	code, body = d.call("POST", "/v1/chat/completions", other, map[string]any{
		"model": "steal", "messages": []map[string]string{{"role": "user", "content": "run: touch stolen"}}, "tools": []map[string]string{{"type": "exec"}},
	})
	if code != http.StatusOK || !strings.Contains(string(body), "Node not found") {
		t.Fatalf("other account on the node = %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(workdir, "stolen")); err == nil {
		t.Fatal("another account ran a command on the node")
	}

	// The router's public address serves nodes their stream and nothing
	// else of the executor's API, whatever metadata a caller sends.
	conn, err := grpc.NewClient(strings.TrimPrefix(d.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := executorv1.NewExecutorServiceClient(conn)
	smuggled := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+d.Key, "conch-account", "dev", "x-conch-scope", "forged")
	if _, err := api.ListSandboxes(smuggled, &executorv1.ListSandboxesRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("ListSandboxes on the public address: %v, want Unimplemented", err)
	}
	if s, err := api.Exec(smuggled, &executorv1.ExecRequest{Command: "true"}); err == nil {
		if _, err = s.Recv(); status.Code(err) != codes.Unimplemented {
			t.Fatalf("Exec on the public address: %v, want Unimplemented", err)
		}
	}

	// Unpairing disconnects the node at once; it does not come back.
	if code, body := d.call("DELETE", "/api/v1/nodes/laptop", d.Key, nil); code != http.StatusOK {
		t.Fatalf("delete node = %d %s", code, body)
	}
	select {
	case <-laptop.done:
		if laptop.err == nil || !strings.Contains(laptop.stderr.String(), "unpaired") {
			t.Fatalf("conch node after being unpaired: %v, stderr %s", laptop.err, laptop.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an unpaired node stayed connected")
	}
	if out := chat(gw, "cat marker"); !strings.Contains(out, "Node not found") {
		t.Fatalf("unpaired node: %s", out)
	}
}
