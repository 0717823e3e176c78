package executor

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/config"
)

// Config is the executor's own configuration: the settings of `conch
// executor` beyond those every service shares, which `conch dev` takes too.
type Config struct {
	SandboxStateDir string `flag:"sandbox-state-dir" env:"CONCH_SANDBOX_STATE_DIR" default:"/run/conch-executor" usage:"host directory for sandbox state; every parent must be searchable by others"`
	SandboxRootFS   string `flag:"sandbox-rootfs" env:"CONCH_SANDBOX_ROOTFS" default:"/" usage:"root filesystem whose /usr, /bin, /lib* and chosen /etc files sandboxes see read-only"`
	// Storage on btrfs makes forks and previews copy-on-write snapshots
	// (sandbox.Config.Storage); empty keeps writable state in tmpfs.
	SandboxStorage string `flag:"sandbox-storage" env:"CONCH_SANDBOX_STORAGE" usage:"directory on btrfs where sandboxes keep their workspace, /tmp and workdir layer as subvolumes held to their sizes by quotas, so that forks and previews are copy-on-write (empty: in memory, tmpfs); every parent must be searchable by others"`
	SandboxUIDBase int    `flag:"sandbox-uid-base" env:"CONCH_SANDBOX_UID_BASE" default:"200000" usage:"first host uid given to sandboxes (each live sandbox has its own)"`
	// Every executor of a host must share the uid lock dir: it is where a
	// live sandbox's uid is claimed host-wide (its default is
	// sandbox.DefaultUIDLockDir).
	SandboxUIDLockDir string `flag:"sandbox-uid-lock-dir" env:"CONCH_SANDBOX_UID_LOCK_DIR" default:"/run/conch-sandbox-uids" usage:"host directory where every executor of the host claims its sandboxes' uids"`
	SandboxCgroup     string `flag:"sandbox-cgroup" env:"CONCH_SANDBOX_CGROUP" default:"conch" usage:"cgroup under which sandboxes' groups are made"`
	// All the sandboxes of this executor together, whatever each asks
	// for: no set of them takes the host (sandbox.ParentLimits).
	SandboxesMemoryBytes int64 `flag:"sandboxes-memory-bytes" env:"CONCH_SANDBOXES_MEMORY_BYTES" usage:"memory all this executor's sandboxes may use together, in bytes (0: three quarters of the host's); with several executors on one host, make their sum fit it"`
	SandboxesPids        int64 `flag:"sandboxes-pids" env:"CONCH_SANDBOXES_PIDS" usage:"processes all this executor's sandboxes may run together (0: half of the kernel's pid_max)"`
	SandboxPool          int   `flag:"sandbox-pool" env:"CONCH_SANDBOX_POOL" default:"2" usage:"sandboxes kept built ahead of demand (0: none)"`
	// Each launch holds a sandbox uid, a cgroup and a waiting bubblewrap
	// process (its default is sandbox.DefaultLaunchAhead).
	SandboxLaunchAhead int `flag:"sandbox-launch-ahead" env:"CONCH_SANDBOX_LAUNCH_AHEAD" default:"2" usage:"bubblewraps kept started, each in its sandbox's cgroup, for creates beyond the pool (0: none)"`
	// The gateway host: commands run on the executor's machine, outside
	// any sandbox, for the accounts an admin granted it to, as an
	// unprivileged user of their own, only as the exec policy and
	// approvals allow.
	GatewayHost     bool   `flag:"gateway-host" env:"CONCH_GATEWAY_HOST" usage:"allow exec host gateway: commands on this machine outside any sandbox, as --gateway-uid, for accounts granted gateway_host, behind the exec policy"`
	GatewayWorkdir  string `flag:"gateway-workdir" env:"CONCH_GATEWAY_WORKDIR" default:"/tmp/conch-gateway" usage:"where gateway-host commands start, and their HOME; made and owned by --gateway-uid, mode 0700"`
	GatewayUID      int    `flag:"gateway-uid" env:"CONCH_GATEWAY_UID" default:"199999" usage:"the unprivileged uid (and gid) gateway-host commands run as; no other process should use it"`
	GatewayHostFull bool   `flag:"gateway-host-full" env:"CONCH_GATEWAY_HOST_FULL" usage:"let gateways run gateway-host commands under security full (any command, no allowlist); off, they run under allowlist or deny only"`
	MaxSandboxes    int    `flag:"max-sandboxes" env:"CONCH_MAX_SANDBOXES" default:"256" usage:"sandboxes this executor holds at most; beyond, creates are refused and the router places them elsewhere"`
	// Past its capacity an executor turns new sandboxes away rather than
	// slow every sandbox it holds (package admission).
	WorkSlots int           `flag:"work-slots" env:"CONCH_WORK_SLOTS" usage:"commands and sandbox creates this executor runs at once, commands first (0: 4 per core it may use); a command holds its slot for its first second at most"`
	AdmitWait time.Duration `flag:"admit-wait" env:"CONCH_ADMIT_WAIT" default:"1s" usage:"how long a new sandbox waits for a work slot before it is refused and the router places it elsewhere or answers 429"`
	// A hung workspace service must not hold a sandbox's commands: a
	// flush that takes longer fails and its command says so.
	FlushTimeout time.Duration `flag:"flush-timeout" env:"CONCH_FLUSH_TIMEOUT" default:"60s" usage:"how long saving a persistent workspace after a command may take before the command is answered with an error"`
	// Sandbox egress never reaches loopback, private, link-local and
	// other non-public ranges, the executor host's own addresses or
	// etcd's; these are refused besides (MinIO's, say, when it has a
	// public address).
	EgressDeny []string `flag:"egress-deny" env:"CONCH_EGRESS_DENY" usage:"extra CIDRs, addresses or host names (each with an optional :port) sandbox egress never reaches, comma separated"`
	// Template roots are unpacked on local disk, where sandboxes' uids
	// can reach them: every parent must be searchable by others.
	TemplateCacheDir   string `flag:"template-cache-dir" env:"CONCH_TEMPLATE_CACHE_DIR" default:"/var/lib/conch-executor/templates" usage:"host directory where templates' roots are unpacked, shared by the host's executors; every parent must be searchable by others"`
	TemplateCacheBytes int64  `flag:"template-cache-bytes" env:"CONCH_TEMPLATE_CACHE_BYTES" default:"21474836480" usage:"bytes of unused template roots this executor keeps unpacked; those in use are kept whatever their size"`
}

// LaunchAhead is SandboxLaunchAhead as the sandbox runtime takes it,
// whose zero is its default.
func (c *Config) LaunchAhead() int {
	if c.SandboxLaunchAhead == 0 {
		return -1
	}
	return c.SandboxLaunchAhead
}

// Validate checks the executor's settings.
func (c *Config) Validate() error {
	if c.SandboxesMemoryBytes < 0 || (c.SandboxesMemoryBytes > 0 && c.SandboxesMemoryBytes < 64<<20) {
		return config.Invalid("--sandboxes-memory-bytes", "must be 0 (the default) or at least 64 MiB")
	}
	if c.SandboxesPids < 0 || (c.SandboxesPids > 0 && c.SandboxesPids < 64) {
		return config.Invalid("--sandboxes-pids", "must be 0 (the default) or at least 64")
	}
	if !filepath.IsAbs(c.SandboxStateDir) {
		return config.Invalid("--sandbox-state-dir", "must be an absolute path")
	}
	if c.SandboxStorage != "" && !filepath.IsAbs(c.SandboxStorage) {
		return config.Invalid("--sandbox-storage", "must be an absolute path")
	}
	if !filepath.IsAbs(c.SandboxRootFS) {
		return config.Invalid("--sandbox-rootfs", "must be an absolute path")
	}
	if c.SandboxUIDBase < 1000 || c.SandboxUIDBase > 1<<31-1<<17 {
		return config.Invalid("--sandbox-uid-base", "must be between 1000 and %d", 1<<31-1<<17)
	}
	if !filepath.IsAbs(c.SandboxUIDLockDir) {
		return config.Invalid("--sandbox-uid-lock-dir", "must be an absolute path")
	}
	if c.SandboxPool < 0 || c.SandboxPool > 64 {
		return config.Invalid("--sandbox-pool", "must be between 0 and 64")
	}
	if c.SandboxLaunchAhead < 0 || c.SandboxLaunchAhead > 64 {
		return config.Invalid("--sandbox-launch-ahead", "must be between 0 and 64")
	}
	if c.SandboxCgroup == "" || strings.Contains(c.SandboxCgroup, "..") || filepath.IsAbs(c.SandboxCgroup) {
		return config.Invalid("--sandbox-cgroup", "must be a relative cgroup path without ..")
	}
	if c.WorkSlots < 0 || c.WorkSlots > 100000 {
		return config.Invalid("--work-slots", "must be between 0 (4 per core) and 100000")
	}
	if c.AdmitWait < 0 || c.AdmitWait > time.Minute {
		return config.Invalid("--admit-wait", "must be between 0 and 1m")
	}
	if c.MaxSandboxes < 1 || c.MaxSandboxes > 100000 {
		return config.Invalid("--max-sandboxes", "must be between 1 and 100000")
	}
	if !filepath.IsAbs(c.GatewayWorkdir) {
		return config.Invalid("--gateway-workdir", "must be an absolute path")
	}
	if c.GatewayUID < 1000 || c.GatewayUID > 1<<31-2 {
		return config.Invalid("--gateway-uid", "must be an unprivileged uid, 1000 or above")
	}
	if c.GatewayUID >= c.SandboxUIDBase && c.GatewayUID < c.SandboxUIDBase+1<<17 {
		return config.Invalid("--gateway-uid", "must be outside the sandboxes' uids (--sandbox-uid-base and the 131072 after it)")
	}
	if c.FlushTimeout <= 0 {
		return config.Invalid("--flush-timeout", "must be positive")
	}
	if err := outbound.ValidateRules("egress deny", c.EgressDeny); err != nil {
		return config.Invalid("--egress-deny", "%v", err)
	}
	return nil
}
