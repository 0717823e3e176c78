package executor

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

func reportP50(b *testing.B, ds []time.Duration) { reportP50As(b, ds, "p50-ms") }

// reportP50As records the median of ds as unit.
func reportP50As(b *testing.B, ds []time.Duration, unit string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, unit)
}

// BenchmarkBareForkExec is the floor for a command: /bin/sh -c true
// started from Go, in the two rhythms BenchmarkCommandRoundTrip measures:
// paced-p50-ms after the same untimed 5 ms pause, p50-ms as soon as the
// one before it ended. On a VM whose idle vCPUs sleep, a process started
// after a pause pays for waking them, which one started back to back does
// not.
func BenchmarkBareForkExec(b *testing.B) {
	paced, burst := pacedThenBurst(b, func() time.Duration { return bareForkExec(b) })
	reportP50(b, burst)
	reportP50As(b, paced, "paced-p50-ms")
}

// bareForkExec times one /bin/sh -c true started from Go.
func bareForkExec(b *testing.B) time.Duration {
	start := time.Now()
	if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// commandPause stands for a model's turn between two commands; it is far
// shorter than any real one.
const commandPause = 5 * time.Millisecond

// pacedThenBurst times run twice per iteration: after an untimed
// commandPause, then at once.
func pacedThenBurst(b *testing.B, run func() time.Duration) (paced, burst []time.Duration) {
	for b.Loop() {
		paced = append(paced, afterPause(b, run))
		burst = append(burst, run())
	}
	return paced, burst
}

// afterPause times run after an untimed commandPause.
func afterPause(b *testing.B, run func() time.Duration) time.Duration {
	b.StopTimer()
	time.Sleep(commandPause)
	b.StartTimer()
	return run()
}

// BenchmarkCommandRoundTrip runs `true` through the executor's gRPC API in a
// warm sandbox: p50-ms after an untimed pause (a model's turn, in which the
// agent starts the next command's shells ahead), burst-p50-ms as soon as
// the command before it ended. Its floor, bare-paced-p50-ms, is a bare
// fork+exec of the same after the same pause, timed in the same rounds.
// Two more steps of each round split the command in two:
//   - exec-paced-p50-ms: the same command through the executor's Exec,
//     without gRPC: policy, records, the sandbox and its agent;
//   - noop-paced-p50-ms: a gRPC call to the same executor that runs
//     nothing (GetSandbox): gRPC's own round trip.
//
// floor-plus-noop-p50-ms is the median of each round's bare fork+exec
// plus its gRPC call that runs nothing. The four steps take turns at being
// first in a round, so that none always runs in another's wake. Timed
// minutes apart, in BenchmarkBareForkExec, the command and its floor had
// swung from 0.99x to 1.6x of each other between runs on a shared VM.
func BenchmarkCommandRoundTrip(b *testing.B) {
	x := startExecutor(b)
	id := createSandbox(b, x, "bench")
	ctx := as(b, "bench")
	req := &executorv1.RunCommandRequest{SandboxId: id, Command: "true"}
	run := func() time.Duration {
		start := time.Now()
		res, err := x.client.RunCommand(ctx, req)
		if err != nil || res.GetOutcome().GetExitCode() != 0 {
			b.Fatal(res, err)
		}
		return time.Since(start)
	}
	params := ExecParams{SandboxID: id, Command: "true", Timeout: DefaultRunTimeout, MaxOutput: DefaultOutputChars}
	exec := func() time.Duration {
		start := time.Now()
		res, err := x.svc.Exec(ctx, "bench", params, discard{})
		if err != nil || res.Outcome != OutcomeExit || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		return time.Since(start)
	}
	get := &executorv1.GetSandboxRequest{Id: id}
	noop := func() time.Duration {
		start := time.Now()
		if _, err := x.client.GetSandbox(ctx, get); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	run()
	var paced, floor, burst, direct, grpcOnly, floorPlus []time.Duration
	steps := []func(){
		func() {
			paced = append(paced, afterPause(b, run))
			burst = append(burst, run())
		},
		func() { floor = append(floor, afterPause(b, func() time.Duration { return bareForkExec(b) })) },
		func() { direct = append(direct, afterPause(b, exec)) },
		func() { grpcOnly = append(grpcOnly, afterPause(b, noop)) },
	}
	for round := 0; b.Loop(); round++ {
		for i := range steps {
			steps[(round+i)%len(steps)]()
		}
		floorPlus = append(floorPlus, floor[round]+grpcOnly[round])
	}
	reportP50(b, paced)
	reportP50As(b, floor, "bare-paced-p50-ms")
	reportP50As(b, burst, "burst-p50-ms")
	reportP50As(b, direct, "exec-paced-p50-ms")
	reportP50As(b, grpcOnly, "noop-paced-p50-ms")
	reportP50As(b, floorPlus, "floor-plus-noop-p50-ms")
}

// BenchmarkThroughput8Sandboxes runs `true` from 8 callers, each in its own
// sandbox, and reports commands per second.
func BenchmarkThroughput8Sandboxes(b *testing.B) {
	x := startExecutor(b)
	ctx := as(b, "bench")
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = createSandbox(b, x, "bench")
	}
	const perCaller = 50
	start := time.Now()
	n := 0
	for b.Loop() {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				for range perCaller {
					if _, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: "true"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		n += len(ids) * perCaller
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "cmds/s")
}

func selfRSS(b *testing.B) int64 {
	rss := pidRSS(os.Getpid())
	if rss == 0 {
		b.Fatal("no VmRSS")
	}
	return rss
}

// pidRSS returns a process's resident set in bytes, 0 if unknown.
func pidRSS(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkIdleSandboxes holds 100 idle sandboxes at once and reports the
// executor's RSS growth per sandbox.
func BenchmarkIdleSandboxes(b *testing.B) {
	x := startExecutor(b)
	ctx := as(b, "bench")
	for b.Loop() {
		before := selfRSS(b)
		var ids []string
		for range 100 {
			resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{})
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, resp.GetId())
		}
		if _, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: ids[99], Command: "true"}); err != nil {
			b.Fatal(err)
		}
		after := selfRSS(b)
		b.ReportMetric(float64(after-before)/100/(1<<20), "MiB-rss/sandbox")
		// The sandboxes' own processes (bubblewrap, its init, the agent)
		// are not the executor's memory, but they are the cost of a sandbox.
		// PSS shares the pages of the one agent binary among its users.
		var sbPSS int64
		for _, e := range x.svc.List("bench", "") {
			pids, _ := e.sb.HostPIDs()
			for _, pid := range pids {
				sbPSS += pidPSS(pid)
			}
		}
		b.ReportMetric(float64(sbPSS)/100/(1<<20), "MiB-sandbox-procs-pss/sandbox")
		for _, id := range ids {
			if _, err := x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// pidPSS returns a process's proportional set size in bytes, 0 if unknown.
func pidPSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
