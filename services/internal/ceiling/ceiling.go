// Package ceiling owns the operator's ceilings on every value a tenant
// sets: a sandbox's memory, pids, CPU and workspace sizes, command
// timeouts, output lengths, idle timeouts and lifetimes. It also owns
// their floors and the error a value out of bounds gets: a 400 naming the
// field and the bound.
//
// Every service reads the same settings (launch.Common embeds Config):
// the router refuses on save what the executor would refuse on use, and
// the executor, which acts, checks again.
package ceiling

import (
	"fmt"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Config is the operator's ceilings. Defaults are chosen so that a few
// tenants at their ceilings still fit one executor node of 16 GiB and
// 4 cores: each may ask for a quarter of it, never for all of it.
type Config struct {
	MemoryBytes             int64         `flag:"max-memory-bytes" env:"CONCH_MAX_MEMORY_BYTES" default:"4294967296" usage:"most memory one sandbox may ask for, in bytes (limits.memory_bytes)"`
	Pids                    int64         `flag:"max-pids" env:"CONCH_MAX_PIDS" default:"4096" usage:"most processes one sandbox may ask for (limits.pids)"`
	CPUMillicores           int64         `flag:"max-cpu-millicores" env:"CONCH_MAX_CPU_MILLICORES" default:"4000" usage:"most CPU one sandbox may ask for, in thousandths of a core (limits.cpu_millicores)"`
	WorkspaceBytes          int64         `flag:"max-workspace-bytes" env:"CONCH_MAX_WORKSPACE_BYTES" default:"10737418240" usage:"largest persistent workspace quota a gateway may set, in bytes (limits.workspace_bytes)"`
	WorkspaceFiles          int64         `flag:"max-workspace-files" env:"CONCH_MAX_WORKSPACE_FILES" default:"1000000" usage:"most files a workspace quota may allow (limits.workspace_files)"`
	EphemeralWorkspaceBytes int64         `flag:"max-ephemeral-workspace-bytes" env:"CONCH_MAX_EPHEMERAL_WORKSPACE_BYTES" default:"2147483648" usage:"largest in-memory /home/workspace one sandbox may ask for, in bytes (limits.ephemeral_workspace_bytes)"`
	CommandTimeout          time.Duration `flag:"max-command-timeout" env:"CONCH_MAX_COMMAND_TIMEOUT" default:"30m" usage:"longest timeout a command may ask for (timeout_seconds); the REST command API stays within 5m"`
	OutputLength            int64         `flag:"max-output-length" env:"CONCH_MAX_OUTPUT_LENGTH" default:"1048576" usage:"most characters of a command's output a caller may ask for (max_output_length)"`
	IdleTimeout             time.Duration `flag:"max-idle-timeout" env:"CONCH_MAX_IDLE_TIMEOUT" default:"24h" usage:"longest idle time a sandbox may ask for (idle_timeout_seconds, shell.session_idle_seconds); a sandbox that asks for none gets this"`
	NeverIdle               bool          `flag:"allow-no-idle-timeout" env:"CONCH_ALLOW_NO_IDLE_TIMEOUT" usage:"let a sandbox created with idle_timeout_seconds 0 live until destroyed, however long it is idle"`
	SandboxLifetime         time.Duration `flag:"max-sandbox-lifetime" env:"CONCH_MAX_SANDBOX_LIFETIME" default:"168h" usage:"longest lifetime a sandbox may ask for (ttl_seconds), and the lifetime of one that asks for none: at its end the executor ends it, busy or not (a persistent workspace is saved first); 0: no bound"`
}

// Defaults are the ceilings of a Config no one set, for tests and
// embedded callers; they match the tags above.
var Defaults = Config{
	MemoryBytes: 4 << 30, Pids: 4096, CPUMillicores: 4000,
	WorkspaceBytes: 10 << 30, WorkspaceFiles: 1_000_000, EphemeralWorkspaceBytes: 2 << 30,
	CommandTimeout: contract.ExecTimeout, OutputLength: contract.MaxOutputLength,
	IdleTimeout: 24 * time.Hour, SandboxLifetime: 7 * 24 * time.Hour,
}

// Floors are the least a tenant may ask for: below, a sandbox could not
// start its agent or a workspace hold its own metadata.
var Floors = struct {
	MemoryBytes, Pids, CPUMillicores, WorkspaceBytes, WorkspaceFiles, EphemeralWorkspaceBytes int64
}{
	MemoryBytes: 32 << 20, Pids: 16, CPUMillicores: 10,
	WorkspaceBytes: 1 << 20, WorkspaceFiles: 100, EphemeralWorkspaceBytes: 1 << 20,
}

// Validate checks that each ceiling is at or above its floor.
func (c *Config) Validate() error {
	for _, v := range []struct {
		flag       string
		got, floor int64
	}{
		{"--max-memory-bytes", c.MemoryBytes, Floors.MemoryBytes},
		{"--max-pids", c.Pids, Floors.Pids},
		{"--max-cpu-millicores", c.CPUMillicores, Floors.CPUMillicores},
		{"--max-workspace-bytes", c.WorkspaceBytes, Floors.WorkspaceBytes},
		{"--max-workspace-files", c.WorkspaceFiles, Floors.WorkspaceFiles},
		{"--max-ephemeral-workspace-bytes", c.EphemeralWorkspaceBytes, Floors.EphemeralWorkspaceBytes},
		{"--max-output-length", c.OutputLength, 1},
	} {
		if v.got < v.floor {
			return config.Invalid(v.flag, "must be at least %d, got %d", v.floor, v.got)
		}
	}
	for _, v := range []struct {
		flag  string
		got   time.Duration
		floor time.Duration
	}{
		{"--max-command-timeout", c.CommandTimeout, time.Second},
		{"--max-idle-timeout", c.IdleTimeout, time.Minute},
	} {
		if v.got < v.floor {
			return config.Invalid(v.flag, "must be at least %v, got %v", v.floor, v.got)
		}
	}
	if c.SandboxLifetime != 0 && c.SandboxLifetime < time.Minute {
		return config.Invalid("--max-sandbox-lifetime", "must be 0 (no bound) or at least 1m, got %v", c.SandboxLifetime)
	}
	return nil
}

// CheckLimits checks each field of l (named prefix+field) against its
// floor and the operator's ceiling in c: the one check of a sandbox's
// limits, which the router makes on a gateway's save and the executor on
// a sandbox's creation.
func CheckLimits(prefix string, l *executorv1.Limits, c Config) error {
	f := Floors
	for _, v := range []struct {
		name             string
		got, floor, ceil int64
	}{
		{"memory_bytes", l.GetMemoryBytes(), f.MemoryBytes, c.MemoryBytes},
		{"pids", l.GetPids(), f.Pids, c.Pids},
		{"cpu_millicores", l.GetCpuMillicores(), f.CPUMillicores, c.CPUMillicores},
		{"workspace_bytes", l.GetWorkspaceBytes(), f.WorkspaceBytes, c.WorkspaceBytes},
		{"workspace_files", l.GetWorkspaceFiles(), f.WorkspaceFiles, c.WorkspaceFiles},
		{"ephemeral_workspace_bytes", l.GetEphemeralWorkspaceBytes(), f.EphemeralWorkspaceBytes, c.EphemeralWorkspaceBytes},
	} {
		if err := Check(prefix+v.name, v.got, v.floor, v.ceil); err != nil {
			return err
		}
	}
	return nil
}

// Check is the one check of a tenant-set number: 0 takes the default;
// else it must be within [floor, ceiling]. field names it as the caller
// wrote it.
func Check(field string, v, floor, ceiling int64) error {
	switch {
	case v == 0:
		return nil
	case v < floor:
		return errs.New(errs.InvalidArgument, "%s: must be 0 (the default) or at least %d, got %d", field, floor, v)
	case v > ceiling:
		return Above(field, fmt.Sprint(v), fmt.Sprint(ceiling))
	}
	return nil
}

// CheckSeconds is Check for a number of seconds, the ceiling a duration.
func CheckSeconds(field string, v int64, ceiling time.Duration) error {
	return Check(field, v, 1, int64(ceiling/time.Second))
}

// Above is the error of a value above its ceiling: a 400 naming the field
// and the ceiling.
func Above(field, got, ceiling string) error {
	return errs.New(errs.InvalidArgument, "%s: %s is above the ceiling of %s", field, got, ceiling)
}

// Idle returns the idle timeout a sandbox that asked for seconds gets:
// what it asked for, or, for 0 (none), no bound where the operator allows
// it and the ceiling where not.
func (c *Config) Idle(field string, seconds int64) (time.Duration, error) {
	if seconds < 0 {
		return 0, errs.New(errs.InvalidArgument, "%s: must not be negative", field)
	}
	if err := CheckSeconds(field, seconds, c.IdleTimeout); err != nil {
		return 0, err
	}
	if seconds == 0 && !c.NeverIdle {
		return c.IdleTimeout, nil
	}
	return time.Duration(seconds) * time.Second, nil
}

// Lifetime returns the lifetime a sandbox that asked for seconds gets:
// what it asked for, or, for 0, the operator's lifetime ceiling (0 where
// the operator sets no bound, and then no lifetime).
func (c *Config) Lifetime(field string, seconds int64) (time.Duration, error) {
	if seconds < 0 {
		return 0, errs.New(errs.InvalidArgument, "%s: must not be negative", field)
	}
	if seconds == 0 {
		return c.SandboxLifetime, nil
	}
	if c.SandboxLifetime > 0 && seconds > int64(c.SandboxLifetime/time.Second) {
		return 0, Above(field, fmt.Sprint(seconds), fmt.Sprint(int64(c.SandboxLifetime/time.Second)))
	}
	return time.Duration(seconds) * time.Second, nil
}
