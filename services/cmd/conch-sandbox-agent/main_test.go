package main

import (
	"runtime/debug"

	"testing"
)

// TestLinksLittle keeps the agent's binary small: every cold sandbox
// waits for its start, and each library it links adds its package
// initialisers and pages to that wait (gRPC and protobuf, pulled in once
// through a shared package, added some 10 ms here). The agent links the
// standard library and these modules alone.
func TestLinksLittle(t *testing.T) {
	allowed := map[string]bool{"github.com/creack/pty": true, "golang.org/x/sys": true}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	if len(bi.Deps) == 0 {
		t.Fatal("the build information lists no modules; this test would pass whatever the agent links")
	}
	for _, d := range bi.Deps {
		if !allowed[d.Path] {
			t.Errorf("the agent links %s", d.Path)
		}
	}
}
