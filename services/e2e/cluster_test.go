package e2e

import (
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// TestSingleServiceCommands runs each service as its own process against one
// etcd, as in a cluster, and checks that the router reaches all of them
// through discovery, including an executor restarted on a new port.
func TestSingleServiceCommands(t *testing.T) {
	c := startCluster(t, 1)
	d, adminKey := c.dev, c.dev.Key
	executor := c.executors[0]
	start := c.start

	if code, body := d.call("GET", "/api/v1/accounts", adminKey, nil); code != http.StatusOK || !strings.Contains(string(body), `"id":"admin"`) {
		t.Fatalf("accounts = %d %s, want 200 with the admin account", code, body)
	}
	if code, body := d.call("GET", "/api/v1/sandboxes", adminKey, nil); code != http.StatusOK {
		t.Fatalf("executor = %d %s, want 200", code, body)
	}

	// Kill the executor without a chance to deregister: readiness fails,
	// then a new executor on another port is found through etcd by the same
	// router connections.
	if err := executor.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, d, "/readyz", http.StatusServiceUnavailable)
	start("executor")
	waitStatus(t, d, "/readyz", http.StatusOK)
	if code, body := d.call("GET", "/api/v1/sandboxes", adminKey, nil); code != http.StatusOK {
		t.Fatalf("restarted executor = %d %s, want 200", code, body)
	}
}

// cluster is each service as its own process against one etcd.
type cluster struct {
	dev       *dev
	etcd      *clientv3.Client
	executors []*exec.Cmd
	// execAddrs are the executors' gRPC addresses, in the same order.
	execAddrs []string
	// start starts one more conch process with the cluster's settings.
	start func(args ...string) *exec.Cmd
}

// startCluster starts a workspace, an approval service, n executors and a
// router, each its own process, and waits until the router is ready.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cli := etcdxtest.StartForTest(t)
	const adminKey = "cluster-admin-key-0123456789"
	env := append(cleanEnv(),
		"CONCH_ETCD_ENDPOINTS="+strings.Join(cli.Endpoints(), ","),
		"CONCH_INTERNAL_SECRET=cluster-secret-0123456789",
		"CONCH_ADMIN_KEY="+adminKey,
		"CONCH_LOG_LEVEL=warn",
		"CONCH_WORKSPACE_DIR="+t.TempDir(),
		"CONCH_SIGNING_KEYS=k1:cluster-signing-key-0123456789abcdef",
	)
	c := &cluster{etcd: cli}
	c.start = func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out := &lockedBuffer{}
		cmd.Stderr = out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("conch %s stderr:\n%s", args[0], tail(out.String(), 2000))
			}
		})
		return cmd
	}
	c.start("workspace")
	c.start("approval")
	for range n {
		addr := freeAddr(t)
		c.executors = append(c.executors, c.start("executor", "--grpc-addr", addr))
		c.execAddrs = append(c.execAddrs, addr)
	}
	httpAddr := freeAddr(t)
	c.start("router", "--http-addr", httpAddr)
	c.dev = &dev{t: t, URL: "http://" + httpAddr, Key: adminKey, waited: make(chan error)}
	c.dev.waitReady(30 * time.Second)
	return c
}

// waitStatus polls path until it answers code.
func waitStatus(t *testing.T, d *dev, path string, code int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, body := d.call("GET", path, d.Key, nil)
		if got == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d %s, want %d", path, got, body, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
