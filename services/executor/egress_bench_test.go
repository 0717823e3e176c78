package executor

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/conchtest/testnet"
)

// egressProbe measures, in Python, the median time of a new connection
// and one small GET to host:80, directly or through an HTTP proxy with
// CONNECT, over n rounds; it prints the median in milliseconds.
const egressProbe = `
import socket, sys, time
host, n, proxy = sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else ""
ds = []
for _ in range(n):
    t = time.perf_counter()
    if proxy:
        ph, pp = proxy.rsplit(":", 1)
        s = socket.create_connection((ph, int(pp)))
        s.sendall(("CONNECT %s:80 HTTP/1.1\r\nHost: %s:80\r\n\r\n" % (host, host)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(4096)
        assert b" 200 " in buf.split(b"\r\n")[0], buf
    else:
        s = socket.create_connection((host, 80))
    s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode())
    while s.recv(65536):
        pass
    s.close()
    ds.append(time.perf_counter() - t)
ds.sort()
print("%.4f" % (ds[len(ds) // 2] * 1000))
`

// BenchmarkSandboxEgressConnect measures a connection from a program in a
// sandbox through the whole egress path (the agent's loopback port, the
// egress socket, the executor's proxy) against the same program making
// the same connection directly from the host, each over 200 rounds per op.
func BenchmarkSandboxEgressConnect(b *testing.B) {
	in := testnet.Start(b)
	x := startExecutor(b)
	ctx := as(b, "bench")
	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Agent: "bench",
		Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{in.Addr.String()}}})
	if err != nil {
		b.Fatal(err)
	}
	id := resp.GetId()
	b.Cleanup(func() { _, _ = x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}) })
	const rounds = "200"
	parse := func(out string) float64 {
		v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			b.Fatalf("probe printed %q", out)
		}
		return v
	}
	var direct, sandboxed float64
	for b.Loop() {
		out, err := exec.Command("python3", "-c", egressProbe, in.Addr.String(), rounds).Output()
		if err != nil {
			b.Fatal(err)
		}
		direct += parse(string(out))
		r, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, TimeoutSeconds: 120,
			Command: fmt.Sprintf("python3 -c '%s' %s %s 127.0.0.1:3128", strings.ReplaceAll(egressProbe, "'", `'\''`), in.Addr, rounds)})
		if err != nil || r.GetOutcome().GetExitCode() != 0 {
			b.Fatalf("probe in the sandbox: %v %v", r, err)
		}
		sandboxed += parse(r.GetStdout())
	}
	n := float64(b.N)
	b.ReportMetric(direct/n, "direct-p50-ms")
	b.ReportMetric(sandboxed/n, "sandbox-p50-ms")
	b.ReportMetric((sandboxed-direct)/n, "added-p50-ms")
}
