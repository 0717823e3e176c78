package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
)

// TestTwoExecutors checks that with two executors every call about a
// sandbox reaches the executor that holds it, whichever the router's
// balancing would have picked, and that a killed executor's sandboxes are
// answered clearly and then forgotten.
func TestTwoExecutors(t *testing.T) {
	c := startCluster(t, 2)
	d := c.dev

	// Create sandboxes until both executors hold some.
	type sb struct{ id, executor string }
	var sandboxes []sb
	on := map[string]int{}
	for i := 0; len(on) < 2 || i < 4; i++ {
		if i == 20 {
			t.Fatalf("20 sandboxes all created on %v", on)
		}
		code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
		if code != http.StatusOK {
			t.Fatalf("create = %d %s", code, body)
		}
		var created struct {
			ID      string `json:"id"`
			Sandbox struct {
				Executor string `json:"executor"`
			} `json:"sandbox"`
		}
		if err := json.Unmarshal(body, &created); err != nil || created.Sandbox.Executor == "" {
			t.Fatalf("create: %s (%v)", body, err)
		}
		sandboxes = append(sandboxes, sb{created.ID, created.Sandbox.Executor})
		on[created.Sandbox.Executor]++
	}

	// Every call about a sandbox reaches its executor: state persists
	// across commands, and GET names the executor that created it.
	for _, s := range sandboxes {
		for i := range 4 {
			cmd := fmt.Sprintf("cd /tmp && echo %d >> calls && wc -l < calls", i)
			code, body := d.call("POST", "/api/v1/sandboxes/"+s.id+"/commands", d.Key, map[string]any{"command": cmd})
			if code != http.StatusOK || !strings.Contains(string(body), fmt.Sprintf(`"stdout":"%d\n"`, i+1)) {
				t.Fatalf("sandbox %s command %d = %d %s", s.id, i, code, body)
			}
		}
		code, body := d.call("GET", "/api/v1/sandboxes/"+s.id, d.Key, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"executor":"`+s.executor+`"`) {
			t.Fatalf("get %s = %d %s, want executor %s", s.id, code, body, s.executor)
		}
	}

	// So do the streamed file calls of the Containers API: an upload
	// names its sandbox in its first message only.
	oc := client(d)
	for _, s := range sandboxes {
		f, err := oc.Containers.Files.New(t.Context(), s.id, openai.ContainerFileNewParams{File: openai.File(strings.NewReader(s.id), "id.txt", "text/plain")})
		if err != nil {
			t.Fatalf("upload to %s on %s: %v", s.id, s.executor, err)
		}
		if got := content(t, oc, s.id, f.ID); got != s.id {
			t.Fatalf("content of %s = %q", s.id, got)
		}
	}

	// The list covers both executors.
	code, body := d.call("GET", "/api/v1/sandboxes", d.Key, nil)
	if code != http.StatusOK {
		t.Fatalf("list = %d %s", code, body)
	}
	for _, s := range sandboxes {
		if !strings.Contains(string(body), `"id":"`+s.id+`"`) {
			t.Fatalf("list lacks %s: %s", s.id, body)
		}
	}

	// Another account finds none of them, wherever they are.
	other := newAccount(t, d, "placement-other")
	for _, s := range sandboxes {
		if code, body := d.call("POST", "/api/v1/sandboxes/"+s.id+"/commands", other, map[string]any{"command": "true"}); code != http.StatusNotFound {
			t.Fatalf("other account on %s = %d %s, want 404", s.id, code, body)
		}
	}
	if code, body := d.call("GET", "/api/v1/sandboxes", other, nil); code != http.StatusOK || strings.Contains(string(body), "sb-") {
		t.Fatalf("other account's list = %d %s, want none", code, body)
	}

	// A node's commands reach the executor holding its stream, whichever
	// executor the router would have picked.
	code, body = d.call("POST", "/api/v1/nodes", d.Key, map[string]string{"name": "box"})
	var paired struct {
		Token string `json:"token"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &paired) != nil {
		t.Fatalf("pair node = %d %s", code, body)
	}
	startNode(t, d, "box", paired.Token, t.TempDir())
	createGateway(t, d, map[string]any{"name": "on-box", "upstream": map[string]any{"provider": "scripted"}, "exec": map[string]any{"host": "node", "node": "box"}})
	if code, body := d.call("POST", "/api/v1/exec-approvals/agents/on-box/allowlist", d.Key, map[string]string{"pattern": "/usr/bin/expr"}); code != http.StatusOK {
		t.Fatalf("allowlist: %d %s", code, body)
	}
	onBox := func(i int) {
		t.Helper()
		var out string
		for try := 0; ; try++ {
			code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
				"model": "on-box", "messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("run: expr %d + 1000", i)}},
				"tools": []map[string]string{{"type": "exec"}},
			})
			out = string(body)
			// The node may still be (re)connecting.
			if code != http.StatusOK || !(strings.Contains(out, "Node not found") || strings.Contains(out, "retry")) || try == 100 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !strings.Contains(out, fmt.Sprintf(`%d\\n`, i+1000)) {
			t.Fatalf("command %d on the node: %s", i, out)
		}
	}
	for i := range 6 {
		onBox(i)
	}

	// Destroy works wherever the sandbox is.
	first := sandboxes[0]
	if code, body := d.call("DELETE", "/api/v1/sandboxes/"+first.id, d.Key, nil); code != http.StatusOK {
		t.Fatalf("delete = %d %s", code, body)
	}
	if code, body := d.call("GET", "/api/v1/sandboxes/"+first.id, d.Key, nil); code != http.StatusNotFound {
		t.Fatalf("get deleted = %d %s, want 404", code, body)
	}

	// Kill one executor: its sandboxes are unavailable at once (not sent
	// to the other executor, not hanging), then not found once its lease
	// is gone; the other executor's sandboxes keep working.
	// The victim is the executor holding the node's stream, so that the
	// node has to move too.
	rec, ok, err := placement.Lookup(t.Context(), c.etcd, placement.NodeKey("admin", "box"))
	if err != nil || !ok {
		t.Fatalf("record of node box: %v %v", ok, err)
	}
	victim := struct{ executor string }{rec.Executor}
	killed := false
	for i, addr := range c.execAddrs {
		if addr == rec.Addr {
			if err := c.executors[i].Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	if !killed {
		t.Fatalf("no executor at %s (%v)", rec.Addr, c.execAddrs)
	}
	deadline := time.Now().Add(40 * time.Second)
	// named counts the answers that said which sandbox is out of reach.
	named := 0
	for _, s := range sandboxes[1:] { // the first was destroyed
		for {
			code, body := d.call("POST", "/api/v1/sandboxes/"+s.id+"/commands", d.Key, map[string]any{"command": "true"})
			if s.executor != victim.executor {
				if code != http.StatusOK {
					t.Fatalf("surviving executor's sandbox %s = %d %s", s.id, code, body)
				}
				break
			}
			if code == http.StatusNotFound {
				break
			}
			// Never an internal address. A call sent before the router
			// saw the executor die ends as the connection did.
			if code != http.StatusServiceUnavailable || strings.Contains(string(body), rec.Addr) {
				t.Fatalf("dead executor's sandbox %s = %d %s, want 503 then 404", s.id, code, body)
			}
			if strings.Contains(string(body), "the executor holding sandbox "+s.id+" is not reachable") {
				named++
			}
			if time.Now().After(deadline) {
				t.Fatalf("dead executor's sandbox %s still %d %s", s.id, code, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if named == 0 {
		t.Fatal("no answer named the sandbox out of reach before the dead executor's sandboxes were forgotten")
	}
	// A node whose executor died connects again, to the survivor.
	onBox(100)

	// New sandboxes land on the survivor.
	for range 3 {
		code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
		if code != http.StatusOK || strings.Contains(string(body), victim.executor) {
			t.Fatalf("create after kill = %d %s", code, body)
		}
	}
}

// TestExecutorDrainServesItsSandboxes stops an executor gracefully: it
// leaves discovery at once, so new sandboxes go elsewhere, but for its
// drain delay the commands of the sandboxes it holds still reach it, with
// their state; once it has stopped they answer 503, then 404.
func TestExecutorDrainServesItsSandboxes(t *testing.T) {
	c := startCluster(t, 1)
	d := c.dev
	addr := freeAddr(t)
	draining := c.start("executor", "--grpc-addr", addr, "--drain-delay", "5s")

	// A sandbox on the executor about to drain.
	var id string
	for i := 0; id == ""; i++ {
		if i == 40 {
			t.Fatal("40 sandboxes, none on the second executor")
		}
		code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
		var created struct {
			ID string `json:"id"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &created) != nil {
			t.Fatalf("create = %d %s", code, body)
		}
		rec, ok, err := placement.Lookup(t.Context(), c.etcd, placement.SandboxKey(created.ID))
		if err != nil || !ok {
			t.Fatalf("record of %s: %v %v", created.ID, ok, err)
		}
		if rec.Addr == addr {
			id = created.ID
			continue
		}
		// Not needed: left alive, the search's sandboxes would hold the
		// account's quotas (16 of its 16 cores take 16 of them) and
		// refuse the create this test makes later.
		if code, body := d.call("DELETE", "/api/v1/sandboxes/"+created.ID, d.Key, nil); code != http.StatusOK {
			t.Fatalf("delete %s = %d %s", created.ID, code, body)
		}
	}
	run := func(cmd string) (int, string) {
		t.Helper()
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": cmd})
		return code, string(body)
	}
	if code, body := run("cd /tmp && echo kept > state"); code != http.StatusOK {
		t.Fatalf("command = %d %s", code, body)
	}

	if err := draining.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		addrs, err := discovery.Endpoints(t.Context(), c.etcd, "executor")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(addrs, addr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopping executor is still registered: %v", addrs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := run("cat state && pwd"); code != http.StatusOK || !strings.Contains(body, `"stdout":"kept\n/tmp\n"`) {
		t.Fatalf("command while its executor drains = %d %s, want the sandbox's state", code, body)
	}
	code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var created struct {
		ID string `json:"id"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &created) != nil {
		t.Fatalf("create while one executor drains = %d %s", code, body)
	}
	if rec, _, _ := placement.Lookup(t.Context(), c.etcd, placement.SandboxKey(created.ID)); rec.Addr == addr {
		t.Fatalf("sandbox %s created on the draining executor", created.ID)
	}

	if err := draining.Wait(); err != nil {
		t.Fatalf("executor exit: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, body := run("true")
		if code == http.StatusNotFound {
			break
		}
		// The error names the sandbox, never an internal address.
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "the executor holding sandbox "+id+" is not reachable") || strings.Contains(body, addr) {
			t.Fatalf("command after its executor stopped = %d %s, want 503 then 404", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A paused sandbox belongs to no executor: with two, it is listed once,
// and a command to it resumes it on whichever the call reaches.
func TestPausedAcrossExecutors(t *testing.T) {
	c := startCluster(t, 2)
	d := c.dev
	code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var created struct{ ID string }
	if err := json.Unmarshal(body, &created); code != http.StatusOK || err != nil {
		t.Fatalf("create = %d %s", code, body)
	}
	id := created.ID
	if code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": "echo kept > f"}); code != http.StatusOK {
		t.Fatalf("command = %d %s", code, body)
	}
	if code, body := d.call("POST", "/api/v1/sandboxes/"+id+":pause", d.Key, map[string]any{}); code != http.StatusOK || !strings.Contains(string(body), `"state":"paused"`) {
		t.Fatalf("pause = %d %s", code, body)
	}
	code, body = d.call("GET", "/api/v1/sandboxes", d.Key, nil)
	if code != http.StatusOK || strings.Count(string(body), `"id":"`+id+`"`) != 1 {
		t.Errorf("list = %d %s, want the paused sandbox once", code, body)
	}
	for i := range 3 {
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": "cat f"})
		if code != http.StatusOK || !strings.Contains(string(body), `"stdout":"kept\n"`) {
			t.Fatalf("command %d after the pause = %d %s", i, code, body)
		}
	}
}
