package policy

import "testing"

// A typical three-segment command: a cd, an allowlisted program and a safe
// bin in a pipeline.
const benchCommand = "cd /home/u/work && git log --oneline -n 20 | grep -i fix"

func BenchmarkEvaluate(b *testing.B) {
	e, r := testEngine()
	req := Request{Command: benchCommand, Cwd: "/home/u", Resolver: r, Settings: Settings{Security: SecurityAllowlist, Ask: AskOnMiss}}
	if res := e.Evaluate(req); res.Decision != Allow || len(res.Segments) != 3 {
		b.Fatalf("bench command: %v %q %d segments", res.Decision, res.Reason, len(res.Segments))
	}
	b.ReportAllocs()
	for b.Loop() {
		e.Evaluate(req)
	}
}

// The service builds an engine per request from the stored allowlist.
func BenchmarkEvaluateWithNewEngine(b *testing.B) {
	_, r := testEngine()
	cfg := Config{Allowlist: []Entry{{ID: "git", Pattern: "/usr/bin/git"}, {ID: "home", Pattern: "~/bin/*"}, {ID: "p", Pattern: "~/Projects/**/bin/*"}}, Home: "/home/u"}
	req := Request{Command: benchCommand, Cwd: "/home/u", Resolver: r, Settings: Settings{Security: SecurityAllowlist, Ask: AskOnMiss}}
	b.ReportAllocs()
	for b.Loop() {
		if New(cfg).Evaluate(req).Decision != Allow {
			b.Fatal("not allowed")
		}
	}
}
