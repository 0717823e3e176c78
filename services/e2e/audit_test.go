package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/conchtest/testnet"
)

// auditRecord is an audit record as GET /api/v1/audit returns it.
type auditRecord struct {
	Kind, Event, Account, User, Session, Gateway, Host, Sandbox, Command, Decision, Reason string
	ApprovalID                                                                             string `json:"approval_id"`
	ResolvedBy                                                                             string `json:"resolved_by"`
	Surface                                                                                string
	TraceID                                                                                string `json:"trace_id"`
	Outcome                                                                                *struct {
		ExitCode    int    `json:"exit_code"`
		TimedOut    bool   `json:"timed_out"`
		StdoutBytes int64  `json:"stdout_bytes"`
		DurationMs  int64  `json:"duration_ms"`
		ProcessID   string `json:"process_id"`
		OutputBytes int64  `json:"output_bytes"`
	}
}

// auditUntil polls GET /api/v1/audit?query with key until want holds for
// the records, for up to 15s, and returns them.
func auditUntil(t *testing.T, d *dev, key, query string, want func([]auditRecord) bool) []auditRecord {
	t.Helper()
	var recs []auditRecord
	var body []byte
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var code int
		code, body = d.call("GET", "/api/v1/audit?"+query, key, nil)
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/audit?%s = %d %s", query, code, body)
		}
		var page struct{ Records []auditRecord }
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if recs = page.Records; want(recs) {
			return recs
		}
	}
	t.Fatalf("audit ?%s never matched: %s", query, body)
	return nil
}

func findRecord(recs []auditRecord, f func(auditRecord) bool) *auditRecord {
	for i := range recs {
		if f(recs[i]) {
			return &recs[i]
		}
	}
	return nil
}

// The audit trail records a sandbox command's outcome, an approval asked,
// answered over REST by the authenticated key, and used, and a refusal;
// the API filters and keeps accounts apart; the chains verify.
func TestAuditTrail(t *testing.T) {
	d := startDev(t, "CONCH_AUDIT_FLUSH=200ms")

	// A plain command in a sandbox: its outcome.
	runCommand(t, d, "default", "shell", "alice", "echo audited")
	recs := auditUntil(t, d, d.Key, "q="+url.QueryEscape("echo audited"), func(r []auditRecord) bool { return len(r) > 0 })
	out := findRecord(recs, func(r auditRecord) bool { return r.Kind == "outcome" })
	if out == nil || out.Outcome == nil || out.Outcome.ExitCode != 0 || out.Outcome.StdoutBytes != int64(len("audited\n")) ||
		out.User != "alice" || out.Gateway != "default" || out.Host != "sandbox" || out.Sandbox == "" || out.Account != "dev" {
		t.Fatalf("outcome record: %+v", recs)
	}

	// An approval answered over REST: who answered and where.
	createGateway(t, d, map[string]any{"name": "asking", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	answered := allowWhenPending(t, d, "uname -s", func(pendingApproval) {})
	if body := runCommand(t, d, "asking", "shell", "bob", "uname -s"); !strings.Contains(body, "Linux") {
		t.Fatalf("approved command: %s", body)
	}
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("resolve = %d", code)
	}
	recs = auditUntil(t, d, d.Key, "gateway=asking", func(r []auditRecord) bool {
		return findRecord(r, func(r auditRecord) bool { return r.Kind == "outcome" }) != nil &&
			findRecord(r, func(r auditRecord) bool { return r.Kind == "command" && r.Decision == "allow" }) != nil
	})
	asked := findRecord(recs, func(r auditRecord) bool { return r.Kind == "command" && r.Decision == "ask" })
	created := findRecord(recs, func(r auditRecord) bool { return r.Event == "created" })
	resolved := findRecord(recs, func(r auditRecord) bool { return r.Event == "resolved" })
	used := findRecord(recs, func(r auditRecord) bool { return r.Kind == "command" && r.Decision == "allow" })
	if asked == nil || created == nil || resolved == nil || used == nil {
		t.Fatalf("approval records: %+v", recs)
	}
	if !strings.HasPrefix(resolved.ResolvedBy, "key:") || resolved.Surface != "rest" || resolved.Decision != "allow-once" ||
		used.ResolvedBy != resolved.ResolvedBy || used.ApprovalID != created.ApprovalID || used.User != "bob" || used.Command != "uname -s" {
		t.Fatalf("who answered: resolved %+v used %+v", resolved, used)
	}
	for _, r := range recs {
		if r.Gateway != "asking" {
			t.Fatalf("gateway filter let through %+v", r)
		}
	}

	// A refusal.
	createGateway(t, d, map[string]any{"name": "guarded", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"deny": []map[string]string{{"id": "no-rm", "pattern": "/usr/bin/rm"}}}})
	runCommand(t, d, "guarded", "shell", "", "rm -rf /tmp/x")
	recs = auditUntil(t, d, d.Key, "decision=deny", func(r []auditRecord) bool { return len(r) > 0 })
	if len(recs) != 1 || recs[0].Command != "rm -rf /tmp/x" || !strings.Contains(recs[0].Reason, "deny rule no-rm") || recs[0].Gateway != "guarded" {
		t.Fatalf("refusal records: %+v", recs)
	}

	// Filters by user and time, and paging newest first.
	recs = auditUntil(t, d, d.Key, "user=bob&since="+url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)), func(r []auditRecord) bool { return len(r) > 0 })
	for _, r := range recs {
		if r.User != "bob" {
			t.Fatalf("user filter let through %+v", r)
		}
	}
	if _, body := d.call("GET", "/api/v1/audit?until="+url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)), d.Key, nil); strings.Contains(string(body), "uname") {
		t.Fatalf("until filter: %s", body)
	}
	_, body := d.call("GET", "/api/v1/audit?page_size=2", d.Key, nil)
	var page struct {
		Records []struct{ Time time.Time }
		Next    string `json:"next_page_token"`
	}
	if err := json.Unmarshal(body, &page); err != nil || len(page.Records) != 2 || page.Next == "" || page.Records[0].Time.Before(page.Records[1].Time) {
		t.Fatalf("first page: %s", body)
	}

	// Another account sees none of it, and may not ask for it.
	other := newAccount(t, d, "Outsiders")
	if code, body := d.call("GET", "/api/v1/audit", other, nil); code != http.StatusOK || strings.Contains(string(body), "uname") {
		t.Fatalf("another account's view = %d %s", code, body)
	}
	if code, _ := d.call("GET", "/api/v1/audit?account=dev", other, nil); code != http.StatusForbidden {
		t.Fatalf("another account asking for dev's trail = %d", code)
	}
	// Its own sandbox command (sandbox REST) is its own; the admin key sees
	// both accounts, or one.
	code, body := d.call("POST", "/api/v1/sandboxes", other, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); code != http.StatusOK || err != nil {
		t.Fatalf("create sandbox = %d %s", code, body)
	}
	if code, body := d.call("POST", "/api/v1/sandboxes/"+sb.ID+"/commands", other, map[string]any{"command": "echo outsider"}); code != http.StatusOK {
		t.Fatalf("run = %d %s", code, body)
	}
	mine := auditUntil(t, d, other, "", func(r []auditRecord) bool { return len(r) > 0 })
	if len(mine) != 1 || mine[0].Command != "echo outsider" || mine[0].Sandbox != sb.ID {
		t.Fatalf("the other account's trail: %+v", mine)
	}
	all := auditUntil(t, d, d.Key, "q=echo", func(r []auditRecord) bool { return len(r) >= 2 })
	accounts := map[string]bool{}
	for _, r := range all {
		accounts[r.Account] = true
	}
	if !accounts["dev"] || !accounts[mine[0].Account] {
		t.Fatalf("the admin's view: %+v", all)
	}
	if one := auditUntil(t, d, d.Key, "account="+mine[0].Account, func(r []auditRecord) bool { return len(r) > 0 }); len(one) != 1 {
		t.Fatalf("the admin asking for one account: %+v", one)
	}

	// Every chain of every account checks out.
	code, body = d.call("GET", "/api/v1/audit:verify", d.Key, nil)
	var v struct {
		OK      bool `json:"ok"`
		Reports []struct {
			Account string
			Records int
			Problem any
		}
	}
	if err := json.Unmarshal(body, &v); code != http.StatusOK || err != nil || !v.OK || len(v.Reports) != 2 || v.Reports[0].Records == 0 {
		t.Fatalf("verify = %d %s", code, body)
	}

	// The CLI shows the same.
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"audit"}, args...)...)
		cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("conch audit %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("--gateway", "asking", "--since", "1h"); !strings.Contains(out, "approval resolved") || !strings.Contains(out, "(rest)") || !strings.Contains(out, "uname -s") {
		t.Fatalf("conch audit --gateway asking:\n%s", out)
	}
	if out := cli("-o", "json", "--decision", "deny"); !strings.Contains(out, `"reason": "Command not allowed by exec policy (deny rule no-rm)"`) {
		t.Fatalf("conch audit -o json --decision deny:\n%s", out)
	}
	if out := cli("verify"); !strings.Contains(out, "dev: ok") {
		t.Fatalf("conch audit verify:\n%s", out)
	}
}

// Policy replay judges the audited commands again under a proposed
// document or gateway settings and reports only what the proposal
// changes, running nothing.
func TestAuditPolicyReplay(t *testing.T) {
	d := startDev(t, "CONCH_AUDIT_FLUSH=200ms")
	createGateway(t, d, map[string]any{"name": "listed", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	current := `{"version": 1, "agents": {"listed": {"allowlist": [{"id": "ls", "pattern": "/usr/bin/ls"}]}}}`
	if code, body, _ := d.raw("PUT", "/api/v1/exec-approvals", []byte(current)); code != http.StatusOK {
		t.Fatalf("PUT document = %d %s", code, body)
	}
	for _, c := range []string{"echo one", "uname -s", "ls -d /"} {
		runCommand(t, d, "default", "shell", "", c)
	}
	runCommand(t, d, "listed", "shell", "", "ls -d /")
	auditUntil(t, d, d.Key, "", func(r []auditRecord) bool {
		n := 0
		for _, x := range r {
			if x.Kind == "outcome" {
				n++
			}
		}
		return n == 4
	})

	tests := []struct {
		name     string
		body     map[string]any
		commands int
		changes  map[string]int
		programs string
	}{
		{name: "the current policy changes nothing", body: map[string]any{}, commands: 4, changes: map[string]int{}},
		{name: "a deny rule", body: map[string]any{"document": json.RawMessage(`{"version": 1, "defaults": {"denylist": [{"id": "no-uname", "pattern": "/usr/bin/uname"}]},
			"agents": {"listed": {"allowlist": [{"id": "ls", "pattern": "/usr/bin/ls"}]}}}`)}, commands: 4,
			// Under deny rules full mode runs only what the policy can
			// judge; the builtin echo runs no program and still runs.
			changes: map[string]int{"allow→deny": 1}, programs: "allow→deny /usr/bin/uname 1"},
		{name: "an allowlist entry removed", body: map[string]any{"document": json.RawMessage(`{"version": 1}`)}, commands: 4, changes: map[string]int{"allow→ask": 1}, programs: "allow→ask /usr/bin/ls 1"},
		{name: "gateway settings", body: map[string]any{"gateway": "default", "gateway_exec": map[string]any{"security": "deny"}}, commands: 3, changes: map[string]int{"allow→deny": 3},
			// Security deny refuses before judging any program: first words.
			programs: "allow→deny echo 1, allow→deny ls 1, allow→deny uname 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := d.call("POST", "/api/v1/exec-policy:replay", d.Key, tc.body)
			var out struct {
				Commands, Changed int
				Changes           []struct {
					From, To string
					Count    int
				}
				Programs []struct {
					From, To, Program string
					Count             int
				}
			}
			if err := json.Unmarshal(body, &out); code != http.StatusOK || err != nil {
				t.Fatalf("replay = %d %s", code, body)
			}
			got := map[string]int{}
			for _, c := range out.Changes {
				got[c.From+"→"+c.To] = c.Count
			}
			if out.Commands != tc.commands || len(got) != len(tc.changes) {
				t.Fatalf("replay: %s", body)
			}
			for k, n := range tc.changes {
				if got[k] != n {
					t.Fatalf("replay %s = %d, want %d: %s", k, got[k], n, body)
				}
			}
			var progs []string
			for _, p := range out.Programs {
				progs = append(progs, fmt.Sprintf("%s→%s %s %d", p.From, p.To, p.Program, p.Count))
			}
			if g := strings.Join(progs, ", "); g != tc.programs {
				t.Fatalf("per program = %q, want %q", g, tc.programs)
			}
		})
	}
	if code, body := d.call("POST", "/api/v1/exec-policy:replay", d.Key, map[string]any{"document": map[string]any{"version": 7}}); code != http.StatusBadRequest {
		t.Fatalf("an invalid document = %d %s", code, body)
	}
	// Replay judged without recording: after one more command, the trail
	// holds its outcome and nothing else new.
	runCommand(t, d, "default", "shell", "", "true")
	recs := auditUntil(t, d, d.Key, "", func(r []auditRecord) bool { return len(r) > 0 && r[0].Command == "true" })
	if len(recs) != 6 { // 4 outcomes, listed's verdict, and this one
		t.Fatalf("replay left records: %+v", recs)
	}

	// The CLI.
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	file := t.TempDir() + "/proposed.json"
	if err := os.WriteFile(file, []byte(`{"version": 1, "defaults": {"denylist": [{"id": "no-uname", "pattern": "/usr/bin/uname"}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "approvals", "replay", file, "--since", "1h")
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "5 commands judged again, 2 would change") || !strings.Contains(string(out), "/usr/bin/uname") {
		t.Fatalf("conch approvals replay: %v\n%s", err, out)
	}
}

// A gateway with exec.audit sync has its records written before the
// result returns; the others wait for the flush interval (here an hour).
func TestAuditSync(t *testing.T) {
	d := startDev(t, "CONCH_AUDIT_FLUSH=1h")
	createGateway(t, d, map[string]any{"name": "synced", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"audit": "sync", "deny": []map[string]string{{"id": "no-rm", "pattern": "/usr/bin/rm"}}}})
	createGateway(t, d, map[string]any{"name": "buffered", "upstream": map[string]any{"provider": "scripted"}})
	runCommand(t, d, "buffered", "shell", "", "echo later")
	runCommand(t, d, "synced", "shell", "", "uname -s")
	code, body := d.call("GET", "/api/v1/audit", d.Key, nil)
	var page struct{ Records []auditRecord }
	if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil {
		t.Fatalf("audit = %d %s", code, body)
	}
	kinds := map[string]bool{}
	for _, r := range page.Records {
		kinds[r.Gateway+" "+r.Kind] = true
	}
	// The buffered gateway's outcome was written with the synced ones, which
	// flush what was buffered before them.
	if !kinds["synced command"] || !kinds["synced outcome"] || !kinds["buffered outcome"] {
		t.Fatalf("records right after a sync command: %s", body)
	}
	if code, body := d.call("POST", "/api/v1/gateways", d.Key, map[string]any{"name": "bad", "upstream": map[string]any{"provider": "scripted"},
		"exec": map[string]any{"audit": "sometimes"}}); code != http.StatusBadRequest || !strings.Contains(string(body), "exec.audit") {
		t.Fatalf("an unknown audit mode = %d %s", code, body)
	}
}

// A command moved to the background is recorded when it ends, under the
// trace of the call that started it, with all it wrote; one killed by its
// timeout says so. conch audit --follow prints it as it comes.
func TestAuditBackground(t *testing.T) {
	d := startDev(t, "CONCH_AUDIT_FLUSH=200ms")
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		switch n {
		case 0:
			return 200, openAIToolCall("call_bg", "exec", map[string]any{"command": "sleep 0.5; echo finished-later; exit 3", "background": true})
		case 2:
			return 200, openAIToolCall("call_slow", "exec", map[string]any{"command": "echo started-slow; sleep 60", "background": true, "timeout": 1})
		}
		return 200, openAIText("started")
	})
	createGateway(t, d, map[string]any{"name": "background", "upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})

	// The follower starts before the commands, and must print them.
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	follow := exec.CommandContext(t.Context(), bin, "audit", "--follow", "--gateway", "background")
	follow.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
	followed := &lockedBuffer{}
	follow.Stdout, follow.Stderr = followed, followed
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Kill(); _ = follow.Wait() })

	complete := func(prompt string) string {
		t.Helper()
		code, body := d.call("POST", "/v1/chat/completions", d.Key, map[string]any{
			"model": "background", "user": "carol",
			"messages": []map[string]string{{"role": "user", "content": prompt}},
			"tools":    []map[string]string{{"type": "exec"}},
		}, "X-Conch-Session-Id", "audited-session")
		if code != http.StatusOK || !strings.Contains(string(body), `\"status\":\"running\"`) {
			t.Fatalf("completion = %d %s, want the command in the background", code, body)
		}
		return string(body)
	}
	complete("start it")
	recs := auditUntil(t, d, d.Key, "q=finished-later", func(r []auditRecord) bool {
		return findRecord(r, func(r auditRecord) bool { return r.Kind == "outcome" }) != nil
	})
	out := findRecord(recs, func(r auditRecord) bool { return r.Kind == "outcome" })
	if len(recs) != 1 || out.Outcome == nil || out.Outcome.ExitCode != 3 || out.Outcome.ProcessID == "" ||
		out.Outcome.OutputBytes != int64(len("finished-later\n")) || out.Outcome.DurationMs < 500 ||
		out.User != "carol" || out.Gateway != "background" || out.Sandbox == "" || out.TraceID == "" {
		t.Fatalf("the background command's record: %+v %+v", recs, out.Outcome)
	}

	complete("start the slow one")
	recs = auditUntil(t, d, d.Key, "q=started-slow", func(r []auditRecord) bool { return len(r) > 0 })
	if out := recs[0]; out.Kind != "outcome" || out.Outcome == nil || !out.Outcome.TimedOut || out.Outcome.ExitCode != -1 ||
		out.Outcome.OutputBytes != int64(len("started-slow\n")) || out.Outcome.ProcessID == "" {
		t.Fatalf("the timed-out background command's record: %+v", recs)
	}

	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(followed.String(), "started-slow"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("conch audit --follow never printed the second command:\n%s", followed)
		}
	}
	if got := followed.String(); !strings.Contains(got, "finished-later") {
		t.Fatalf("conch audit --follow:\n%s", got)
	}
}

// A sandbox's connections, allowed and refused, are records after the
// outcome of the command that made them.
func TestAuditEgress(t *testing.T) {
	in := testnet.Start(t)
	d := startDev(t, "CONCH_AUDIT_FLUSH=200ms")
	site := in.Addr.String()
	id := newSandbox(t, d, map[string]any{"network": map[string]any{"mode": "allowlist", "allowed_domains": []string{site}}})
	// The last command's one delivery follows 70 refusals.
	flood := "for i in $(seq 70); do curl -s -o /dev/null http://flood$i.conch.test/; done; curl -sS http://" + site + "/delivered"
	for _, c := range []string{"curl -sS http://" + site + "/audit", "curl -sS http://denied.conch.test/", flood} {
		if code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": c, "timeout_seconds": 120}); code != http.StatusOK {
			t.Fatalf("%s = %d %s", c, code, body)
		}
	}
	type egressRecord struct {
		Kind, Decision, Reason, Sandbox, Command string
		Egress                                   *struct {
			Host          string
			Port          int
			BytesReceived int64 `json:"bytes_received"`
		}
		Outcome *struct {
			EgressOmitted int `json:"egress_omitted"`
		}
	}
	var recs []egressRecord
	floodOmitted := -1
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, body := d.call("GET", "/api/v1/audit?q=curl&page_size=1000", d.Key, nil)
		var page struct{ Records []egressRecord }
		_ = json.Unmarshal(body, &page)
		recs = recs[:0]
		for _, r := range page.Records {
			switch {
			case r.Kind == "egress":
				recs = append(recs, r)
			case r.Kind == "outcome" && r.Command == flood && r.Outcome != nil:
				floodOmitted = r.Outcome.EgressOmitted
			}
		}
		if len(recs) >= 2+65 && floodOmitted >= 0 {
			break
		}
	}
	var allowed, denied, delivered bool
	for _, r := range recs {
		if r.Egress == nil || r.Sandbox != id {
			t.Fatalf("egress record without its connection or sandbox: %+v", r)
		}
		switch {
		case r.Decision == "allowed" && strings.Contains(r.Command, "/audit") && r.Egress.BytesReceived > 0:
			allowed = true
		case r.Decision == "refused" && r.Egress.Host == "denied.conch.test" && r.Egress.Port == 80:
			denied = true
		case r.Decision == "allowed" && r.Command == flood && r.Egress.BytesReceived > 0:
			delivered = true
		}
	}
	if !allowed || !denied || !delivered || floodOmitted != 6 {
		t.Fatalf("egress records: %d, the flood's delivery kept %v, its outcome says %d omitted: %+v", len(recs), delivered, floodOmitted, recs)
	}
}
