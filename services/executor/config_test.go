package executor_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/executor"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/internal/platform/config"
)

// TestConfigErrorsNameTheField checks that every rejected setting names the
// flag or variable that holds it.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		env       []string
		wantField string // "" means valid
	}{
		{"defaults", nil, nil, ""},
		{"relative uid lock dir", []string{"--sandbox-uid-lock-dir", "uids"}, nil, "--sandbox-uid-lock-dir"},
		{"relative state dir", []string{"--sandbox-state-dir", "state"}, nil, "--sandbox-state-dir"},
		{"cgroup escaping its parent", []string{"--sandbox-cgroup", "../x"}, nil, "--sandbox-cgroup"},
		{"bad egress deny", []string{"--egress-deny", "10.0.0.0/8,nope"}, nil, "--egress-deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := load(&executor.Config{}, tt.args, tt.env)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("error = %v, want one naming %s", err, tt.wantField)
			}
		})
	}
}

// load fills cfg from args and env (KEY=value) alone, as `conch` does
// from its command line and environment.
func load(cfg any, args, env []string) error {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return config.LoadWith(fs, args, cfg, func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	})
}

// The executor's flag and the sandbox runtime agree on where uids are
// claimed: executors started either way share one lock dir.
func TestUIDLockDirDefault(t *testing.T) {
	t.Parallel()
	var c executor.Config
	if err := load(&c, nil, nil); err != nil {
		t.Fatal(err)
	}
	if c.SandboxUIDLockDir != sandbox.DefaultUIDLockDir {
		t.Fatalf("--sandbox-uid-lock-dir defaults to %q, the runtime to %q", c.SandboxUIDLockDir, sandbox.DefaultUIDLockDir)
	}
	// And on how long a flush may take: the executor's own default is what
	// an executor built without the flag gets.
	if c.FlushTimeout != executor.DefaultFlushTimeout {
		t.Fatalf("--flush-timeout defaults to %v, the executor to %v", c.FlushTimeout, executor.DefaultFlushTimeout)
	}
}
