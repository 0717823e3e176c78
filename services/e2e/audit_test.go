package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// auditRecord is an audit record as GET /api/v1/audit returns it.
type auditRecord struct {
	Kind, Event, Account, User, Gateway, Host, Sandbox, Command, Decision, Reason string
	ApprovalID                                                                    string `json:"approval_id"`
	ResolvedBy                                                                    string `json:"resolved_by"`
	Surface                                                                       string
	TraceID                                                                       string `json:"trace_id"`
	Outcome                                                                       *struct {
		ExitCode    int   `json:"exit_code"`
		StdoutBytes int64 `json:"stdout_bytes"`
		DurationMs  int64 `json:"duration_ms"`
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

	// Every chain checks out.
	code, body := d.call("GET", "/api/v1/audit:verify", d.Key, nil)
	var v struct {
		OK      bool `json:"ok"`
		Reports []struct {
			Account string
			Records int
			Problem any
		}
	}
	if err := json.Unmarshal(body, &v); code != http.StatusOK || err != nil || !v.OK || len(v.Reports) == 0 || v.Reports[0].Records == 0 {
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
