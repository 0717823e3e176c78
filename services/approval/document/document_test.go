package document

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/conch-sh/conch/services/approval/policy"
)

// openClawExport is an exec-approvals.json as OpenClaw writes it, with a
// socket section conch does not use.
const openClawExport = `{
  "version": 1,
  "socket": {"path": "/Users/user/.clawdbot/exec-approvals.sock", "token": "abc"},
  "defaults": {
    "security": "deny",
    "ask": "on-miss",
    "askFallback": "deny",
    "autoAllowSkills": false
  },
  "agents": {
    "main": {
      "security": "allowlist",
      "ask": "on-miss",
      "askFallback": "deny",
      "autoAllowSkills": true,
      "allowlist": [
        {
          "id": "B0C8C0B3-2C2D-4F8A-9A3C-5A4B3C2D1E0F",
          "pattern": "~/Projects/**/bin/*",
          "lastUsedAt": 1737150000000,
          "lastUsedCommand": "rg -n TODO",
          "lastResolvedPath": "/Users/user/Projects/bin/rg"
        },
        {
          "id": "C1D9D1C4-3D3E-5F9B-0B4D-6B5C4D3E2F1G",
          "pattern": "/opt/homebrew/bin/rg",
          "lastUsedAt": 1737150000000,
          "lastUsedCommand": "rg test",
          "lastResolvedPath": "/opt/homebrew/bin/rg"
        }
      ]
    }
  }
}`

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return v
}

func TestOpenClawExportRoundTrips(t *testing.T) {
	t.Parallel()
	d, err := Parse([]byte(openClawExport))
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(jsonValue(t, []byte(openClawExport)), jsonValue(t, out)); diff != "" {
		t.Fatalf("round trip changed the document (-in +out):\n%s", diff)
	}
	s, skills := d.PolicySettings("main")
	if s != (policy.Settings{Security: policy.SecurityAllowlist, Ask: policy.AskOnMiss, AskFallback: policy.SecurityDeny}) || !skills {
		t.Fatalf("main settings %+v skills %v", s, skills)
	}
	s, skills = d.PolicySettings("other")
	if s.Security != policy.SecurityDeny || skills {
		t.Fatalf("other settings %+v skills %v", s, skills)
	}
	if got := d.Allowlist("main"); len(got) != 2 || got[1].Pattern != "/opt/homebrew/bin/rg" {
		t.Fatalf("allowlist %+v", got)
	}
}

// An agent's own value wins over the document's defaults, looser or not:
// that is the document's shape, not a stricter-wins rule.
func TestAgentOverDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		defaults, agent policy.Settings
		want            policy.Settings
	}{
		{"agent looser wins", policy.Settings{Security: policy.SecurityDeny, Ask: policy.AskOnMiss}, policy.Settings{Security: policy.SecurityAllowlist}, policy.Settings{Security: policy.SecurityAllowlist, Ask: policy.AskOnMiss}},
		{"agent stricter wins", policy.Settings{Security: policy.SecurityFull, Ask: policy.AskOff}, policy.Settings{Ask: policy.AskAlways, AskFallback: policy.SecurityDeny}, policy.Settings{Security: policy.SecurityFull, Ask: policy.AskAlways, AskFallback: policy.SecurityDeny}},
		{"unset agent keeps defaults", policy.Settings{Security: policy.SecurityDeny, Ask: policy.AskAlways, AskFallback: policy.SecurityAllowlist}, policy.Settings{}, policy.Settings{Security: policy.SecurityDeny, Ask: policy.AskAlways, AskFallback: policy.SecurityAllowlist}},
		{"unset defaults take the agent", policy.Settings{}, policy.Settings{AskFallback: policy.SecurityFull}, policy.Settings{AskFallback: policy.SecurityFull}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := agentOver(tc.defaults, tc.agent); got != tc.want {
				t.Errorf("agentOver = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, want string }{
		{`[]`, "exec-approvals: request body: want an object, got an array"},
		{`{"version": 2}`, "version: want 1"},
		{`{"version": 1, "defaults": {"security": "yolo"}}`, "defaults.security"},
		{`{"version": 1, "agents": {"main": {"ask": "sometimes"}}}`, "agents.main.ask"},
		{`{"version": 1, "agents": {"main": {"askFallback": "maybe"}}}`, "agents.main.askFallback"},
		{`{"version": 1, "agents": {"main": {"allowlist": [{"pattern": "rg"}]}}}`, "agents.main.allowlist[0].pattern \"rg\": " + policy.ErrPatternNotBinary},
		{`{"version": 1, "agents": {"main": {"allowlist": [{"id": "a", "pattern": "/a"}, {"id": "a", "pattern": "/b"}]}}}`, "duplicate"},
		{`{"version": 1, "agents": {"main": {"allowlist": [{"pattern": "/a", "lastUsedAt": -1}]}}}`, "lastUsedAt"},
		{`{"version": 1, "agents": {"main": {"allowlist": [{"pattern": "/a", "lastUsedAt": "x"}]}}}`, "lastUsedAt: want an integer, got a string"},
		{`{"version": 1, "agents": {"a/b": {}}}`, "agents: name"},
		{`{"version": 1, "agents": {"main": null}}`, "agents.main: want an object"},
		{`{"version": 1,`, "request body is not valid JSON: unexpected end of JSON input at line 1, column 14"},
		{`{"version": 1, "x": "` + strings.Repeat("a", MaxBytes) + `"}`, "larger than"},
	} {
		_, err := Parse([]byte(tc.doc))
		var inv *InvalidError
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.60s) = %v, want an InvalidError containing %q", tc.doc, err, tc.want)
		}
	}
}

func TestEditing(t *testing.T) {
	t.Parallel()
	d := Empty()
	if _, err := d.AddPattern("main", "rg"); err == nil || err.Error() != policy.ErrPatternNotBinary {
		t.Fatalf("bare name: %v", err)
	}
	e, err := d.AddPattern("main", "/usr/bin/rg")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := d.AddPattern("main", "/usr/bin/rg")
	if again.ID != e.ID || len(d.Agents["main"].Allowlist) != 1 {
		t.Fatal("adding a pattern twice made two entries")
	}
	if !d.RecordUse("main", 42, []Use{{EntryID: e.ID, Command: "rg x", ResolvedPath: "/usr/bin/rg"}}) {
		t.Fatal("RecordUse changed nothing")
	}
	got := d.Agents["main"].Allowlist[0]
	if got.LastUsedAt != 42 || got.LastUsedCommand != "rg x" || got.LastResolvedPath != "/usr/bin/rg" {
		t.Fatalf("entry after use %+v", got)
	}
	if !d.RemoveEntry("main", "/usr/bin/rg") || d.RemoveEntry("main", e.ID) {
		t.Fatal("RemoveEntry by pattern")
	}
	b, _ := d.Marshal()
	if !strings.Contains(string(b), `"allowlist": []`) {
		t.Fatalf("empty allowlist not written as []: %s", b)
	}
}

// A document of a current OpenClaw (argPattern and source on allowlist
// entries) and conch's deny lists survive a round trip unchanged, and the
// policy gets them.
func TestDenylistAndNewerFields(t *testing.T) {
	t.Parallel()
	const doc = `{
  "version": 1,
  "defaults": {"security": "allowlist", "denylist": [{"id": "no-curl", "pattern": "/usr/bin/curl"}]},
  "agents": {
    "main": {
      "allowlist": [{"id": "git-read", "pattern": "/usr/bin/git", "argPattern": "status*", "source": "allow-always", "future": 1}],
      "denylist": [{"id": "no-push", "pattern": "/usr/bin/git", "argPattern": "push*"}]
    }
  }
}`
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	_ = json.Unmarshal([]byte(doc), &want)
	_ = json.Unmarshal(out, &got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]policy.Entry{{ID: "no-curl", Pattern: "/usr/bin/curl"}, {ID: "no-push", Pattern: "/usr/bin/git", ArgPattern: "push*"}}, d.Denylist("main")); diff != "" {
		t.Errorf("deny rules of main (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]policy.Entry{{ID: "no-curl", Pattern: "/usr/bin/curl"}}, d.Denylist("other")); diff != "" {
		t.Errorf("deny rules of another agent (-want +got):\n%s", diff)
	}
	if got := d.Allowlist("main"); len(got) != 1 || got[0].ArgPattern != "status*" {
		t.Errorf("allowlist of main: %+v", got)
	}
	for bad, field := range map[string]string{
		`{"version": 1, "defaults": {"denylist": [{"id": "x", "pattern": "curl"}]}}`:                              "defaults.denylist[0].pattern",
		`{"version": 1, "agents": {"a": {"denylist": [{"id": "x", "pattern": "/bin/x", "argPattern": "[a"}]}}}`:   "agents.a.denylist[0].argPattern",
		`{"version": 1, "agents": {"a": {"allowlist": [{"id": "x", "pattern": "/bin/x", "argPattern": "x\\"}]}}}`: "agents.a.allowlist[0].argPattern",
		`{"version": 1, "defaults": {"denylist": [{"id": "x", "pattern": "/a"}, {"id": "x", "pattern": "/b"}]}}`:  "defaults.denylist[1].id",
	} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", bad, err, field)
		}
	}
}
