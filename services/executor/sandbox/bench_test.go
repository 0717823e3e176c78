package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// reportP50 records the median of ds as p50-ms.
func reportP50(b *testing.B, ds []time.Duration) { reportP50As(b, ds, "p50-ms") }

// reportP50As records the median of ds as unit.
func reportP50As(b *testing.B, ds []time.Duration, unit string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, unit)
}

// bareBwrapArgs are bubblewrap's arguments for the floor of a sandbox.
var bareBwrapArgs = []string{"--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
	"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev"}

// BenchmarkBareBwrap is the floor for sandbox creation: bubblewrap with all
// namespaces running /bin/true as an unprivileged uid.
func BenchmarkBareBwrap(b *testing.B) {
	var ds []time.Duration
	for b.Loop() {
		ds = append(ds, bareBwrap(b))
	}
	reportP50(b, ds)
}

// bareBwrap times one run of the floor, bubblewrap with all namespaces
// running /bin/true as an unprivileged uid.
func bareBwrap(b *testing.B) time.Duration {
	b.Helper()
	start := time.Now()
	cmd := exec.Command("bwrap", append(slices.Clone(bareBwrapArgs), "/bin/true")...)
	cmd.SysProcAttr = (&Runtime{}).credential(200999)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("bwrap: %v %s", err, out)
	}
	return time.Since(start)
}

// BenchmarkSandboxCreate takes a sandbox from a warm pool and fits it to
// its limits, the executor's usual path; refilling and teardown are not
// timed.
func BenchmarkSandboxCreate(b *testing.B) {
	r := poolRuntime(b, 2)
	var ds []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		sb, err := r.Create(b.Context(), Spec{ID: fmt.Sprintf("benchp%d-%d", os.Getpid(), i), Limits: Limits{WorkspaceBytes: 64 << 20}})
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := sb.Destroy(b.Context()); err != nil {
			b.Fatal(err)
		}
		waitPool(b, r, 2)
		b.StartTimer()
	}
	reportP50(b, ds)
}

// BenchmarkSandboxCreateCold builds a full sandbox (state, workspace
// tmpfs, bubblewrap, agent) without a pool of warm sandboxes, from the
// bubblewraps the runtime starts ahead; teardown is not timed. It says
// where the time goes with the p50 of each step's span: the host state
// (state dir, /etc, workspace tmpfs), the filesystem view, a launch
// (uid, cgroup, bubblewrap started) when none was ready, and bubblewrap
// from its arguments to the agent's hello, which is nearly all of it.
func BenchmarkSandboxCreateCold(b *testing.B) {
	benchCreateCold(b, "", 0)
}

// benchAgent is the agent an executor runs, conch-sandbox-agent beside
// $CONCH_BIN (make bench sets it), or "" (this test binary, whose start
// runs every package initialiser it links) without it.
func benchAgent() string {
	if bin := os.Getenv("CONCH_BIN"); bin != "" {
		return filepath.Join(filepath.Dir(bin), wire.AgentBinaryName)
	}
	return ""
}

// BenchmarkSandboxCreateColdAgent is BenchmarkSandboxCreateCold with the
// agents an executor really runs ($CONCH_BIN, as make bench sets it)
// rather than this package's test binary: conch-sandbox-agent beside it,
// which the executor prefers, and the conch binary itself, whose start
// runs the package initialisation of every library the four services link
// before the agent's first line.
func BenchmarkSandboxCreateColdAgent(b *testing.B) {
	bin := os.Getenv("CONCH_BIN")
	if bin == "" {
		b.Skip("CONCH_BIN names no conch binary (make bench sets it)")
	}
	agent := filepath.Join(filepath.Dir(bin), wire.AgentBinaryName)
	for _, agent := range []string{agent, bin} {
		b.Run(filepath.Base(agent), func(b *testing.B) { benchCreateCold(b, agent, 0) })
	}
	// A burst beyond the launches kept ahead: each create starts its own.
	b.Run("no-launch-ahead", func(b *testing.B) { benchCreateCold(b, agent, -1) })
}

// benchCreateCold times cold creates on a runtime of its own whose agent
// is agent (this test binary when empty) and that keeps ahead launches
// (Config.LaunchAhead), recording its spans. Each round also times the
// floor, a bare bubblewrap, in the same state of the machine: once the
// runtime has its launches again, before the create in one round and
// after it in the next, so that neither the drift of a shared machine
// between benchmarks nor what either leaves behind (a network namespace
// is torn down after its last process exits) favours one of them.
// bare-p50-ms is that floor.
func benchCreateCold(b *testing.B, agent string, ahead int) {
	rec := tracetest.NewSpanRecorder()
	r := ownRuntime(b, Config{AgentBinary: agent, LaunchAhead: ahead, TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	var ds, bare []time.Duration
	var sb *Sandbox
	create := func(i int) {
		waitSpares(b, r.launches, r.launches.size)
		b.StartTimer()
		start := time.Now()
		var err error
		if sb, err = r.Create(b.Context(), Spec{ID: fmt.Sprintf("bench%d-%d", os.Getpid(), i)}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
	}
	floor := func() {
		waitSpares(b, r.launches, r.launches.size)
		bare = append(bare, bareBwrap(b))
	}
	i := 0
	for b.Loop() {
		i++
		b.StopTimer()
		if i%2 == 1 {
			floor()
			create(i)
		} else {
			create(i)
			floor()
		}
		if err := sb.Destroy(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportP50As(b, bare, "bare-p50-ms")
	reportP50(b, ds)
	steps := map[string][]time.Duration{}
	for _, sp := range rec.Ended() {
		steps[sp.Name()] = append(steps[sp.Name()], sp.EndTime().Sub(sp.StartTime()))
	}
	for _, step := range []struct{ span, unit string }{
		{"sandbox.state", "state-p50-ms"}, {"sandbox.view", "view-p50-ms"},
		{"sandbox.launch", "launch-p50-ms"}, {"sandbox.start", "start-p50-ms"},
	} {
		d := steps[step.span]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, step.unit)
	}
}

// BenchmarkAgentRoundTrip runs `true` through the agent of a warm sandbox,
// without the gRPC layer. An agent's commands come a model's turn apart,
// which leaves the agent time to start the next command's shells ahead:
// p50-ms is a command after an untimed pause, burst-p50-ms one started as
// soon as the one before it ended.
func BenchmarkAgentRoundTrip(b *testing.B) {
	sb := newSandbox(b, Spec{})
	run := func() time.Duration {
		start := time.Now()
		p, err := sb.Start(Options{Command: "true", Budget: 1 << 14, TrackCwd: true})
		if err != nil {
			b.Fatal(err)
		}
		<-p.Done()
		return time.Since(start)
	}
	var spaced, burst []time.Duration
	for b.Loop() {
		b.StopTimer()
		time.Sleep(commandPause)
		b.StartTimer()
		spaced = append(spaced, run())
		burst = append(burst, run())
	}
	reportP50(b, spaced)
	reportP50As(b, burst, "burst-p50-ms")
}

// commandPause stands for the model's turn between two commands; it is far
// shorter than any real one.
const commandPause = 5 * time.Millisecond

// BenchmarkTwoShells is a bare fork+exec of a shell running a shell, the
// floor of a command started without a spare (in a burst).
func BenchmarkTwoShells(b *testing.B) {
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := exec.Command("/bin/sh", "-c", "/bin/sh -c 'trap \"pwd >/dev/null\" EXIT; eval true'").Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	reportP50(b, ds)
}

// BenchmarkColdStartSteps says where a cold create's time goes beyond bare
// bubblewrap, one step at a time, each round running every step once so
// that the machine's drift falls on all of them alike:
//
//   - bare: bubblewrap with all namespaces running /bin/true (BenchmarkBareBwrap);
//   - mounts: a real sandbox's bubblewrap arguments (its mounts, uid
//     mapping, capabilities, pid 1), without the seccomp filter, running
//     /bin/true;
//   - seccomp: the same with the sandbox's seccomp filter;
//   - cgroup: the same started into a cgroup of its own (made untimed;
//     cgroup v2 only, as v1 has no clone into a cgroup);
//   - agent: the same as seccomp, running the agent binary an executor
//     runs (CONCH_BIN's conch-sandbox-agent) up to its first line and out:
//     the Go runtime's start in place of /bin/true's;
//   - create: a whole cold create with that agent (else this test
//     binary): the host state, the agent's hello, and bubblewrap started
//     ahead of it (Config.LaunchAhead) in its cgroup.
func BenchmarkColdStartSteps(b *testing.B) {
	agent := benchAgent()
	r := ownRuntime(b, Config{AgentBinary: agent})

	// One prepared sandbox, never started, lends its arguments to the
	// middle steps.
	s := &Sandbox{rt: r, spec: Spec{ID: "steps"}}
	s.spec.withDefaults()
	var cleanups []func()
	b.Cleanup(func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	})
	var err error
	if s.uid, err = r.uids.claim(); err != nil {
		b.Fatal(err)
	}
	cleanups = append(cleanups, func() { r.uids.release(s.uid) })
	if err := s.prepare(b.Context(), s.spec, "steps"+hostName(), &cleanups); err != nil {
		b.Fatal(err)
	}
	withFilter := r.bwrapArgs(s)
	var noFilter []string
	for i := 0; i < len(withFilter); i++ {
		if withFilter[i] == "--seccomp" {
			i++
			continue
		}
		noFilter = append(noFilter, withFilter[i])
	}
	// bwrap runs prog in bubblewrap with args; an agent without its
	// subcommand says so and exits 2.
	bwrap := func(args []string, prog string, seccomp bool, cg *cgroup) time.Duration {
		b.Helper()
		cmd := exec.Command(r.cfg.Bwrap, append(slices.Clone(args), prog)...)
		cmd.Env = []string{}
		cmd.Dir = "/"
		cmd.SysProcAttr = r.credential(s.uid)
		if seccomp {
			prog, w, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				_, _ = w.Write(r.cfg.Seccomp)
				_ = w.Close()
			}()
			defer prog.Close()
			cmd.ExtraFiles = []*os.File{prog}
		}
		if cg != nil {
			f, err := cg.fd()
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
		}
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if prog == wire.AgentPath && cmd.ProcessState.ExitCode() == 2 && bytes.Contains(out, []byte(wire.AgentBinaryName)) {
			err = nil
		}
		if err != nil {
			b.Fatalf("bwrap %s: %v %s", prog, err, out)
		}
		return d
	}

	steps := map[string][]time.Duration{}
	i := 0
	for b.Loop() {
		i++
		steps["bare-p50-ms"] = append(steps["bare-p50-ms"], bwrap(bareBwrapArgs, "/bin/true", false, nil))
		steps["mounts-p50-ms"] = append(steps["mounts-p50-ms"], bwrap(noFilter, "/bin/true", false, nil))
		steps["seccomp-p50-ms"] = append(steps["seccomp-p50-ms"], bwrap(withFilter, "/bin/true", true, nil))
		if agent != "" {
			steps["agent-p50-ms"] = append(steps["agent-p50-ms"], bwrap(withFilter, wire.AgentPath, true, nil))
		}
		if r.cgroups.v2 {
			b.StopTimer()
			cg, err := r.cgroups.create(fmt.Sprintf("steps-%d", i), s.spec.Limits)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			steps["cgroup-p50-ms"] = append(steps["cgroup-p50-ms"], bwrap(withFilter, "/bin/true", true, cg))
			b.StopTimer()
			_ = cg.kill(5 * time.Second)
			_ = cg.remove()
			b.StartTimer()
		}
		start := time.Now()
		sb, err := r.Create(b.Context(), Spec{ID: fmt.Sprintf("steps%d-%d", os.Getpid(), i)})
		if err != nil {
			b.Fatal(err)
		}
		steps["create-p50-ms"] = append(steps["create-p50-ms"], time.Since(start))
		b.StopTimer()
		if err := sb.Destroy(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	for unit, ds := range steps {
		reportP50As(b, ds, unit)
	}
}

// BenchmarkIdleDensity holds 32 idle sandboxes, each after one command
// (so that its shell's spare is started, as an executor's idle sandbox
// has), and reports what each costs the machine: the drop of
// MemAvailable per sandbox, kernel memory, tmpfs and page tables
// included, and the sandboxes one GiB holds at that cost. The runtime
// keeps no pool, so nothing but the 32 is built meanwhile.
func BenchmarkIdleDensity(b *testing.B) {
	r := poolRuntime(b, 0)
	const n = 32
	var per []float64
	for i := range b.N {
		runtime.GC()
		time.Sleep(500 * time.Millisecond)
		before := memAvailable(b)
		sbs := make([]*Sandbox, 0, n)
		for j := range n {
			sb, err := r.Create(b.Context(), Spec{ID: fmt.Sprintf("dens%d-%d-%d", os.Getpid(), i, j)})
			if err != nil {
				b.Fatal(err)
			}
			sbs = append(sbs, sb)
			if res, _ := run(b, sb, Options{Command: "true"}, 30*time.Second); res.exit.Code != 0 {
				b.Fatalf("true in an idle sandbox: %+v", res)
			}
		}
		time.Sleep(time.Second) // the spares start after each command
		after := memAvailable(b)
		per = append(per, float64(before-after)/n)
		for _, sb := range sbs {
			if err := sb.Destroy(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	}
	slices.Sort(per)
	p50 := per[len(per)/2]
	b.ReportMetric(p50/(1<<20), "MiB/idle-sandbox")
	b.ReportMetric((1<<30)/p50, "idle-sandboxes/GiB")
}

// memAvailable is the kernel's estimate of the memory available for new
// work, in bytes.
func memAvailable(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}
