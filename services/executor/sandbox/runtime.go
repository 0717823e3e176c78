package sandbox

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox/fsview"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/contract"
)

// Limits bound what a sandbox may use.
type Limits struct {
	MemoryBytes    int64 // cgroup memory limit
	Pids           int64 // cgroup pids limit (processes and threads)
	CPUMillicores  int64 // cgroup CPU quota, thousandths of a core
	WorkspaceBytes int64 // size of /home/workspace
	WorkspaceFiles int64 // inodes of /home/workspace
	TmpBytes       int64 // size of /tmp
}

// cgroupLimits are the limits a sandbox's cgroup enforces.
type cgroupLimits struct{ memoryBytes, pids, cpuMillicores int64 }

func (l Limits) cgroup() cgroupLimits {
	return cgroupLimits{l.MemoryBytes, l.Pids, l.CPUMillicores}
}

// DefaultLimits are a sandbox's default limits, for an in-memory workspace
// (docs/reference/sandboxes.md, Limits).
var DefaultLimits = Limits{
	MemoryBytes:    512 << 20,
	Pids:           256,
	CPUMillicores:  1000,
	WorkspaceBytes: 256 << 20,
	WorkspaceFiles: 100000,
	TmpBytes:       64 << 20,
}

// Config configures a Runtime.
type Config struct {
	// Storage, when set, is a directory on btrfs where sandboxes' writable
	// state (workspace, /tmp, a template workdir's layer) is kept, each
	// part a subvolume held to its size by a quota, instead of in
	// memory: forks and previews are then copy-on-write snapshots, and
	// idle sandboxes' files can leave memory. The executors of a host may
	// share it; each keeps a directory of its own there.
	Storage string
	// StateDir holds per-sandbox state on the host (workspace mounts). The
	// runtime mounts a tmpfs of its own there, so that what sandboxes are
	// given from it is seen inside by its path in that tmpfs, never by the
	// host path (which names the executor instance).
	StateDir string
	// RootFS is the directory whose /usr, /bin, /lib*, /sbin and chosen /etc
	// files become the sandbox's read-only system; "/" is the host's.
	RootFS string
	// Bwrap is the bubblewrap binary.
	Bwrap string
	// AgentBinary runs the resident agent (its wire.AgentCommand subcommand);
	// ToolBinary runs the tool commands moved into the shell (the conch
	// binary, which dispatches on its name). Both default to the running
	// binary, except that a conch-sandbox-agent beside it (wire.AgentBinaryName)
	// is preferred as the agent: it links the agent and nothing else, so
	// it starts in a fraction of the time the whole conch binary takes to
	// initialise, which every cold sandbox pays.
	AgentBinary, ToolBinary string
	// Seccomp is the filter bubblewrap loads into every sandbox, as
	// package seccomp builds it (seccomp.Program), once per process.
	// Required: a runtime without it refuses to start.
	Seccomp []byte
	// CgroupMount is where cgroups are mounted; CgroupParent the group
	// under which sandboxes' groups are made.
	CgroupMount, CgroupParent string
	// ParentLimits bound all the sandboxes of CgroupParent together, so
	// that no set of sandboxes, each within its own limits, takes the
	// host: their memory (0: three quarters of the host's) and their
	// processes (0: half the kernel's pid_max). CPU is shared by weight.
	ParentLimits ParentLimits
	// UIDBase is the first host uid given to sandboxes; each live sandbox
	// gets its own uid in [UIDBase, UIDBase+UIDCount).
	UIDBase, UIDCount int
	// UIDLockDir is where the uids of live sandboxes are claimed; every
	// executor on a host must share it, so that none hands out a uid
	// another's sandbox holds.
	UIDLockDir string
	// StartTimeout bounds building one sandbox.
	StartTimeout time.Duration
	// PoolSize is how many sandboxes are kept built and waiting, so that
	// creating one costs only fitting it to its limits.
	PoolSize int
	// LaunchAhead is how many bubblewraps are kept started ahead of cold
	// creates, each as a sandbox uid in a cgroup of its own and blocked
	// reading the arguments that will make it a sandbox: a cold create
	// then waits for neither their fork and exec nor, on cgroup v1, the
	// move into the cgroup (which stalls every fork on the host while it
	// runs). Zero means DefaultLaunchAhead; negative, none.
	LaunchAhead int
	// Logger receives the runtime's logs.
	Logger *slog.Logger
	// TracerProvider receives the spans of each sandbox's build; none
	// when nil.
	TracerProvider trace.TracerProvider
}

// Runtime builds sandboxes on this host.
type Runtime struct {
	cfg     Config
	cgroups *cgroupRoot
	agent   string // agent binary copy readable by sandbox uids
	tool    string // tool binary copy, the same file when they are one
	log     *slog.Logger
	tracer  trace.Tracer

	uids *uidClaims

	pool     *spares[*Sandbox]
	launches *spares[*launch]
	// quiet holds the making of spares back while commands run.
	quiet quiet

	// template is the view of a new sandbox, made on first use.
	template func() (*fsview.View, error)

	// store is Config.Storage's instance; nil keeps writable state in
	// tmpfs.
	store *storage

	etc *etcCopy
	// imageEtc are the /etc copies of template roots.
	imageEtc imageEtcs
	stop     chan struct{} // closed by Close
}

// ErrUnsupported marks a requested feature this executor cannot provide yet.
var ErrUnsupported = errors.New("sandbox: unsupported")

// NewRuntime checks the host (bubblewrap, cgroups, the state dir) and
// returns a runtime.
func NewRuntime(cfg Config) (*Runtime, error) {
	// A filter is a whole number of 8-byte sock_filter instructions.
	if len(cfg.Seccomp) == 0 || len(cfg.Seccomp)%8 != 0 {
		return nil, errors.New("sandbox: no seccomp filter: Config.Seccomp must hold seccomp.Program()")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = noop.NewTracerProvider()
	}
	if cfg.RootFS == "" {
		cfg.RootFS = "/"
	}
	if cfg.Bwrap == "" {
		cfg.Bwrap = "bwrap"
	}
	if cfg.CgroupMount == "" {
		cfg.CgroupMount = "/sys/fs/cgroup"
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "conch"
	}
	if cfg.UIDBase == 0 {
		cfg.UIDBase = 200000
	}
	if cfg.UIDCount == 0 {
		cfg.UIDCount = 65536
	}
	if cfg.UIDLockDir == "" {
		cfg.UIDLockDir = DefaultUIDLockDir
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 20 * time.Second
	}
	if cfg.LaunchAhead == 0 {
		cfg.LaunchAhead = DefaultLaunchAhead
	}
	bw, err := exec.LookPath(cfg.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("sandbox: bubblewrap not found (install the bubblewrap package): %w", err)
	}
	cfg.Bwrap = bw
	if st, err := os.Stat(filepath.Join(cfg.RootFS, "bin/sh")); err != nil || st.IsDir() {
		return nil, fmt.Errorf("sandbox: root filesystem %s has no /bin/sh", cfg.RootFS)
	}
	if cfg.AgentBinary == "" || cfg.ToolBinary == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("sandbox: find own binary: %w", err)
		}
		if cfg.ToolBinary == "" {
			cfg.ToolBinary = self
		}
		if cfg.AgentBinary == "" {
			cfg.AgentBinary = self
			if st, err := os.Stat(filepath.Join(filepath.Dir(self), wire.AgentBinaryName)); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				cfg.AgentBinary = filepath.Join(filepath.Dir(self), wire.AgentBinaryName)
			}
		}
	}
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("sandbox: state dir: %w", err)
	}
	// Bind mounts show their source's path within its filesystem in the
	// sandbox's /proc/self/mountinfo: with a tmpfs rooted at the state dir,
	// that path is "/agent" or "/<random>/tools", not the host's.
	if err := unix.Mount("tmpfs", cfg.StateDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711"); err != nil {
		return nil, fmt.Errorf("sandbox: mount state dir: %w", err)
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, tracer: cfg.TracerProvider.Tracer("github.com/conch-sh/conch/services/executor/sandbox"), stop: make(chan struct{})}
	r.template = sync.OnceValues(r.newTemplate)
	r.imageEtc.state = cfg.StateDir
	if r.etc, err = newEtcCopy(cfg.RootFS, cfg.StateDir); err != nil {
		r.removeState()
		return nil, err
	}
	if r.uids, err = newUIDClaims(cfg.UIDLockDir, cfg.UIDBase, cfg.UIDCount); err != nil {
		r.removeState()
		return nil, err
	}
	if r.agent, err = installBinary(cfg.AgentBinary, cfg.StateDir, "agent"); err != nil {
		r.removeState()
		return nil, err
	}
	r.tool = r.agent
	if cfg.ToolBinary != cfg.AgentBinary {
		if r.tool, err = installBinary(cfg.ToolBinary, cfg.StateDir, "tool"); err != nil {
			r.removeState()
			return nil, err
		}
	}
	if r.cgroups, err = detectCgroups(cfg.CgroupMount, cfg.CgroupParent, cfg.ParentLimits); err != nil {
		r.removeState()
		return nil, err
	}
	r.launches = newSpares(&spares[*launch]{
		what: "launch", size: cfg.LaunchAhead, quiet: &r.quiet, log: r.log,
		make:    func(context.Context) (*launch, error) { return r.launch() },
		dead:    (*launch).exited,
		discard: (*launch).close,
	})
	if cfg.Storage != "" {
		var stale error
		if r.store, stale, err = openStorage(cfg.Storage); err != nil {
			r.removeState()
			return nil, err
		}
		if stale != nil {
			r.log.Warn("sandbox: stale storage not removed", "error", stale)
		}
	}
	r.pool = newPool(r, cfg.PoolSize)
	go r.etc.watch(r.stop, func(err error) { r.log.Warn("sandbox: /etc not refreshed", "error", err) })
	return r, nil
}

// installBinary copies the binary src to a root-owned, world-readable file
// name in the state dir: sandboxes run as unprivileged uids that may not be
// able to reach the original path.
func installBinary(src, stateDir, name string) (string, error) {
	dst := filepath.Join(stateDir, name)
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("sandbox: open agent binary: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(stateDir, ".agent-*")
	if err != nil {
		return "", fmt.Errorf("sandbox: install agent: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", fmt.Errorf("sandbox: install agent: %w", err)
	}
	if err := errors.Join(tmp.Chmod(0o555), tmp.Close()); err != nil {
		return "", fmt.Errorf("sandbox: install agent: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("sandbox: install agent: %w", err)
	}
	return dst, nil
}

// Spec describes a sandbox to build.
type Spec struct {
	// ID names the sandbox; it must be unique on the host.
	ID string
	// Limits; zero fields take DefaultLimits.
	Limits Limits
	// Network gives the sandbox a way out: a unix socket the host serves
	// (Sandbox.Egress) that the agent bridges to wire.EgressProxyAddr, named in
	// the proxy variables of every command. What it reaches is the host's
	// proxy's to decide.
	Network bool
	// EgressCA, with Network, is the PEM certificate of a CA the proxy
	// signs with: every command trusts it, besides the system's roots.
	EgressCA []byte
	// PathPrepend are directories put in front of PATH.
	PathPrepend []string
	// Env is extra environment for every command.
	Env map[string]string
	// Image, when set, is the root it starts from instead of the
	// runtime's.
	Image *ImageRoot
	// Workdir, when set, is where commands start instead of the
	// workspace. Outside the workspace and /tmp it needs Image: it is
	// made writable, an overlay over the image's copy of it (or over
	// nothing when the image has none) whose changes go to a tmpfs of the
	// sandbox's own as large as its workspace.
	Workdir string
	// From, when set, is a sandbox of the same runtime whose writable
	// state (workspace, /tmp, workdir layer) the new one starts with, as
	// a copy-on-write snapshot taken while From runs on: it needs the
	// runtime's Storage (CopyOnWrite). From's image and workdir must be
	// the new one's.
	From *Sandbox
}

// rootOf is img's root, "" for the runtime's.
func rootOf(img *ImageRoot) string {
	if img == nil {
		return ""
	}
	return img.Dir
}

// CopyOnWrite reports whether Spec.From can be used: whether sandboxes'
// writable state is on Storage.
func (r *Runtime) CopyOnWrite() bool { return r.store != nil }

func (s *Spec) withDefaults() {
	d := DefaultLimits
	l := &s.Limits
	for _, f := range []struct {
		v *int64
		d int64
	}{
		{&l.MemoryBytes, d.MemoryBytes}, {&l.Pids, d.Pids}, {&l.CPUMillicores, d.CPUMillicores},
		{&l.WorkspaceBytes, d.WorkspaceBytes}, {&l.WorkspaceFiles, d.WorkspaceFiles}, {&l.TmpBytes, d.TmpBytes},
	} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
}

// validID keeps sandbox ids safe as path and cgroup names.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Create returns a sandbox for spec with its agent ready: a warm one from
// the pool, fitted to spec's limits, when one is ready; else a new one.
func (r *Runtime) Create(ctx context.Context, spec Spec) (*Sandbox, error) {
	if !validID(spec.ID) {
		return nil, fmt.Errorf("sandbox: invalid id %q", spec.ID)
	}
	spec.withDefaults()
	if w := spec.Workdir; w != "" && (!filepath.IsAbs(w) || filepath.Clean(w) != w || w == "/") {
		return nil, fmt.Errorf("sandbox: workdir %q must be a clean absolute path below /", w)
	}
	if spec.Image == nil && OwnWorkdir(spec.Workdir) {
		return nil, fmt.Errorf("sandbox: workdir %s: outside %s and /tmp, a workdir needs a template image", spec.Workdir, wire.WorkspaceDir)
	}
	if f := spec.From; f != nil && (r.store == nil || f.rt != r || rootOf(f.spec.Image) != rootOf(spec.Image) || f.spec.Workdir != spec.Workdir) {
		return nil, fmt.Errorf("sandbox: a copy needs storage on btrfs, and its source's runtime, image and workdir: %w", ErrUnsupported)
	}
	r.quiet.mark()
	for _, d := range spec.PathPrepend {
		if !filepath.IsAbs(d) || strings.ContainsAny(d, ":\x00") {
			return nil, fmt.Errorf("sandbox: path_prepend entry %q must be an absolute path without ':'", d)
		}
	}
	// Warm sandboxes have no egress socket, and the runtime's root; one
	// takes a copy's files by adopting them.
	if spec.Limits.TmpBytes == DefaultLimits.TmpBytes && !spec.Network && spec.Image == nil && spec.Workdir == "" {
		if s, ok := r.pool.take(); ok {
			err := s.fit(spec)
			if err == nil && spec.From != nil {
				err = s.adopt(spec.From)
			}
			if err == nil {
				return s, nil
			}
			_ = s.Destroy(context.WithoutCancel(ctx))
		}
	}
	return r.build(ctx, spec)
}

// hostName names a sandbox's state dir and cgroup on the host. It is
// random, not the sandbox's id, as the sandbox sees both (mountinfo,
// /proc/self/cgroup) and must learn nothing of the host from them.
func hostName() string {
	return strings.ToLower(rand.Text()[:16])
}

// build makes a new sandbox from a launch started ahead, or one of its own
// when none is ready.
func (r *Runtime) build(ctx context.Context, spec Spec) (_ *Sandbox, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()

	s := &Sandbox{rt: r, spec: spec, procs: map[uint32]*Process{}, cwd: wire.WorkspaceDir, done: make(chan struct{})}
	if spec.Workdir != "" {
		s.cwd = spec.Workdir
	}
	var cleanups []func()
	defer func() {
		if err != nil {
			for i := len(cleanups) - 1; i >= 0; i-- {
				cleanups[i]()
			}
		}
	}()
	ctx, endBuild := r.span(ctx, "build")
	defer func() { endBuild(err) }()
	l, ok := r.launches.take()
	if !ok {
		_, endLaunch := r.span(ctx, "launch")
		l, err = r.launch()
		endLaunch(err)
		if err != nil {
			return nil, err
		}
	}
	cleanups = append(cleanups, l.close)
	s.uid, s.cg = l.uid, l.cg
	if err := s.prepare(ctx, spec, l.name, &cleanups); err != nil {
		return nil, err
	}
	// Its limits hold before bubblewrap reads a word of its arguments.
	if spec.Limits.cgroup() != DefaultLimits.cgroup() {
		if err := s.cg.setLimits(spec.Limits); err != nil {
			return nil, err
		}
	}
	_, endStart := r.span(ctx, "start")
	err = s.start(ctx, l)
	endStart(err)
	if err != nil {
		l.close() // its processes end before its state goes
		return nil, err
	}
	return s, nil
}

// prepare makes a sandbox's host state and then its filesystem view; each
// undo goes on cleanups.
func (s *Sandbox) prepare(ctx context.Context, spec Spec, name string, cleanups *[]func()) error {
	if err := s.makeState(ctx, spec, name, cleanups); err != nil {
		return err
	}
	return s.makeView(ctx)
}

// makeState makes a sandbox's state dir with /etc and tools, the
// workspace tmpfs and the egress socket.
func (s *Sandbox) makeState(ctx context.Context, spec Spec, name string, cleanups *[]func()) (err error) {
	_, end := s.rt.span(ctx, "state")
	defer func() { end(err) }()
	r := s.rt
	s.dir = filepath.Join(r.cfg.StateDir, name)
	if err := os.Mkdir(s.dir, 0o711); err != nil {
		return fmt.Errorf("sandbox: state dir: %w", err)
	}
	*cleanups = append(*cleanups, func() { _ = os.RemoveAll(s.dir) })
	if err := r.makeRunDir(s.dir); err != nil {
		return err
	}
	// The workspace is a filesystem of its own (a tmpfs, or a subvolume
	// on Storage) so that its size is enforced by the kernel, and so that
	// the host can hydrate and flush it without entering the sandbox.
	if r.store != nil {
		if err := s.makeVolumes(spec, name, cleanups); err != nil {
			return err
		}
	} else {
		s.workspace = filepath.Join(s.dir, "workspace")
		if err := os.Mkdir(s.workspace, 0o700); err != nil {
			return fmt.Errorf("sandbox: workspace dir: %w", err)
		}
		opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", spec.Limits.WorkspaceBytes, spec.Limits.WorkspaceFiles, s.uid, s.uid)
		if err := unix.Mount("tmpfs", s.workspace, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("sandbox: mount workspace: %w", err)
		}
		*cleanups = append(*cleanups, func() { _ = unix.Unmount(s.workspace, unix.MNT_DETACH) })
	}
	if img := spec.Image; img != nil {
		etc, err := r.imageEtc.get(img.Dir)
		if err != nil {
			return err
		}
		if s.system, err = imageMounts(img, etc); err != nil {
			return err
		}
		if OwnWorkdir(spec.Workdir) {
			if err := s.makeLayer(img, spec.Workdir, cleanups); err != nil {
				return err
			}
		}
	}
	if spec.Network {
		if s.egress, err = listenEgress(runPath(s.dir, wire.EgressDir), s.uid); err != nil {
			return err
		}
		*cleanups = append(*cleanups, func() { _ = s.egress.Close() })
		if spec.EgressCA != nil {
			if err := writeTrust(runPath(s.dir, wire.EgressDir), s.rootFS(), spec.EgressCA); err != nil {
				return err
			}
		}
	}
	return nil
}

// makeView makes the view of the sandbox's filesystem the host resolves
// its paths through.
func (s *Sandbox) makeView(ctx context.Context) (err error) {
	_, end := s.rt.span(ctx, "view")
	defer func() { end(err) }()
	s.mounts = s.rt.mounts(s)
	ms := make([]fsview.Mount, len(s.mounts))
	for i, m := range s.mounts {
		ms[i] = m.view()
	}
	if s.view, err = fsview.New(ms, s.uid, s.uid); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	return nil
}

// sandboxEnv is the environment every command starts from: nothing of the
// host's.
func sandboxEnv(spec Spec) []string {
	env := []string{
		"PATH=" + strings.Join(commandPath(spec.PathPrepend), ":"),
		"HOME=" + wire.WorkspaceDir,
		"USER=user", "LOGNAME=user", "SHELL=/bin/sh",
		"LANG=C.UTF-8", "TERM=xterm-256color", "TMPDIR=/tmp",
	}
	if spec.Network {
		env = append(env, proxyEnv...)
		if spec.EgressCA != nil {
			env = append(env, trustEnv...)
		}
	}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// proxyEnv points every common client at the agent's port; names are
// resolved by the proxy (socks5h), as the sandbox has no DNS.
var proxyEnv = func() []string {
	var env []string
	for _, kv := range [][2]string{
		{"HTTP_PROXY", "http://" + wire.EgressProxyAddr}, {"HTTPS_PROXY", "http://" + wire.EgressProxyAddr},
		{"ALL_PROXY", "socks5h://" + wire.EgressProxyAddr}, {"NO_PROXY", "localhost,127.0.0.1,::1"},
	} {
		env = append(env, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	return env
}()

// trustEnv points common clients at the bundle that adds the egress CA
// to the system's roots (Node.js takes the CA alone, on top of its own).
var trustEnv = []string{
	"SSL_CERT_FILE=" + wire.EgressDir + "/" + trustBundle, "REQUESTS_CA_BUNDLE=" + wire.EgressDir + "/" + trustBundle,
	"CURL_CA_BUNDLE=" + wire.EgressDir + "/" + trustBundle, "GIT_SSL_CAINFO=" + wire.EgressDir + "/" + trustBundle,
	"NODE_EXTRA_CA_CERTS=" + wire.EgressDir + "/" + trustCA,
}

const (
	trustBundle = "ca-bundle.pem"
	trustCA     = "ca.pem"
)

// systemBundles are where distributions keep their root certificates.
var systemBundles = []string{"etc/ssl/certs/ca-certificates.crt", "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/cert.pem"}

// writeTrust writes the egress CA, and the system's roots with it, into
// the egress dir the sandbox sees.
func writeTrust(dir, rootFS string, ca []byte) error {
	var bundle []byte
	// Within the root: an image's bundle may be a symlink, which must
	// not lead to a host file.
	if root, err := os.OpenRoot(rootFS); err == nil {
		for _, b := range systemBundles {
			if data, err := root.ReadFile(b); err == nil {
				bundle = append(data, '\n')
				break
			}
		}
		root.Close()
	}
	bundle = append(bundle, ca...)
	for name, data := range map[string][]byte{trustCA: ca, trustBundle: bundle} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("sandbox: write %s: %w", name, err)
		}
	}
	return nil
}

// listenEgress makes the sandbox's proxy socket in the directory d,
// connectable by the sandbox's uid alone.
func listenEgress(d string, uid int) (*net.UnixListener, error) {
	if err := os.Mkdir(d, 0o750); err != nil {
		return nil, fmt.Errorf("sandbox: egress dir: %w", err)
	}
	if err := os.Chown(d, 0, uid); err != nil {
		return nil, fmt.Errorf("sandbox: egress dir: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(d, wire.EgressSocket), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("sandbox: egress socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(filepath.Join(d, wire.EgressSocket), 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("sandbox: egress socket: %w", err)
	}
	return l, nil
}

// commandPath is the PATH of a command: the directories prepended, then
// the system's, then the tools'.
func commandPath(prepend []string) []string {
	return CommandPath(prepend)
}

// CommandPath is the PATH of a command, as directories: those prepended,
// then the system's, then the tools'.
func CommandPath(prepend []string) []string {
	return append(slices.Clone(prepend), "/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin", wire.ToolsDir)
}

// mount is one entry of a sandbox's mount table: a bubblewrap option and
// its operands.
type mount struct {
	op string // --ro-bind, --bind, --symlink, --proc, --dev, --tmpfs or --dir
	// src is a bind's host source or a symlink's text.
	src, dst string
	size     int64 // of a tmpfs; 0 is bubblewrap's default
}

func (m mount) args() []string {
	switch m.op {
	case "--ro-bind", "--bind", "--symlink":
		return []string{m.op, m.src, m.dst}
	case "--tmpfs":
		if m.size > 0 {
			return []string{"--size", strconv.FormatInt(m.size, 10), m.op, m.dst}
		}
	}
	return []string{m.op, m.dst}
}

// view is the entry as the host resolves paths through it.
func (m mount) view() fsview.Mount {
	switch m.op {
	case "--ro-bind", "--bind":
		return fsview.Mount{Target: m.dst, Source: m.src}
	case "--symlink":
		return fsview.Mount{Target: m.dst, Link: m.src}
	}
	return fsview.Mount{Target: m.dst}
}

// Resolver finds the programs of a command started with pathPrepend as
// the shell of a new sandbox would: in the root filesystem and the mounts
// every sandbox gets, before its workspace or tools directory hold
// anything. It judges a command that no particular sandbox runs.
func (r *Runtime) Resolver(pathPrepend []string) (fsview.Resolver, error) {
	v, err := r.template()
	if err != nil {
		return fsview.Resolver{}, err
	}
	return fsview.Resolver{View: v, Path: commandPath(pathPrepend)}, nil
}

// newTemplate lays out the state of a sandbox that never runs, its
// workspace an empty directory only root may enter, and returns its view.
func (r *Runtime) newTemplate() (*fsview.View, error) {
	s := &Sandbox{dir: filepath.Join(r.cfg.StateDir, "template")}
	s.workspace = filepath.Join(s.dir, "workspace")
	if err := os.RemoveAll(s.dir); err != nil {
		return nil, fmt.Errorf("sandbox: template: %w", err)
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{s.dir, 0o711}, {s.workspace, 0o700}} {
		if err := os.Mkdir(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("sandbox: template: %w", err)
		}
	}
	if err := r.makeRunDir(s.dir); err != nil {
		return nil, fmt.Errorf("sandbox: template: %w", err)
	}
	mounts := r.mounts(s)
	ms := make([]fsview.Mount, len(mounts))
	for i, m := range mounts {
		ms[i] = m.view()
	}
	v, err := fsview.New(ms, r.cfg.UIDBase, r.cfg.UIDBase)
	if err != nil {
		return nil, fmt.Errorf("sandbox: template: %w", err)
	}
	return v, nil
}

// mounts is the mount table of s in the order bubblewrap makes it; the
// sandbox's processes see nothing else.
func (r *Runtime) mounts(s *Sandbox) []mount {
	ms := r.system(s)
	ms = append(ms,
		mount{op: "--proc", dst: "/proc"},
		mount{op: "--dev", dst: "/dev"},
		s.tmpMount(),
		// The agent, the tool binary, the tools and the egress socket in
		// one read-only bind: each mount is work for every cold create.
		mount{op: "--ro-bind", src: runDir(s.dir), dst: wire.AgentDir},
		mount{op: "--bind", src: s.workspace, dst: wire.WorkspaceDir},
		// The skills are in the read-only run directory: a link costs
		// less than a mount of their own.
		mount{op: "--symlink", src: wire.SkillsDir, dst: contract.SkillsDir},
	)
	if s.spec.Image != nil && OwnWorkdir(s.spec.Workdir) {
		ms = append(ms, mount{op: "--bind", src: filepath.Join(s.dir, workdirDir), dst: s.spec.Workdir})
	}
	return ms
}

// system is the read-only system of s's mount table: its image root's, or
// the runtime's /usr, /bin, /lib* and /etc copy.
func (r *Runtime) system(s *Sandbox) []mount {
	if s.spec.Image != nil {
		return s.system
	}
	root := r.cfg.RootFS
	var ms []mount
	for _, d := range []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		src := filepath.Join(root, d)
		if fi, err := os.Lstat(src); err == nil {
			if fi.Mode()&fs.ModeSymlink != 0 {
				if target, err := os.Readlink(src); err == nil {
					ms = append(ms, mount{op: "--symlink", src: target, dst: "/" + d})
				}
				continue
			}
			ms = append(ms, mount{op: "--ro-bind", src: src, dst: "/" + d})
		}
	}
	return append(ms, mount{op: "--ro-bind", src: r.etc.current(), dst: "/etc"})
}

// runDir is the host directory a sandbox sees as wire.AgentDir (/run/conch):
// the agent, the tool binary, the tools directory and, with network, the
// egress directory.
func runDir(stateDir string) string { return filepath.Join(stateDir, "run") }

// runPath is the host path of inside, a path under wire.AgentDir, for the
// sandbox whose state is in stateDir.
func runPath(stateDir, inside string) string {
	return filepath.Join(runDir(stateDir), strings.TrimPrefix(inside, wire.AgentDir))
}

// makeRunDir makes the run directory of the sandbox whose state is in
// stateDir: the runtime's agent and tool binaries linked in (hard links,
// the same read-only files for every sandbox) and empty tools and skills
// directories.
func (r *Runtime) makeRunDir(stateDir string) error {
	if err := os.Mkdir(runDir(stateDir), 0o755); err != nil {
		return fmt.Errorf("sandbox: run dir: %w", err)
	}
	for _, l := range []struct{ src, dst string }{{r.agent, wire.AgentPath}, {r.tool, wire.ToolPath}} {
		if err := os.Link(l.src, runPath(stateDir, l.dst)); err != nil {
			return fmt.Errorf("sandbox: run dir: %w", err)
		}
	}
	if err := os.Mkdir(runPath(stateDir, wire.ToolsDir), 0o755); err != nil {
		return fmt.Errorf("sandbox: tools dir: %w", err)
	}
	if err := os.Mkdir(runPath(stateDir, wire.SkillsDir), 0o755); err != nil {
		return fmt.Errorf("sandbox: skills dir: %w", err)
	}
	return nil
}

// bwrapArgs builds the bubblewrap command line of a sandbox.
func (r *Runtime) bwrapArgs(s *Sandbox) []string {
	a := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup",
		"--uid", strconv.Itoa(wire.UID), "--gid", strconv.Itoa(wire.GID),
		"--hostname", "sandbox",
		"--die-with-parent", "--new-session",
		"--clearenv",
		"--seccomp", "3",
		// The agent alone keeps CAP_SYS_ADMIN in the sandbox's user namespace
		// to give each command a pid namespace, and CAP_SETPCAP to empty its
		// commands' bounding set; commands get neither.
		"--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP",
	}
	for _, m := range s.mounts {
		a = append(a, m.args()...)
	}
	// The agent is the sandbox's pid 1, with no bubblewrap init beside it:
	// that init would hold the agent's pipes to the host while staying
	// debuggable by the sandbox's uid (/proc/1/mem, /proc/1/fd), so any
	// command could speak for the agent. The agent makes itself
	// non-dumpable, and commands live in pid namespaces below it.
	a = append(a, "--as-pid-1")
	// Nothing under /run is the commands' to write: /run is a directory of
	// the root, read-only with it, and the agent's files come from the
	// host, read-only.
	return append(a, "--chdir", wire.WorkspaceDir, "--remount-ro", "/")
}

// DefaultLaunchAhead is how many launches a runtime keeps ready.
const DefaultLaunchAhead = 2

// A launch is a sandbox's bubblewrap started ahead of the sandbox: as the
// sandbox's uid, already in its cgroup, and blocked reading the arguments
// that say all it will do (bubblewrap reads them before anything else).
// Until they come it has made no namespace and runs nothing; were its
// argument pipe to end empty, it would still make its own empty root and
// find no program to run there.
type launch struct {
	name   string // of its state dir and cgroup on the host
	uid    int    // claimed from uids
	uids   *uidClaims
	cg     *cgroup
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *tailBuffer
	// The write ends of the pipes bubblewrap reads its seccomp filter
	// (fd 3) and its arguments (fd 4) from.
	seccomp, args *os.File
	exit          chan struct{} // closed when bubblewrap has ended
	closeOnce     sync.Once
}

// launch starts a bubblewrap for a sandbox yet to be built, with a new
// uid and cgroup (of the default limits, which build changes when its
// spec's differ).
func (r *Runtime) launch() (_ *launch, err error) {
	uid, err := r.uids.claim()
	if err != nil {
		return nil, err
	}
	l := &launch{name: "c" + hostName(), uid: uid, uids: r.uids, stderr: &tailBuffer{max: 4096}, exit: make(chan struct{})}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if l.cg, err = r.cgroups.create("sb-"+l.name, DefaultLimits); err != nil {
		return nil, err
	}
	prog, seccompW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	defer prog.Close()
	l.seccomp = seccompW
	// The arguments go through a pipe so that the sandbox's /proc/1/cmdline
	// does not show the host's paths.
	args, argsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: args pipe: %w", err)
	}
	defer args.Close()
	l.args = argsW
	cmd := exec.Command(r.cfg.Bwrap, "--args", "4", wire.AgentPath, wire.AgentCommand)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{prog, args}
	cmd.SysProcAttr = r.credential(l.uid)
	if r.cgroups.v2 {
		f, err := l.cg.fd()
		if err != nil {
			return nil, fmt.Errorf("sandbox: open cgroup: %w", err)
		}
		defer f.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(f.Fd())
	}
	if l.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("sandbox: agent pipe: %w", err)
	}
	if l.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, fmt.Errorf("sandbox: agent pipe: %w", err)
	}
	cmd.Stderr = l.stderr
	// A process of the sandbox holding stderr must not hold up Wait.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sandbox: start bubblewrap: %w", err)
	}
	l.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(l.exit)
	}()
	// cgroup v1 has no clone into a cgroup: bubblewrap moves in now, alone,
	// while it waits for its arguments; all it starts will be born inside.
	if !r.cgroups.v2 {
		if err := l.cg.add(cmd.Process.Pid); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// exited reports whether the launch's bubblewrap has ended.
func (l *launch) exited() bool { return closed(l.exit) }

// closed reports whether c is closed, without waiting.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// close ends a launch that did not become a sandbox: its processes are
// killed before its argument pipe closes, and then its cgroup and uid go.
func (l *launch) close() {
	l.closeOnce.Do(func() {
		if l.cmd != nil {
			_ = l.cmd.Process.Kill()
		}
		if l.cg != nil {
			_ = l.cg.kill(5 * time.Second)
		}
		if l.cmd != nil {
			<-l.exit
		}
		for _, f := range []*os.File{l.seccomp, l.args} {
			if f != nil {
				_ = f.Close()
			}
		}
		if l.stdin != nil {
			_ = l.stdin.Close()
		}
		if l.cg != nil {
			_ = l.cg.remove()
		}
		l.uids.release(l.uid)
	})
}

// start gives the launch its filter and arguments and waits for the
// agent's hello.
func (s *Sandbox) start(ctx context.Context, l *launch) error {
	go func() {
		_, _ = l.seccomp.Write(s.rt.cfg.Seccomp)
		_ = l.seccomp.Close()
	}()
	go func() {
		_, _ = l.args.Write([]byte(strings.Join(s.rt.bwrapArgs(s), "\x00") + "\x00"))
		_ = l.args.Close()
	}()
	s.cmd, s.stdin = l.cmd, l.stdin
	s.in = wire.NewWriter(l.stdin)
	out := bufio.NewReaderSize(l.stdout, 64<<10)
	hello := make(chan error, 1)
	go func() {
		f, err := wire.ReadFrame(out, wire.MaxAgentFrame)
		if err == nil && f.Type != wire.FrameReady {
			err = fmt.Errorf("unexpected frame %q", f.Type)
		}
		hello <- err
	}()
	var err error
	select {
	case err = <-hello:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("sandbox: agent did not start: %w: %s", err, strings.TrimSpace(l.stderr.String()))
	}
	go s.readLoop(out)
	go func() {
		<-l.exit
		s.markDead(errors.New("sandbox ended"))
	}()
	return nil
}

// credential runs bubblewrap as the sandbox's own unprivileged host uid,
// killed if the executor dies.
func (r *Runtime) credential(uid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
		Setpgid:    true,
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Close removes the runtime's state dir and parent cgroup; call it after
// every sandbox is destroyed.
func (r *Runtime) Close() {
	close(r.stop)
	r.pool.close()
	r.launches.close()
	r.uids.close()
	if r.store != nil {
		if err := r.store.close(); err != nil {
			r.log.Warn("sandbox: storage not removed", "error", err)
		}
	}
	r.removeState()
	if r.cgroups.v2 {
		_ = unix.Rmdir(filepath.Join(r.cfg.CgroupMount, r.cfg.CgroupParent))
		return
	}
	for _, c := range cgroupControllers {
		_ = unix.Rmdir(filepath.Join(r.cfg.CgroupMount, c, r.cfg.CgroupParent))
	}
}

// removeState unmounts the state dir's tmpfs, with any workspace left in it,
// and removes the dir.
func (r *Runtime) removeState() {
	_ = unix.Unmount(r.cfg.StateDir, unix.MNT_DETACH)
	_ = os.RemoveAll(r.cfg.StateDir)
}
