package approval

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// policyDoc explains the exec policy; its deny-rule example is checked
// here.
const policyDoc = "docs/explanation/exec-policy.md"

// readmeOutcome is a command the deny-rule example of policyDoc lists after
// the rule, with what it says happens to it.
type readmeOutcome struct {
	cmd string
	// runs, or else refused with a reason holding reason.
	runs   bool
	reason string
}

// readmeOutcomeLine is "#   <command>  runs" or "#   <command>  refused (<reason>)".
var readmeOutcomeLine = regexp.MustCompile(`^#   (\S.*?)\s{2,}(?:(runs)|refused \((.+)\))$`)

// readmeDenyExample returns the exec settings of policyDoc's deny-rule
// example, the body of its PATCH as written, and the outcomes it lists.
func readmeDenyExample(t *testing.T) (*approvalv1.ExecSettings, []readmeOutcome) {
	t.Helper()
	b, err := os.ReadFile("../../" + policyDoc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "**Deny rules**")
	if start < 0 {
		t.Fatal(policyDoc + " has no **Deny rules** paragraph")
	}
	var body string
	var outcomes []readmeOutcome
	inBlock := false
	for _, line := range strings.Split(s[start:], "\n") {
		code, ok := strings.CutPrefix(line, "    ")
		if !ok {
			if inBlock {
				break
			}
			continue
		}
		inBlock = true
		code = strings.TrimSpace(code)
		if _, d, ok := strings.Cut(code, "-d '"); ok {
			body = strings.TrimSuffix(d, "'")
		}
		if m := readmeOutcomeLine.FindStringSubmatch(code); m != nil {
			outcomes = append(outcomes, readmeOutcome{cmd: strings.TrimSpace(m[1]), runs: m[2] != "", reason: m[3]})
		}
	}
	var patch struct {
		Exec json.RawMessage `json:"exec"`
	}
	if err := json.Unmarshal([]byte(body), &patch); err != nil || patch.Exec == nil {
		t.Fatalf(policyDoc+": the deny-rule example's body %q is not a gateway's exec settings: %v", body, err)
	}
	exec := &approvalv1.ExecSettings{}
	if err := protojson.Unmarshal(patch.Exec, exec); err != nil {
		t.Fatalf(policyDoc+": the deny-rule example's exec settings %s: %v", patch.Exec, err)
	}
	if len(exec.GetDeny()) == 0 {
		t.Fatalf(policyDoc+": the deny-rule example %s sets no deny rule", patch.Exec)
	}
	return exec, outcomes
}

// TestReadmeDenyRuleExample sets the deny rule of policyDoc's example as
// written as a gateway's exec settings and judges, for the gateway's
// sandboxes, each command the example lists after it: each must have the
// outcome the example gives, and echo, printf and redirections must be
// among those that run.
func TestReadmeDenyRuleExample(t *testing.T) {
	t.Parallel()
	exec, outcomes := readmeDenyExample(t)
	s, ctx := newServer(t)
	found := &approvalv1.SandboxResolution{Segments: segs("rm", "/usr/bin/rm", "ls", "/usr/bin/ls", "cat", "/usr/bin/cat")}
	for _, o := range outcomes {
		resp, err := s.Evaluate(ctx, &approvalv1.EvaluateRequest{Command: o.cmd, Host: approvalv1.Host_HOST_SANDBOX,
			Cwd: "/home/workspace", Settings: exec, SandboxResolution: found})
		if err != nil {
			t.Fatalf("evaluate %q: %v", o.cmd, err)
		}
		if resp.GetSecurity() != approvalv1.Security_SECURITY_FULL {
			t.Errorf("%q: security %v, want the sandbox's full", o.cmd, resp.GetSecurity())
		}
		switch {
		case o.runs && (resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_ALLOW || resp.GetPlan() == ""):
			t.Errorf(policyDoc+" says %q runs; it is %v %q (plan %q)", o.cmd, resp.GetDecision(), resp.GetReason(), resp.GetPlan())
		case !o.runs && (resp.GetDecision() != approvalv1.PolicyDecision_POLICY_DECISION_DENY || !strings.Contains(resp.GetReason(), o.reason)):
			t.Errorf(policyDoc+" says %q is refused (%s); it is %v %q", o.cmd, o.reason, resp.GetDecision(), resp.GetReason())
		}
	}
	for _, want := range []string{"echo ", "printf ", ">", "deny rule "} {
		if !slices.ContainsFunc(outcomes, func(o readmeOutcome) bool { return strings.Contains(o.cmd+" "+o.reason, want) }) {
			t.Errorf(policyDoc+": the deny-rule example shows no command with %q", want)
		}
	}
}
