package sandbox

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestNewRuntimeNeedsSeccomp: a runtime given no filter, or bytes that
// are not whole sock_filter instructions, refuses to start rather than run
// sandboxes without one.
func TestNewRuntimeNeedsSeccomp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		filter []byte
	}{
		{"none", nil},
		{"empty", []byte{}},
		{"not whole instructions", make([]byte, 12)},
	} {
		_, err := NewRuntime(Config{Seccomp: tc.filter, StateDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "no seccomp filter") {
			t.Errorf("%s: NewRuntime = %v, want the refusal", tc.name, err)
		}
	}
}

// TestAgentLinksNoHostLibraries keeps the agent binary small: it links
// this package, and every package this one imports is initialised at each
// agent start, which every cold sandbox waits for. The host's libraries
// are given to the runtime instead (Config.Seccomp, Config.TracerProvider).
func TestAgentLinksNoHostLibraries(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{
		"go.opentelemetry.io/otel",                                    // its global links net/http and TLS
		"github.com/conch-sh/conch/services/executor/sandbox/seccomp", // builds system call tables at init
		"github.com/elastic/go-seccomp-bpf/arch",
		"net/http",
	} {
		if slices.Contains(pkg.Imports, banned) {
			t.Errorf("package sandbox imports %s", banned)
		}
	}
}
