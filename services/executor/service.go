package executor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/approval/gate"
	"github.com/conch-sh/conch/services/executor/admission"
	"github.com/conch-sh/conch/services/executor/egressproxy"
	"github.com/conch-sh/conch/services/executor/hostexec"
	"github.com/conch-sh/conch/services/executor/nodes"
	"github.com/conch-sh/conch/services/executor/persist"
	"github.com/conch-sh/conch/services/executor/process"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/sandbox/fsview"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/executor/templatecache"
	"github.com/conch-sh/conch/services/executor/toolshim"
	"github.com/conch-sh/conch/services/executor/wsync"
	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/quota"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/skillfs"
	"github.com/conch-sh/conch/services/router/accounts"
)

// Limits of commands (package contract owns those other surfaces share).
const (
	MaxCommandBytes    = contract.MaxCommandBytes
	DefaultOutputChars = contract.DefaultOutputLength
	MaxOutputChars     = contract.MaxOutputLength
	DefaultRunTimeout  = contract.DefaultTimeout
	MaxRunTimeout      = 300 * time.Second
	DefaultExecTimeout = contract.ExecTimeout
	MaxExecTimeout     = contract.ExecTimeout
	ProcessRetention   = 30 * time.Minute
	// PersistentWorkspaceBytes is the default quota of a persistent
	// workspace (docs/how-to/workspace-files.md), owned by package quota.
	PersistentWorkspaceBytes = quota.DefaultBytes
	// MaxNameChars bounds a sandbox's name.
	MaxNameChars        = 256
	backgroundBudget    = 64 << 20
	ownershipTTLSeconds = 15
)

// Runtime builds sandboxes; *sandbox.Runtime is the production one.
type Runtime interface {
	Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error)
	// Resolver finds programs as a new sandbox would.
	Resolver(pathPrepend []string) (fsview.Resolver, error)
	// CopyOnWrite reports whether a sandbox can start from another's
	// files, copy-on-write (sandbox.Spec.From).
	CopyOnWrite() bool
}

// Service is the executor's domain: the sandboxes of this executor, their
// commands and their processes.
type Service struct {
	name  string
	addr  string // where this executor is reached, recorded with its sandboxes
	rt    Runtime
	etcd  *clientv3.Client
	log   *slog.Logger
	procs *process.Table

	mu        sync.Mutex
	sandboxes map[string]*entry
	nodes     map[string]*nodes.Conn // account/name → attached node
	lease     clientv3.LeaseID

	max      int  // sandboxes this executor holds at most
	creating int  // sandboxes being built, under mu
	draining bool // no new sandboxes or nodes, under mu
	// admit bounds the work done at once: commands, and the making of
	// new sandboxes, which wait admitWait at most for a slot.
	admit     *admission.Gate
	admitWait time.Duration

	ws    persist.Store // nil: persistent workspaces are refused
	snaps Snapshots     // nil: snapshots are refused
	// templates are the accounts' templates, their roots kept in
	// templateRoots; nil: templates are refused.
	templates     Templates
	templateRoots *templatecache.Cache
	readyTimeout  time.Duration
	tools         ToolCaller       // nil: tool commands are refused
	gateway       *hostexec.Runner // nil: the gateway host is turned off
	gatewayFull   bool             // security full is allowed there
	// flushTimeout bounds one flush to the workspace service: a hung
	// service must not hold a sandbox's sync lock, and so its every later
	// command, forever.
	flushTimeout time.Duration
	// egress is the proxy of sandboxes with network.
	egress *egressproxy.Proxy
	// approvals judges commands whose exec policy is not the sandbox's
	// full/off default (docs/explanation/exec-policy.md); nil refuses them.
	approvals gate.Client
	// denyRules tells which sandbox commands under the full/off default
	// an exec-approvals document's deny rules still hold for.
	denyRules DenyRules
	// audit records how commands ended; nil records nothing.
	audit AuditSink
	// ceil bounds what tenants ask of sandboxes and commands.
	ceil ceiling.Config
	// quota is the operator's default quotas; nil counts nothing.
	quota *quotas.Config
	// daily counts accounts' egress bytes of the day; nil with quota.
	daily *egressDaily
	// pausedSwept is when Run last ended paused sandboxes past their
	// lifetime.
	pausedSwept time.Time
}

// Option configures a Service.
type Option func(*Service)

// WithWorkspaces lets sandboxes mount persistent workspaces from ws.
func WithWorkspaces(ws persist.Store) Option { return func(s *Service) { s.ws = ws } }

// WithSnapshots keeps sandboxes' snapshots in snaps.
func WithSnapshots(snaps Snapshots) Option { return func(s *Service) { s.snaps = snaps } }

// DefaultFlushTimeout bounds a workspace flush unless WithFlushTimeout
// says otherwise.
const DefaultFlushTimeout = 60 * time.Second

// WithFlushTimeout bounds each flush of a persistent workspace to the
// workspace service; one that takes longer fails, and the command that
// caused it is answered with an error saying its changes were not saved.
func WithFlushTimeout(d time.Duration) Option { return func(s *Service) { s.flushTimeout = d } }

// DefaultAdmitWait is how long a new sandbox waits for a work slot
// before it is refused, unless WithAdmission says otherwise.
const DefaultAdmitWait = time.Second

// WorkSlotsPerCore is how many work slots an executor holds per core it
// may use, unless WithAdmission says otherwise.
const WorkSlotsPerCore = 4

// workHold is how long a command holds its work slot at most: one that
// runs longer (a build, a server) lets others start beside it.
const workHold = time.Second

// WithAdmission bounds the work this executor does at once to slots
// (commands, and the making of sandboxes; 0: WorkSlotsPerCore per core
// it may use), serving commands of the sandboxes it holds first; a new
// sandbox that found no slot within wait (0: DefaultAdmitWait) is refused
// with ResourceExhausted, and the router places it elsewhere or answers
// that conch is at capacity.
func WithAdmission(slots int, wait time.Duration) Option {
	return func(s *Service) {
		if slots <= 0 {
			slots = WorkSlotsPerCore * runtime.GOMAXPROCS(0)
		}
		s.admit, s.admitWait = admission.New(slots), cmp.Or(wait, DefaultAdmitWait)
	}
}

// ToolCaller runs a tool moved into a sandbox, on the router's tool host,
// for the sandbox's account.
type ToolCaller func(ctx context.Context, account, sandboxID, tool, arguments string) (output string, isError bool, err error)

// DefaultMaxSandboxes is how many sandboxes an executor holds at most
// unless WithMaxSandboxes says otherwise.
const DefaultMaxSandboxes = 256

// WithCeilings bounds what tenants ask of sandboxes and commands by the
// operator's ceilings; without it, ceiling.Defaults.
func WithCeilings(c ceiling.Config) Option { return func(s *Service) { s.ceil = c } }

// WithQuotas counts every sandbox against its account's quotas, whose
// defaults c holds (an admin may give an account its own).
func WithQuotas(c quotas.Config) Option { return func(s *Service) { s.quota = &c } }

// WithMaxSandboxes bounds the sandboxes this executor holds; a create
// beyond it is refused with ResourceExhausted, and the router places new
// sandboxes on the executors with the most room.
func WithMaxSandboxes(n int) Option { return func(s *Service) { s.max = n } }

// MaxSandboxes is how many sandboxes this executor holds at most.
func (s *Service) MaxSandboxes() int { return s.max }

// WithGatewayHost lets commands run on this executor's own machine, outside
// any sandbox (host gateway), through r, for the accounts granted it;
// allowFull lets them run under security full.
func WithGatewayHost(r *hostexec.Runner, allowFull bool) Option {
	return func(s *Service) { s.gateway, s.gatewayFull = r, allowFull }
}

// gatewayDir is where a command with workdir starts on the gateway host.
func (s *Service) gatewayDir(workdir string) string {
	if s.gateway == nil || filepath.IsAbs(workdir) {
		return workdir
	}
	return filepath.Join(s.gateway.Dir, workdir)
}

// WithEgress serves the egress of sandboxes with network through p
// instead of a proxy with the system resolver and no ranges refused beyond
// the built-in ones.
func WithEgress(p *egressproxy.Proxy) Option { return func(s *Service) { s.egress = p } }

// WithToolCaller lets sandboxes have tool commands.
func WithToolCaller(c ToolCaller) Option { return func(s *Service) { s.tools = c } }

// entry is a live sandbox with its owner.
type entry struct {
	sb         *sandbox.Sandbox
	account    string
	user       string
	session    string
	persistent bool
	tools      *toolshim.Host // nil: no tool commands
	limits     sandbox.Limits
	network    *Network   // nil: loopback only
	egress     *egressLog // nil: loopback only
	idle       time.Duration
	created    time.Time
	// ttl is its lifetime from created, busy or not; 0: none.
	ttl time.Duration
	// labels are what it was created with, read-only after.
	labels map[string]string
	// snapshot is the snapshot it started from, if any.
	snapshot string
	// template is the template it started from, if any.
	template *usedTemplate
	// params are what it was created with: a fork's copies get them.
	params CreateParams
	// claim is what it takes of its account's quotas; nil: not counted.
	claim quotas.Usage

	name string
	// skills are the skills mounted in it, without their files.
	skills []*executorv1.SkillBundle

	mu       sync.Mutex
	lastUsed time.Time
	running  map[spanKey]int // trace contexts of the commands running, under mu
	// written are the files WriteFile wrote, path → as written, under mu.
	written map[string]wsync.Meta
	// ports are its exposed ports, under mu.
	ports map[int32]*exposedPort

	// ws is its persistent workspace; nil for none.
	ws *persist.Workspace
}

func (e *entry) touch() {
	e.mu.Lock()
	e.lastUsed = time.Now()
	e.mu.Unlock()
}

// expiresAt is when its lifetime ends; zero when it has none.
func (e *entry) expiresAt() time.Time {
	if e.ttl <= 0 {
		return time.Time{}
	}
	return e.created.Add(e.ttl)
}

// expired reports whether its lifetime has ended by now.
func (e *entry) expired(now time.Time) bool {
	end := e.expiresAt()
	return !end.IsZero() && !now.Before(end)
}

func (e *entry) idleSince() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastUsed
}

// NewService returns the executor's domain. name identifies this executor
// instance and addr is its advertised gRPC address; both are recorded with
// each of its sandboxes (package placement) so that callers reach it.
func NewService(ctx context.Context, name, addr string, rt Runtime, etcd *clientv3.Client, log *slog.Logger, opts ...Option) (*Service, error) {
	if rt == nil || etcd == nil || name == "" || addr == "" {
		return nil, errors.New("executor: runtime, etcd, name and address are required")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Service{name: name, addr: addr, rt: rt, etcd: etcd, log: log, procs: process.NewTable(ProcessRetention), sandboxes: map[string]*entry{}, nodes: map[string]*nodes.Conn{}, max: DefaultMaxSandboxes, flushTimeout: DefaultFlushTimeout, ceil: ceiling.Defaults}
	for _, o := range opts {
		o(s)
	}
	if s.quota != nil {
		s.daily = newEgressDaily(etcd, name, s.quota)
	}
	if s.egress == nil {
		s.egress = egressproxy.New(egressproxy.Config{Log: log})
	}
	lease, err := etcd.Grant(ctx, ownershipTTLSeconds)
	if err != nil {
		return nil, fmt.Errorf("executor: grant ownership lease: %w", err)
	}
	s.lease = lease.ID
	return s, nil
}

// Bounds of the wait between attempts to take a new ownership lease.
const (
	minLeaseRetry = 100 * time.Millisecond
	maxLeaseRetry = 5 * time.Second
)

// Run keeps the ownership lease alive, ends idle sandboxes and forgets old
// processes until ctx ends, then destroys every sandbox.
func (s *Service) Run(ctx context.Context) error {
	defer s.shutdown(context.WithoutCancel(ctx))
	ka, err := s.etcd.KeepAlive(ctx, s.lease)
	if err != nil {
		return fmt.Errorf("executor: keep ownership lease: %w", err)
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var renew <-chan time.Time
	delay := minLeaseRetry
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-ka:
			if !ok && ctx.Err() == nil {
				// The lease expired, or etcd could not renew it for
				// its whole TTL: our records are gone or going. Take a
				// new lease and record the sandboxes again, for as long
				// as etcd takes to come back; the sandboxes keep
				// serving meanwhile.
				ka, renew = nil, time.After(0)
			}
		case <-renew:
			next, err := s.renewLease(ctx)
			if err != nil {
				s.log.Warn("ownership lease lost; taking a new one failed", "error", err, "retry_in", delay)
				renew = time.After(delay)
				delay = min(2*delay, maxLeaseRetry)
				continue
			}
			s.log.Info("ownership lease taken again")
			ka, renew, delay = next, nil, minLeaseRetry
		case now := <-tick.C:
			s.procs.Sweep(now)
			s.endIdle(ctx, now)
			if s.daily != nil {
				if err := s.daily.sync(ctx); err != nil {
					s.log.Warn("egress counts not synced", "error", err)
				}
			}
		}
	}
}

func (s *Service) renewLease(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	lease, err := s.etcd.Grant(ctx, ownershipTTLSeconds)
	if err != nil {
		return nil, fmt.Errorf("executor: grant ownership lease: %w", err)
	}
	s.mu.Lock()
	s.lease = lease.ID
	entries := make(map[string]*entry, len(s.sandboxes))
	for id, e := range s.sandboxes {
		entries[id] = e
	}
	attached := make([]*nodes.Conn, 0, len(s.nodes))
	for _, c := range s.nodes {
		attached = append(attached, c)
	}
	s.mu.Unlock()
	for id, e := range entries {
		if err := s.recordOwnership(ctx, id, e); err != nil {
			return nil, err
		}
		if e.claim != nil {
			if err := quotas.Restore(ctx, s.etcd, quotas.Sandboxes, e.account, id, e.claim, clientv3.WithLease(lease.ID)); err != nil {
				return nil, err
			}
		}
	}
	for _, c := range attached {
		if err := s.recordNode(ctx, c, time.Now().UTC()); err != nil {
			return nil, err
		}
	}
	return s.etcd.KeepAlive(ctx, lease.ID)
}

func (s *Service) recordOwnership(ctx context.Context, id string, e *entry) error {
	rec := placement.Record{Account: e.account, Executor: s.name, Addr: s.addr, User: e.user, Created: e.created}
	s.mu.Lock()
	lease := s.lease
	s.mu.Unlock()
	if _, err := s.etcd.Put(ctx, placement.SandboxKey(id), rec.Encode(), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("executor: record sandbox %s: %w", id, err)
	}
	return nil
}

// endIdle ends the sandboxes idle longer than their idle timeout, and
// those past their lifetime, busy or not; a persistent workspace is saved
// first, as on every teardown.
func (s *Service) endIdle(ctx context.Context, now time.Time) {
	s.mu.Lock()
	ending := map[string]string{}
	for id, e := range s.sandboxes {
		switch {
		case e.expired(now):
			ending[id] = "ttl"
		case e.idle > 0 && now.Sub(e.idleSince()) > e.idle:
			ending[id] = "idle"
		}
	}
	s.mu.Unlock()
	for id, why := range ending {
		if why == "idle" && s.pauseIdle(ctx, id) {
			continue
		}
		s.log.Info("ending sandbox", "sandbox", id, "reason", why)
		if err := s.destroy(ctx, id); err != nil {
			s.log.Warn("sandbox teardown failed", "sandbox", id, "reason", why, "error", err)
		}
	}
	if now.Sub(s.pausedSwept) >= pausedSweep {
		s.pausedSwept = now
		s.endPaused(ctx, now)
	}
}

func (s *Service) shutdown(ctx context.Context) {
	s.Drain()
	s.mu.Lock()
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		if err := s.destroy(ctx, id); err != nil {
			s.log.Warn("sandbox teardown failed", "sandbox", id, "error", err)
		}
	}
	_, _ = s.etcd.Revoke(ctx, s.lease)
}

// Drain begins this executor's shutdown. The sandboxes it holds go on
// serving, but it creates no more (the router places them on another
// executor) and sends its nodes away: they connect again through the
// router to another executor rather than hold this one's shutdown.
func (s *Service) Drain() {
	s.mu.Lock()
	s.draining = true
	attached := make([]*nodes.Conn, 0, len(s.nodes))
	for _, c := range s.nodes {
		attached = append(attached, c)
	}
	s.mu.Unlock()
	for _, c := range attached {
		c.Close(s.shuttingDown())
	}
}

// shuttingDown is the answer of a draining executor to what only another
// can do: the router tries another, a node connects again.
func (s *Service) shuttingDown() error {
	return errs.New(errs.Unavailable, "executor %s is shutting down; try another", s.name)
}

// CreateParams describe a sandbox to build.
type CreateParams struct {
	// Tools become commands in the sandbox (tools moved into the shell).
	Tools      []toolshim.Tool
	User       string
	Persistent bool
	Limits     sandbox.Limits
	// Network, when set, gives the sandbox egress through the executor's
	// proxy, limited to what it allows.
	Network     *Network
	PathPrepend []string
	Session     string
	Idle        time.Duration
	// TTL is its lifetime, busy or not (ceiling.Config.Lifetime); 0: none.
	TTL time.Duration
	// Labels are returned with it and select it in lists; checkLabels has
	// passed them.
	Labels map[string]string
	// Name is returned with the sandbox (a container's name).
	Name string
	// Snapshot is a snapshot to restore into it before it is returned.
	Snapshot string
	// PauseWhenIdle pauses it at its idle timeout rather than ending it.
	PauseWhenIdle bool
	// Template is a template of the account to start from. Workdir and
	// Env are set from it (useTemplate), never from a request.
	Template string
	Workdir  string
	Env      map[string]string
	// Request is the request these were read from (paramsFrom), kept to
	// build it again when it resumes from a pause; nil for none.
	Request *executorv1.CreateSandboxRequest
	// ID and Created, when set, are those of a paused sandbox resumed.
	ID      string
	Created time.Time
	// Skills are written into the sandbox's skills directory, which it
	// sees read-only; skillfs.Check has passed them.
	Skills []skillfs.Skill
	// from, set by copies only, is a sandbox of this executor whose files
	// the new one starts with, as a copy-on-write snapshot
	// (sandbox.Spec.From).
	from *sandbox.Sandbox
}

var userIDPattern = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,128}$`)

// Create builds a sandbox for account.
func (s *Service) Create(ctx context.Context, account string, p CreateParams) (*entry, string, error) {
	if p.User != "" && (!userIDPattern.MatchString(p.User) || p.User == "." || p.User == "..") {
		return nil, "", errs.New(errs.InvalidArgument, "user: must be %s", tenant.UserIDRule)
	}
	if p.Snapshot != "" {
		if err := s.needSnapshots("snapshot"); err != nil {
			return nil, "", err
		}
		if p.Persistent {
			return nil, "", errs.New(errs.InvalidArgument, "snapshot: a sandbox starts from a snapshot or from a persistent workspace, not both")
		}
		if p.Template == "" {
			// The snapshot's files belong on its template's root.
			rec, err := s.GetSnapshot(ctx, account, p.Snapshot)
			if err != nil {
				return nil, "", err
			}
			p.Template = rec.GetTemplate()
		}
	}
	var q quota.Limits
	if p.Persistent {
		if p.User == "" {
			return nil, "", errs.New(errs.InvalidArgument, "persistent: requires user")
		}
		if s.ws == nil {
			return nil, "", errs.New(errs.FailedPrecondition, "persistent: persistent workspaces need the workspace service, which this executor is not connected to")
		}
		if p.Limits.WorkspaceBytes == 0 {
			p.Limits.WorkspaceBytes = PersistentWorkspaceBytes
		}
		q = quota.Limits{Bytes: p.Limits.WorkspaceBytes, Files: p.Limits.WorkspaceFiles}.OrDefault()
		if err := persist.Room(ctx, s.ws, account, p.User, &p.Limits); err != nil {
			return nil, "", err
		}
	}
	if utf8.RuneCountInString(p.Name) > MaxNameChars {
		return nil, "", errs.New(errs.InvalidArgument, "name: must be at most %d characters", MaxNameChars)
	}
	var egressPolicy *egressproxy.Policy
	var egressApprovals gate.EgressClient
	var secretEnv map[string]string
	if p.Network != nil {
		var err error
		if egressPolicy, secretEnv, err = p.Network.policy(); err != nil {
			return nil, "", err
		}
		if p.Network.Ask {
			var ok bool
			if egressApprovals, ok = s.approvals.(gate.EgressClient); !ok {
				return nil, "", errs.New(errs.FailedPrecondition, "network.ask: this executor is not connected to an approval service that answers network approvals")
			}
		}
	}
	if len(p.Tools) > 0 && s.tools == nil {
		return nil, "", errs.New(errs.FailedPrecondition, "tools: this executor is not connected to a tool host")
	}
	if err := checkPathPrepend("path_prepend", p.PathPrepend); err != nil {
		return nil, "", err
	}
	tpl, err := s.useTemplate(ctx, account, &p)
	if err != nil {
		return nil, "", err
	}
	created := false
	defer func() {
		if !created && tpl != nil {
			tpl.release()
		}
	}()
	if s.admit != nil {
		release, err := s.admit.Admit(ctx, account, s.admitWait)
		if errors.Is(err, admission.ErrBusy) {
			return nil, "", placement.Busy(s.name, s.admitWait)
		}
		if err != nil {
			return nil, "", err
		}
		defer release()
	}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return nil, "", s.shuttingDown()
	}
	if len(s.sandboxes)+s.creating >= s.max {
		s.mu.Unlock()
		return nil, "", placement.Full(s.name, s.max)
	}
	if err := s.fairShare(account); err != nil {
		s.mu.Unlock()
		return nil, "", err
	}
	s.creating++
	lease := s.lease
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.creating--
		s.mu.Unlock()
	}()
	id := cmp.Or(p.ID, "sb-"+randomID())
	// The account's quotas, counted across every executor; the claim
	// goes with this executor's lease, so that its end frees it.
	claim, err := s.claim(ctx, account, id, p.Limits, lease)
	if err != nil {
		return nil, "", err
	}
	defer func() {
		if !created {
			_ = quotas.Release(context.WithoutCancel(ctx), s.etcd, quotas.Sandboxes, account, id)
		}
	}()
	env := p.Env
	if len(secretEnv) > 0 {
		env = maps.Clone(p.Env)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, secretEnv)
	}
	spec := sandbox.Spec{ID: id, Limits: p.Limits, PathPrepend: p.PathPrepend, Network: egressPolicy != nil, Env: env, Workdir: p.Workdir, From: p.from}
	if tpl != nil {
		spec.Image = tpl.image
	}
	if egressPolicy != nil && egressPolicy.CA != nil {
		spec.EgressCA = egressPolicy.CA.PEM
	}
	sb, err := s.rt.Create(ctx, spec)
	if err != nil {
		if errors.Is(err, sandbox.ErrUnsupported) {
			return nil, "", errs.Wrap(errs.Unimplemented, err, "create sandbox")
		}
		return nil, "", fmt.Errorf("executor: create sandbox: %w", err)
	}
	now := time.Now()
	e := &entry{sb: sb, account: account, user: p.User, session: p.Session, persistent: p.Persistent, name: p.Name, limits: p.Limits, idle: p.Idle, ttl: p.TTL, labels: maps.Clone(p.Labels), snapshot: p.Snapshot, params: p, created: cmp.Or(p.Created, now), lastUsed: now, network: p.Network, claim: claim, template: tpl}
	for _, sk := range p.Skills {
		e.skills = append(e.skills, &executorv1.SkillBundle{Name: sk.Name, Id: sk.ID, Version: sk.Version})
	}
	if egressApprovals != nil {
		egressPolicy.Ask = func(ctx context.Context, host string, port int) (bool, string) {
			v, err := gate.CheckEgress(ctx, egressApprovals, &approvalv1.AuthorizeEgressRequest{
				Agent: p.Network.Gateway, Sandbox: id, Host: host, Port: int32(port), Session: p.Session, User: p.User,
				TimeoutSeconds: p.Network.ApprovalTimeout,
			})
			if err != nil {
				s.log.WarnContext(ctx, "network approval failed", "sandbox", id, "host", host, "port", port, "error", err)
				return false, "the approval service could not be asked"
			}
			return v.Allowed, v.Reason
		}
	}
	if egressPolicy != nil && s.daily != nil {
		// Every sandbox of the account, on every executor, spends
		// from its egress bytes of the day.
		if egressPolicy.Shared, err = s.daily.account(ctx, account); err != nil {
			_ = sb.Destroy(context.WithoutCancel(ctx))
			return nil, "", err
		}
	}
	if egressPolicy != nil {
		e.egress = newEgressLog()
		egressPolicy.OnOpen, egressPolicy.OnConnection = e.egress.opened, e.egress.add
		// It ends when the sandbox's Destroy closes its listener.
		go func() {
			if err := s.egress.Serve(context.WithoutCancel(ctx), sb.Egress(), *egressPolicy); err != nil {
				s.log.Warn("egress proxy stopped", "sandbox", id, "error", err)
			}
		}()
	}
	if len(p.Tools) > 0 {
		call := func(ctx context.Context, req toolshim.Request) (string, bool, error) {
			ctx, span := tracer.Start(e.traceOf(ctx, req.Traceparent), "executor.tool", trace.WithAttributes(attribute.String("conch.tool", req.Tool)))
			defer span.End()
			return s.tools(ctx, account, id, req.Tool, req.Arguments)
		}
		if e.tools, err = toolshim.Install(sb.ToolsPath(), wire.ToolPath, sb.HostUID(), p.Tools, call, s.log); err != nil {
			_ = sb.Destroy(context.WithoutCancel(ctx))
			return nil, "", errs.Wrap(errs.InvalidArgument, err, "tools")
		}
	}
	if len(p.Skills) > 0 {
		if err := skillfs.Write(sb.SkillsPath(), p.Skills); err != nil {
			_ = sb.Destroy(context.WithoutCancel(ctx))
			return nil, "", fmt.Errorf("executor: write skills: %w", err)
		}
	}
	if p.Persistent {
		e.ws, err = persist.Open(ctx, s.ws, persist.Options{
			Account: account, User: p.User, Path: sb.WorkspacePath(), UID: sb.HostUID(),
			Quota: q, Files: p.Limits.WorkspaceFiles, FlushTimeout: s.flushTimeout,
		})
		if err != nil {
			_ = sb.Destroy(context.WithoutCancel(ctx))
			return nil, "", err
		}
	}
	if p.Snapshot != "" {
		if err := s.restore(ctx, e, account, p.Snapshot); err != nil {
			_ = sb.Destroy(context.WithoutCancel(ctx))
			return nil, "", err
		}
	}
	if tpl != nil {
		if err := s.startTemplate(ctx, e, tpl.t); err != nil {
			_ = sb.Destroy(context.WithoutCancel(ctx))
			return nil, "", err
		}
	}
	if err := s.recordOwnership(ctx, id, e); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		return nil, "", err
	}
	s.mu.Lock()
	s.sandboxes[id] = e
	s.mu.Unlock()
	go func() {
		// A sandbox whose agent died (e.g. killed by its memory limit) is
		// removed so that callers get a clear NotFound.
		<-sb.Done()
		s.mu.Lock()
		_, live := s.sandboxes[id]
		s.mu.Unlock()
		if live {
			s.log.Warn("sandbox ended unexpectedly", "sandbox", id)
			_ = s.destroy(context.WithoutCancel(ctx), id)
		}
	}()
	s.log.Info("sandbox created", "sandbox", id, "account", account)
	created = true
	return e, id, nil
}

// claim counts a new sandbox with limits l against account's quotas of
// sandboxes and of their memory, pids and CPU in total.
func (s *Service) claim(ctx context.Context, account, id string, l sandbox.Limits, lease clientv3.LeaseID) (quotas.Usage, error) {
	if s.quota == nil {
		return nil, nil
	}
	limits, err := accounts.Limits(ctx, s.etcd, s.quota, account)
	if err != nil {
		return nil, err
	}
	d := sandbox.DefaultLimits
	amounts := quotas.Usage{
		quotas.Sandboxes:          1,
		quotas.SandboxMemoryBytes: cmp.Or(l.MemoryBytes, d.MemoryBytes),
		quotas.SandboxPids:        cmp.Or(l.Pids, d.Pids),
		quotas.SandboxCPU:         cmp.Or(l.CPUMillicores, d.CPUMillicores),
	}
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	return amounts, quotas.Claim(ctx, s.etcd, quotas.Sandboxes, account, id, amounts, limits, opts)
}

// fairShare refuses a create by an account that already holds its share
// of this executor while the executor is three quarters full: the last
// quarter is kept for the accounts that hold less. Called under s.mu.
func (s *Service) fairShare(account string) error {
	if len(s.sandboxes)+s.creating < s.max*3/4 {
		return nil
	}
	held := map[string]int{account: 0}
	for _, e := range s.sandboxes {
		held[e.account]++
	}
	share := max(1, s.max/len(held))
	if held[account] >= share {
		return errs.New(errs.ResourceExhausted, "executor is at capacity: this account holds its fair share (%d of %d sandboxes); others are waiting", held[account], s.max)
	}
	return nil
}

// lookup returns account's sandbox id, or NotFound; a sandbox of another
// executor is answered with where it lives.
func (s *Service) lookup(ctx context.Context, account, id string) (*entry, error) {
	s.mu.Lock()
	e := s.sandboxes[id]
	s.mu.Unlock()
	if e != nil && e.account == account {
		return e, nil
	}
	if e == nil && id != "" && len(id) <= 128 && !strings.Contains(id, "/") {
		rec, ok, err := placement.Lookup(ctx, s.etcd, placement.SandboxKey(id))
		if err == nil && ok && rec.Account == account && rec.Executor != s.name {
			return nil, errs.New(errs.Unavailable, "sandbox %s is on executor %s; retry to reach it", id, rec.Executor)
		}
	}
	return nil, errs.New(errs.NotFound, "sandbox %q not found", id)
}

// List returns account's sandboxes on this executor, of user if not empty.
func (s *Service) List(account, user string) map[string]*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*entry{}
	for id, e := range s.sandboxes {
		if e.account == account && (user == "" || e.user == user) {
			out[id] = e
		}
	}
	return out
}

// Destroy ends account's sandbox id.
func (s *Service) Destroy(ctx context.Context, account, id string) error {
	if _, err := s.lookup(ctx, account, id); err != nil {
		return err
	}
	return s.destroy(ctx, id)
}

func (s *Service) destroy(ctx context.Context, id string) error {
	s.mu.Lock()
	e := s.sandboxes[id]
	delete(s.sandboxes, id)
	s.mu.Unlock()
	if e == nil {
		return nil
	}
	// Waits for a flush in progress; none starts after it but the last
	// one below.
	e.ws.End()
	if e.tools != nil {
		e.tools.Close()
	}
	e.closePorts()
	err := e.sb.Stop(ctx)
	// Every command is gone; the workspace's files are still there: the
	// last changes, the killed commands' included, are kept before the
	// files go.
	err = errors.Join(err, e.ws.Close(ctx), e.sb.Destroy(ctx))
	if e.template != nil {
		e.template.release()
	}
	s.procs.DropSandbox(id)
	if _, derr := s.etcd.Delete(ctx, placement.SandboxKey(id)); derr != nil {
		err = errors.Join(err, fmt.Errorf("executor: forget sandbox %s: %w", id, derr))
	}
	if derr := quotas.Release(ctx, s.etcd, quotas.Sandboxes, e.account, id); derr != nil {
		err = errors.Join(err, derr)
	}
	if err != nil {
		return fmt.Errorf("executor: destroy %s: %w", id, err)
	}
	s.log.Info("sandbox destroyed", "sandbox", id)
	return nil
}

func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sortedIDs returns the keys of m in order.
func sortedIDs(m map[string]*entry) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
