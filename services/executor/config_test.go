package executor_test

import (
	"testing"

	"github.com/conch-sh/conch/services/executor"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
)

// TestConfigErrorsNameTheField checks that every rejected setting names the
// flag or variable that holds it.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	configtest.ErrorsNameTheField(t, func() any { return &executor.Config{} }, []configtest.Case{
		{Name: "defaults"},
		{Name: "relative uid lock dir", Args: []string{"--sandbox-uid-lock-dir", "uids"}, WantField: "--sandbox-uid-lock-dir"},
		{Name: "relative state dir", Args: []string{"--sandbox-state-dir", "state"}, WantField: "--sandbox-state-dir"},
		{Name: "cgroup escaping its parent", Args: []string{"--sandbox-cgroup", "../x"}, WantField: "--sandbox-cgroup"},
		{Name: "negative launch ahead", Args: []string{"--sandbox-launch-ahead", "-1"}, WantField: "--sandbox-launch-ahead"},
		{Name: "too many launches ahead", Args: []string{"--sandbox-launch-ahead", "65"}, WantField: "--sandbox-launch-ahead"},
		{Name: "bad egress deny", Args: []string{"--egress-deny", "10.0.0.0/8,10.0.0.0/33"}, WantField: "--egress-deny"},
	})
}

// The executor's flag and the sandbox runtime agree on where uids are
// claimed: executors started either way share one lock dir.
func TestUIDLockDirDefault(t *testing.T) {
	t.Parallel()
	var c executor.Config
	if err := configtest.Load(&c, nil, nil); err != nil {
		t.Fatal(err)
	}
	if c.SandboxUIDLockDir != sandbox.DefaultUIDLockDir {
		t.Fatalf("--sandbox-uid-lock-dir defaults to %q, the runtime to %q", c.SandboxUIDLockDir, sandbox.DefaultUIDLockDir)
	}
	// And on how many launches are kept ahead; 0 is none, which the
	// runtime spells -1.
	if c.LaunchAhead() != sandbox.DefaultLaunchAhead {
		t.Fatalf("--sandbox-launch-ahead defaults to %d, the runtime to %d", c.LaunchAhead(), sandbox.DefaultLaunchAhead)
	}
	if none := (executor.Config{}); none.LaunchAhead() >= 0 {
		t.Fatalf("--sandbox-launch-ahead 0 gives the runtime %d, not none", none.LaunchAhead())
	}
	// And on how long a flush may take: the executor's own default is what
	// an executor built without the flag gets.
	if c.FlushTimeout != executor.DefaultFlushTimeout {
		t.Fatalf("--flush-timeout defaults to %v, the executor to %v", c.FlushTimeout, executor.DefaultFlushTimeout)
	}
}
