package policy

import (
	"strings"
	"testing"
)

// BenchmarkLongWords judges commands of a megabyte made of one long word
// built a byte at a time: linear work, where a word that grew by string
// concatenation once took minutes (a denial of service on the approval
// service by any account).
func BenchmarkLongWords(b *testing.B) {
	e := New(Config{})
	for _, tc := range []struct{ name, cmd string }{
		{"plain", strings.Repeat("a", 1<<20-16) + "?}"},
		{"escaped", strings.Repeat(`\a`, 1<<19-8)},
		{"globs", strings.Repeat("a*", 1<<19-8)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				e.Evaluate(Request{Command: tc.cmd, Cwd: "/", Resolver: PathResolver{Path: []string{"/usr/bin"}},
					Settings: Settings{Security: SecurityAllowlist, Ask: AskOff}})
			}
		})
	}
}
