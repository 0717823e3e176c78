package faults

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/placement"
)

// TestExecutorKilledDuringCommand kills the executor running a session's
// command with SIGKILL: the completion answers with an error outcome, the
// session's next completion gets a sandbox on the other executor, and the
// user's workspace holds every write acknowledged before the kill. The
// audit trail loses at most the executor's last forwarding interval of
// outcomes, the window docs/reference/audit.md promises, and verifies.
func TestExecutorKilledDuringCommand(t *testing.T) {
	e := start(t)
	ctx := t.Context()
	e.gateway("faults", nil)
	const user, session = "alice", "kill-executor"

	// Acknowledged writes, in the session's sandbox and from outside.
	var acked []string
	for i := range 3 {
		name := fmt.Sprintf("acked-%d.txt", i)
		if c := e.complete(ctx, "faults", user, session, fmt.Sprintf("echo v%d > %s", i, name)); !c.ran() {
			t.Fatalf("write %s = %v %+v", name, c.response, c.result)
		}
		acked = append(acked, name)
	}
	if r := e.upload(ctx, user, "/uploaded.txt", []byte("up\n")); !r.ok() {
		t.Fatalf("upload = %v", r)
	}

	sandbox, owner := sessionSandbox(t, e, session)

	// Commands answered one after another until the kill: their outcomes
	// are what the executor holds to forward when it dies.
	answered := runUntilKilled(t, e, sandbox)

	// A command in flight when its executor dies.
	done := make(chan completion, 1)
	go func() {
		done <- e.complete(ctx, "faults", user, session, "echo lost > unacked.txt; sleep 300")
	}()
	eventually(t, 30*time.Second, "the long command runs", func() error {
		var list struct {
			Processes []struct {
				Command, State string
			} `json:"processes"`
		}
		body := e.must("GET", "/api/v1/sandboxes/"+sandbox+"/processes", nil)
		if err := json.Unmarshal(body, &list); err != nil {
			return err
		}
		for _, p := range list.Processes {
			if strings.Contains(p.Command, "sleep 300") && p.State == "running" {
				return nil
			}
		}
		return fmt.Errorf("processes: %s", body)
	})
	// Taken before the signal: the kill is no earlier than this.
	killedAt := time.Now()
	if err := e.c.Kill(owner); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s, which held sandbox %s", owner, sandbox)

	var killed completion
	select {
	case killed = <-done:
	case <-time.After(requestTimeout):
		t.Fatal("the completion whose executor died did not answer")
	}
	if !killed.ok() {
		t.Fatalf("completion whose executor died = %v, want 200 with an error outcome", killed.response)
	}
	if killed.result.Outcome.Type != "error" || !strings.Contains(killed.result.Error, "executor") {
		t.Fatalf("shell result after the kill = %+v, want an error outcome that names the executor", killed.result)
	}
	t.Logf("the caller was told: %s", killed.result.Error)

	// The session's next completion runs in a new sandbox, on the other
	// executor, and sees every acknowledged write.
	next := e.complete(ctx, "faults", user, session, "cat "+strings.Join(acked, " ")+" uploaded.txt")
	if !next.ran() || next.result.Stdout != "v0\nv1\nv2\nup\n" {
		t.Fatalf("next completion = %v %+v, want the acknowledged files", next.response, next.result)
	}
	moved, where := sessionSandbox(t, e, session)
	if moved == sandbox || where == owner {
		t.Fatalf("the session's sandbox is %s on %s, want a new one off %s", moved, where, owner)
	}
	// Completions without a session land on the surviving executor too.
	for i := range 3 {
		if c := e.complete(ctx, "faults", user, "", "cat acked-0.txt"); !c.ran() || c.result.Stdout != "v0\n" {
			t.Fatalf("completion %d after the kill = %v %+v", i, c.response, c.result)
		}
	}
	for i, name := range acked {
		if r := e.download(ctx, user, "/"+name); !r.ok() || string(r.body) != fmt.Sprintf("v%d\n", i) {
			t.Fatalf("download %s = %v", name, r)
		}
	}
	checkAuditWindow(t, e, <-answered, killedAt)
}

// runUntilKilled runs numbered commands in sandbox, one after another,
// for at least three forwarding intervals and then until one fails (its
// executor was killed). It sends when each command answered.
func runUntilKilled(t *testing.T, e *env, sandbox string) <-chan map[string]time.Time {
	t.Helper()
	out := make(chan map[string]time.Time, 1)
	busy := make(chan struct{})
	go func() {
		answered := map[string]time.Time{}
		defer func() { out <- answered }()
		began, told := time.Now(), false
		for i := 0; ; i++ {
			if !told && time.Since(began) > 3*audit.DefaultFlushEvery {
				close(busy)
				told = true
			}
			cmd := fmt.Sprintf("echo audited-%d", i)
			r := e.request(t.Context(), "POST", "/api/v1/sandboxes/"+sandbox+"/commands", map[string]any{"command": cmd})
			if !r.ok() || !strings.Contains(string(r.body), `"exit_code":0`) {
				return
			}
			answered[cmd] = time.Now()
		}
	}()
	select {
	case <-busy:
	case <-time.After(requestTimeout):
		t.Fatal("the numbered commands never got going")
	}
	return out
}

// checkAuditWindow checks that the outcome of every command answered more
// than the executor's forwarding interval (audit.DefaultFlushEvery, the 2
// seconds of the audit trail's loss window) before killedAt is in the audit
// trail, and that the trail verifies. No margin is added: killedAt was
// taken before the signal, and a command counts as answered when its
// answer reached the test, two hops (executor to router to test) after
// the executor buffered its outcome, which covers the one hop of the send
// that forwards it.
func checkAuditWindow(t *testing.T, e *env, answered map[string]time.Time, killedAt time.Time) {
	t.Helper()
	window := audit.DefaultFlushEvery
	var must []string
	for cmd, at := range answered {
		if at.Before(killedAt.Add(-window)) {
			must = append(must, cmd)
		}
	}
	if len(must) == 0 {
		t.Fatalf("no command answered more than %v before the kill: %v", window, answered)
	}
	var stored map[string]bool
	eventually(t, 30*time.Second, "the outcomes forwarded before the kill are stored", func() error {
		// A fast machine answers thousands of commands: read every page.
		stored = map[string]bool{}
		for token := ""; ; {
			var page struct {
				Records []struct{ Kind, Command string }
				Next    string `json:"next_page_token"`
			}
			path := "/api/v1/audit?page_size=1000&q=audited-&page_token=" + url.QueryEscape(token)
			if err := json.Unmarshal(e.must("GET", path, nil), &page); err != nil {
				return err
			}
			for _, r := range page.Records {
				if r.Kind == "outcome" {
					stored[r.Command] = true
				}
			}
			if token = page.Next; token == "" {
				break
			}
		}
		for _, cmd := range must {
			if !stored[cmd] {
				return fmt.Errorf("%q answered %v before the kill and is not in the trail", cmd, killedAt.Sub(answered[cmd]).Round(time.Millisecond))
			}
		}
		return nil
	})
	t.Logf("%d commands answered, %d stored, %d had to be", len(answered), len(stored), len(must))
	var v struct {
		OK bool `json:"ok"`
	}
	if body := e.must("GET", "/api/v1/audit:verify", nil); json.Unmarshal(body, &v) != nil || !v.OK {
		t.Fatalf("audit verify after the kill: %s", body)
	}
}

// sessionSandbox returns the live sandbox of session and the member
// (executor) that holds it.
func sessionSandbox(t *testing.T, e *env, session string) (id, member string) {
	t.Helper()
	var list struct {
		Sandboxes []struct {
			ID, Session, State string
		} `json:"sandboxes"`
	}
	body := e.must("GET", "/api/v1/sandboxes", nil)
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	for _, sb := range list.Sandboxes {
		if sb.Session != session {
			continue
		}
		rec, ok, err := placement.Lookup(t.Context(), e.c.Etcd(), placement.SandboxKey(sb.ID))
		if err != nil || !ok {
			t.Fatalf("placement of %s: %v %v", sb.ID, ok, err)
		}
		name, ok := e.c.MemberAt(rec.Addr)
		if !ok {
			t.Fatalf("no member at %s", rec.Addr)
		}
		return sb.ID, name
	}
	t.Fatalf("no sandbox of session %s: %s", session, body)
	return "", ""
}
