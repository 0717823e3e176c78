package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/launch"
)

// Member kinds.
const (
	KindEtcd      = "etcd"
	KindMinIO     = "minio"
	KindWorkspace = "workspace"
	KindApproval  = "approval"
	KindExecutor  = "executor"
	KindRouter    = "router"
)

// ServiceKinds are the conch services.
var ServiceKinds = []string{KindWorkspace, KindApproval, KindExecutor, KindRouter}

// Defaults of Options.
const (
	DefaultReplicas     = 2
	DefaultEtcdMembers  = 3
	DefaultReadyTimeout = 90 * time.Second
	DefaultStopTimeout  = 20 * time.Second
)

// sandboxUIDRange is how many host uids one executor's sandboxes may use;
// the executors of one machine get disjoint ranges.
const sandboxUIDRange = 1 << 17

// Options configures Start.
type Options struct {
	// Dir holds the state file, the members' data and logs/. Whatever
	// a previous, stopped cluster left there is removed. Required.
	Dir string
	// Conch and MinIO are the binaries. Required.
	Conch, MinIO string
	// Replicas is the number of processes of each service; 0 means
	// DefaultReplicas.
	Replicas int
	// EtcdMembers is the size of the etcd cluster; 0 means
	// DefaultEtcdMembers.
	EtcdMembers int
	// Detach lets the processes outlive this one (make cluster).
	// Otherwise each is killed when this process dies, however it dies.
	Detach bool
	// UnsafeNoFsync runs etcd without fsync: faster, and safe against
	// killed processes but not against a machine crash.
	UnsafeNoFsync bool
	// ExecutorFlags are added to each executor's command line.
	ExecutorFlags []string
	// Env is added to the environment of the conch processes, after the
	// cluster's own settings (e.g. CONCH_LOG_LEVEL=warn).
	Env []string
	// ReadyTimeout bounds the wait for a member to serve; 0 means
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// StopTimeout bounds a graceful stop before SIGKILL; 0 means
	// DefaultStopTimeout.
	StopTimeout time.Duration
	// Logger receives the cluster's progress; nil discards it.
	Logger *slog.Logger
}

// Cluster is a running local cluster.
type Cluster struct {
	opts Options
	log  *slog.Logger
	// etcd is the launcher's own client, for readiness checks.
	etcd *clientv3.Client

	mu      sync.Mutex
	state   State
	members map[string]*member
}

// member is one process of the cluster and how it is running.
type member struct {
	bin string
	env []string
	// Guarded by Cluster.mu.
	st     *MemberState
	exited chan struct{} // closed when the running process has exited
	// startRev is etcd's revision before a service's process started:
	// its own registration comes after it, while a killed predecessor's
	// at the same address may be listed until its lease expires.
	startRev int64
}

// Start starts a cluster in opts.Dir and waits until every member serves.
// On error, everything it started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Dir == "" || opts.Conch == "" || opts.MinIO == "" {
		return nil, errors.New("localcluster: Dir, Conch and MinIO are required")
	}
	for _, bin := range []string{opts.Conch, opts.MinIO} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("localcluster: binary: %w", err)
		}
	}
	if opts.Replicas <= 0 {
		opts.Replicas = DefaultReplicas
	}
	if opts.EtcdMembers <= 0 {
		opts.EtcdMembers = DefaultEtcdMembers
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if err := prepareDir(opts.Dir); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, log: opts.Logger, members: map[string]*member{}}
	if err := c.plan(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	// etcd first: every other member needs it. A member serves only
	// once a quorum runs, so all start before any is waited for.
	if err := c.startAll(ctx, c.Members(KindEtcd)); err != nil {
		return nil, err
	}
	root, err := c.state.EtcdTLS.Config()
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	// Every request to etcd is checked against its certificate's user:
	// each service's is limited to its own key prefixes.
	if err := launch.EnableEtcdAuth(ctx, c.state.EtcdEndpoints, root); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if c.etcd, err = etcdx.NewClient(ctx, etcdx.ClientOptions{Endpoints: c.state.EtcdEndpoints, TLS: root}); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if err := c.Start(ctx, "minio"); err != nil {
		return nil, err
	}
	// Each service that uses MinIO is a MinIO user limited to its bucket.
	if err := launch.EnsureMinIOUsersWaiting(ctx, c.state.S3.Endpoint, false, c.state.S3.AccessKey, c.state.S3.SecretKey, slices.Collect(maps.Values(c.state.S3.Users)), time.Minute, c.log); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	var services []string
	for _, kind := range ServiceKinds {
		services = append(services, c.Members(kind)...)
	}
	if err := c.startAll(ctx, services); err != nil {
		return nil, err
	}
	c.log.Info("cluster ready", "dir", opts.Dir, "routers", strings.Join(c.state.Routers, " "))
	return c, nil
}

// prepareDir makes dir ready for a new cluster: it refuses a dir whose
// cluster still runs and removes what a stopped one left.
// startAll starts the members names, all of them before waiting for any
// to serve.
func (c *Cluster) startAll(ctx context.Context, names []string) error {
	for _, name := range names {
		if err := c.spawn(name); err != nil {
			return err
		}
	}
	for _, name := range names {
		if err := c.waitReady(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func prepareDir(dir string) error {
	live, err := Live(dir)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return fmt.Errorf("localcluster: a cluster still runs in %s (%s and %d more); stop it first", dir, live[0].Name, len(live)-1)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	for _, e := range entries {
		if name := e.Name(); name == "logs" || name == "pki" || name == StateFile || name == KindMinIO || strings.HasPrefix(name, KindEtcd+"-") {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("localcluster: clear %s: %w", dir, err)
			}
		}
	}
	return os.MkdirAll(filepath.Join(dir, "logs"), 0o700)
}

// plan chooses ports, secrets and command lines for every member.
func (c *Cluster) plan() error {
	o := c.opts
	n := 2*o.EtcdMembers + 2 + len(ServiceKinds)*o.Replicas + o.Replicas
	ports, err := FreePorts(n)
	if err != nil {
		return err
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return p }
	s := &c.state
	s.AdminKey = "ck-admin-" + randomHex(16)
	s.InternalSecret = randomHex(24)
	s.S3 = S3{Endpoint: next(), AccessKey: "conch", SecretKey: randomHex(16), Bucket: "conch", Users: map[string]launch.MinIOUser{
		KindWorkspace: {Service: KindWorkspace, AccessKey: KindWorkspace, SecretKey: randomHex(16), Bucket: "conch"},
		KindApproval:  {Service: KindApproval, AccessKey: KindApproval, SecretKey: randomHex(16), Bucket: "conch-audit"},
		KindRouter:    {Service: KindRouter, AccessKey: KindRouter, SecretKey: randomHex(16), Bucket: "conch-responses"},
	}}
	signingKeys := "k1:" + randomHex(32)
	secretsKey, err := seal.GenerateKey("k1")
	if err != nil {
		return err
	}

	// etcd accepts only certificates of the cluster's own CA (mTLS).
	certs, err := launch.MakeEtcdPKI(filepath.Join(o.Dir, "pki"), nil)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	member, root := certs.Pairs[launch.EtcdMemberCert], certs.Pairs[launch.EtcdRootCert]
	s.EtcdTLS = EtcdTLS{CAFile: certs.CAFile, CertFile: root.CertFile, KeyFile: root.KeyFile}
	var initial []string
	etcdPeers := make([]string, o.EtcdMembers)
	for i := range o.EtcdMembers {
		s.EtcdEndpoints = append(s.EtcdEndpoints, "https://"+next())
		etcdPeers[i] = "https://" + next()
		initial = append(initial, fmt.Sprintf("%s-%d=%s", KindEtcd, i, etcdPeers[i]))
	}
	base := baseEnv()
	conchEnv := append(slices.Clone(base), "CONCH_LOG_LEVEL=info")
	for i := range o.EtcdMembers {
		name := fmt.Sprintf("%s-%d", KindEtcd, i)
		args := []string{"etcd", "--name", name, "--data-dir", filepath.Join(o.Dir, name),
			"--listen-client", s.EtcdEndpoints[i], "--listen-peer", etcdPeers[i], "--initial-cluster", strings.Join(initial, ","),
			"--trusted-ca-file", certs.CAFile, "--cert-file", member.CertFile, "--key-file", member.KeyFile}
		if o.UnsafeNoFsync {
			args = append(args, "--unsafe-no-fsync")
		}
		c.add(o.Conch, append(slices.Clone(conchEnv), o.Env...), MemberState{Name: name, Kind: KindEtcd, Addr: s.EtcdEndpoints[i], Args: args})
	}

	console := next()
	c.add(o.MinIO, append(slices.Clone(base), "MINIO_ROOT_USER="+s.S3.AccessKey, "MINIO_ROOT_PASSWORD="+s.S3.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1"),
		MemberState{Name: KindMinIO, Kind: KindMinIO, Addr: s.S3.Endpoint,
			Args: []string{"server", "--quiet", "--address", s.S3.Endpoint, "--console-address", console, filepath.Join(o.Dir, KindMinIO)}})

	serviceEnv := append(slices.Clone(conchEnv),
		"CONCH_ETCD_ENDPOINTS="+strings.Join(s.EtcdEndpoints, ","),
		"CONCH_ETCD_CA_FILE="+s.EtcdTLS.CAFile,
		"CONCH_INTERNAL_SECRET="+s.InternalSecret,
		// Instances leave discovery and report NOT_SERVING a moment
		// before they stop taking calls, so that a rolling restart
		// sends nothing to an instance that is going away.
		"CONCH_DRAIN_DELAY=1s",
		"CONCH_SHUTDOWN_TIMEOUT=10s",
	)
	for _, kind := range ServiceKinds {
		env := slices.Clone(serviceEnv)
		// The service's own etcd user (launch.EtcdUsers).
		cert := certs.Pairs[kind]
		env = append(env, "CONCH_ETCD_CERT_FILE="+cert.CertFile, "CONCH_ETCD_KEY_FILE="+cert.KeyFile)
		switch kind {
		case KindWorkspace:
			u := s.S3.Users[kind]
			env = append(env, "CONCH_S3_ENDPOINT="+s.S3.Endpoint, "CONCH_S3_ACCESS_KEY="+u.AccessKey,
				"CONCH_S3_SECRET_KEY="+u.SecretKey, "CONCH_S3_BUCKET="+u.Bucket, "CONCH_SIGNING_KEYS="+signingKeys)
		case KindRouter:
			// Stored responses, in their own bucket of the same MinIO.
			u := s.S3.Users[kind]
			env = append(env, "CONCH_ADMIN_KEY="+s.AdminKey, "CONCH_SECRETS_KEY="+seal.FormatKey(secretsKey),
				"CONCH_RESPONSES_S3_ENDPOINT="+s.S3.Endpoint, "CONCH_RESPONSES_S3_ACCESS_KEY="+u.AccessKey,
				"CONCH_RESPONSES_S3_SECRET_KEY="+u.SecretKey, "CONCH_RESPONSES_S3_BUCKET="+u.Bucket)
		case KindApproval:
			// The audit trail, in its own bucket of the same MinIO;
			// executors send their records through the approval service.
			u := s.S3.Users[kind]
			env = append(env, "CONCH_SECRETS_KEY="+seal.FormatKey(secretsKey), "CONCH_AUDIT_S3_ENDPOINT="+s.S3.Endpoint, "CONCH_AUDIT_S3_ACCESS_KEY="+u.AccessKey,
				"CONCH_AUDIT_S3_SECRET_KEY="+u.SecretKey, "CONCH_AUDIT_S3_BUCKET="+u.Bucket)
		}
		env = append(env, o.Env...)
		for i := range o.Replicas {
			m := MemberState{Name: fmt.Sprintf("%s-%d", kind, i), Kind: kind, Addr: next()}
			m.Args = []string{kind, "--grpc-addr", m.Addr}
			switch kind {
			case KindRouter:
				m.HTTPAddr = next()
				m.Args = append(m.Args, "--http-addr", m.HTTPAddr)
				s.Routers = append(s.Routers, "http://"+m.HTTPAddr)
			case KindExecutor:
				m.Args = append(m.Args, "--sandbox-uid-base", strconv.Itoa(200000+i*sandboxUIDRange))
				m.Args = append(m.Args, o.ExecutorFlags...)
			}
			c.add(o.Conch, env, m)
		}
	}
	// The members are all planned: point each at its entry of the state.
	for i := range s.Members {
		c.members[s.Members[i].Name].st = &s.Members[i]
	}
	return c.save()
}

func (c *Cluster) add(bin string, env []string, st MemberState) {
	st.Log = filepath.Join(c.opts.Dir, "logs", st.Name+".log")
	c.state.Members = append(c.state.Members, st)
	exited := make(chan struct{})
	close(exited)
	c.members[st.Name] = &member{bin: bin, env: env, exited: exited}
}

// baseEnv is this process's environment without conch's and MinIO's
// settings, so a developer's own do not leak into the cluster.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONCH_") && !strings.HasPrefix(kv, "MINIO_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// FreePorts returns n distinct loopback addresses that were free a moment
// ago; they are held open together so none is handed out twice. They lie
// below the ephemeral port range, so the kernel never hands one to an
// outgoing connection (of etcd, MinIO, a test) before the process meant to
// bind it does.
func FreePorts(n int) ([]string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 12000 {
				low = v
			}
		}
	}
	var addrs []string
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			_ = l.Close()
		}
	}()
	for tries := 0; len(addrs) < n; tries++ {
		if tries == 100*n {
			return nil, errors.New("localcluster: no free port below the ephemeral range")
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+mrand.IntN(low-10000)))
		if err != nil {
			continue
		}
		lis = append(lis, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// save writes the state file; the caller holds c.mu or is alone.
func (c *Cluster) save() error { return writeState(c.opts.Dir, &c.state) }

// State returns a copy of the cluster's state.
func (c *Cluster) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state
	s.Members = slices.Clone(c.state.Members)
	return s
}

// Dir is the cluster's directory.
func (c *Cluster) Dir() string { return c.opts.Dir }

// Etcd is a client of the cluster's etcd, closed by Close.
func (c *Cluster) Etcd() *clientv3.Client { return c.etcd }

// Members returns the names of the members of kind, in order.
func (c *Cluster) Members(kind string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, m := range c.state.Members {
		if m.Kind == kind {
			names = append(names, m.Name)
		}
	}
	return names
}

// Member returns the state of the member called name.
func (c *Cluster) Member(name string) (MemberState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.members[name]
	if !ok {
		return MemberState{}, false
	}
	return *m.st, true
}

// MemberAt returns the name of the service member whose gRPC address is
// addr.
func (c *Cluster) MemberAt(addr string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.state.Members {
		if m.Addr == addr {
			return m.Name, true
		}
	}
	return "", false
}

func (c *Cluster) member(name string) (*member, error) {
	m, ok := c.members[name]
	if !ok {
		return nil, fmt.Errorf("localcluster: no member %q", name)
	}
	return m, nil
}

// spawn starts the process of a stopped member, without waiting for it to
// serve.
func (c *Cluster) spawn(name string) error {
	var rev int64
	if st, _ := c.Member(name); st.Kind != KindEtcd && st.Kind != KindMinIO && c.etcd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.ReadyTimeout)
		resp, err := c.etcd.Get(ctx, "conch/", clientv3.WithCountOnly())
		cancel()
		if err != nil {
			return fmt.Errorf("localcluster: start %s: read etcd revision: %w", name, err)
		}
		rev = resp.Header.Revision
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.member(name)
	if err != nil {
		return err
	}
	select {
	case <-m.exited:
	default:
		return fmt.Errorf("localcluster: %s is already running", name)
	}
	logf, err := os.OpenFile(m.st.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("localcluster: start %s: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(m.bin, m.st.Args...)
	cmd.Env = m.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !c.opts.Detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("localcluster: start %s: %w", name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	m.exited, m.startRev = exited, rev
	m.st.PID = cmd.Process.Pid
	m.st.StartTime, _, _ = procStat(m.st.PID)
	c.log.Info("cluster member started", "member", name, "pid", m.st.PID)
	return c.save()
}

// Start starts a stopped member again, with the same ports and data, and
// waits until it serves.
func (c *Cluster) Start(ctx context.Context, name string) error {
	if err := c.spawn(name); err != nil {
		return err
	}
	return c.waitReady(ctx, name)
}

// Kill sends SIGKILL to the member's whole process group, as when its
// machine dies, and waits for the member to exit.
func (c *Cluster) Kill(name string) error {
	return c.stop(name, syscall.SIGKILL, c.opts.StopTimeout)
}

// Stop asks the member to shut down with SIGTERM and waits for it; after
// the stop timeout, or once it exited, whatever is left of its process
// group is killed.
func (c *Cluster) Stop(name string) error {
	return c.stop(name, syscall.SIGTERM, c.opts.StopTimeout)
}

// Restart stops the member gracefully and starts it again.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	if err := c.Stop(name); err != nil {
		return err
	}
	return c.Start(ctx, name)
}

func (c *Cluster) stop(name string, sig syscall.Signal, timeout time.Duration) error {
	c.mu.Lock()
	m, err := c.member(name)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	pid, exited := m.st.PID, m.exited
	c.mu.Unlock()
	select {
	case <-exited:
		return fmt.Errorf("localcluster: %s is not running", name)
	default:
	}
	target := pid
	if sig == syscall.SIGKILL {
		target = -pid
	}
	if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("localcluster: signal %s: %w", name, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		c.log.Warn("cluster member did not stop in time; killing it", "member", name, "timeout", timeout)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
	c.mu.Lock()
	defer c.mu.Unlock()
	m.st.PID, m.st.StartTime = 0, 0
	c.log.Info("cluster member stopped", "member", name, "signal", sig.String())
	return c.save()
}

// Running reports whether the member's process runs.
func (c *Cluster) Running(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.members[name]
	if !ok {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Close stops every member that runs, services before MinIO and etcd, and
// closes the launcher's etcd client.
func (c *Cluster) Close() {
	state := c.State()
	for _, batch := range stopBatches(state.Members) {
		var wg sync.WaitGroup
		for _, i := range batch {
			name := state.Members[i].Name
			if c.Running(name) {
				wg.Go(func() {
					if err := c.Stop(name); err != nil {
						c.log.Warn("cluster member did not stop", "member", name, "error", err)
					}
				})
			}
		}
		wg.Wait()
	}
	if c.etcd != nil {
		_ = c.etcd.Close()
	}
}

// EtcdLeader returns the name of the etcd member that leads.
func (c *Cluster) EtcdLeader(ctx context.Context) (string, error) {
	for _, name := range c.Members(KindEtcd) {
		st, _ := c.Member(name)
		if !c.Running(name) {
			continue
		}
		resp, err := c.etcd.Status(ctx, st.Addr)
		if err != nil {
			return "", fmt.Errorf("localcluster: status of %s: %w", name, err)
		}
		if resp.Leader != 0 && resp.Leader == resp.Header.MemberId {
			return name, nil
		}
	}
	return "", errors.New("localcluster: no etcd member leads")
}

// LogTail returns the last n bytes of the member's output.
func (c *Cluster) LogTail(name string, n int64) string {
	st, ok := c.Member(name)
	if !ok {
		return ""
	}
	f, err := os.Open(st.Log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Size() > n {
		_, _ = f.Seek(info.Size()-n, 0)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return string(b[:k])
}

// waitReady waits until the member serves: an etcd member answers a
// linearizable read, MinIO answers S3 calls, a service is registered in
// discovery by this process, and a router also reports ready over HTTP.
func (c *Cluster) waitReady(ctx context.Context, name string) error {
	c.mu.Lock()
	m, err := c.member(name)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	st, exited, rev := *m.st, m.exited, m.startRev
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	var last error
	for {
		select {
		case <-exited:
			return fmt.Errorf("localcluster: %s exited before it served; its log ends:\n%s", name, c.LogTail(name, 2000))
		default:
		}
		if last = c.ready(ctx, st, rev); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localcluster: %s not ready: %w (last check: %v); its log ends:\n%s", name, ctx.Err(), last, c.LogTail(name, 2000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) ready(ctx context.Context, st MemberState, rev int64) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	switch st.Kind {
	case KindEtcd:
		// A client of this member alone, which NewClient checks with a
		// linearizable read.
		root, err := c.State().EtcdTLS.Config()
		if err != nil {
			return err
		}
		cli, err := etcdx.NewClient(ctx, etcdx.ClientOptions{Endpoints: []string{st.Addr}, DialTimeout: time.Second, TLS: root})
		if err != nil {
			return err
		}
		return cli.Close()
	case KindMinIO:
		s := c.State().S3
		mc, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
		if err != nil {
			return err
		}
		// The health endpoint turns ready before the object layer
		// is, so ask for a bucket.
		_, err = mc.BucketExists(ctx, "readiness-probe")
		return err
	}
	resp, err := c.etcd.Get(ctx, discovery.Target(st.Kind)+"/"+st.Addr)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision <= rev {
		return errors.New("not registered yet")
	}
	if st.Kind != KindRouter {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+st.HTTPAddr+"/readyz", nil)
	if err != nil {
		return err
	}
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", hr.Status)
	}
	return nil
}

// IsNotExist reports whether err says that no cluster state exists.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
