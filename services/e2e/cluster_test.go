package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
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

// startCluster starts a workspace, an approval service, n executors (with
// executorArgs) and a router, each its own process, and waits until the
// router is ready.
func startCluster(t testing.TB, n int, executorArgs ...string) *cluster {
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
		"CONCH_RESPONSES_DIR="+t.TempDir(),
		"CONCH_SIGNING_KEYS=k1:cluster-signing-key-0123456789abcdef",
		"CONCH_SECRETS_KEY="+sealtest.KeyText(t),
		"CONCH_OUTBOUND_ALLOW="+modelHost,
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
		c.executors = append(c.executors, c.start(append([]string{"executor", "--grpc-addr", addr}, executorArgs...)...))
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

// TestRouterDrains stops a router the way Kubernetes does, with SIGTERM
// while clients still reach it: for its drain delay it keeps serving, with
// /readyz answering 503 and every response closing its connection, and
// only then stops taking connections.
func TestRouterDrains(t *testing.T) {
	c := startCluster(t, 1)
	addr := freeAddr(t)
	router := c.start("router", "--http-addr", addr, "--drain-delay", "5s")
	d := &dev{t: t, URL: "http://" + addr, Key: c.dev.Key, waited: make(chan error)}
	d.waitReady(30 * time.Second)

	client := &http.Client{Transport: &http.Transport{}}
	get := func(path string) (*http.Response, bool) {
		t.Helper()
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", d.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+d.Key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp, reused
	}
	if resp, _ := get("/api/v1/accounts"); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("before the drain: %s, close %v; want 200 on a kept-alive connection", resp.Status, resp.Close)
	}

	if err := router.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, d, "/readyz", http.StatusServiceUnavailable)
	// The connection kept from before is still served, and closed after.
	resp, reused := get("/api/v1/accounts")
	if resp.StatusCode != http.StatusOK || !reused || !resp.Close {
		t.Fatalf("draining, on the kept connection: %s, reused %v, close %v; want 200, reused, then closed", resp.Status, reused, resp.Close)
	}
	// New connections are still accepted, answered, and closed.
	resp, reused = get("/api/v1/accounts")
	if resp.StatusCode != http.StatusOK || reused || !resp.Close {
		t.Fatalf("draining, on a new connection: %s, reused %v, close %v; want 200 on a new connection, then closed", resp.Status, reused, resp.Close)
	}
	if resp, _ := get("/readyz"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("draining: /readyz = %s, want 503", resp.Status)
	}

	if err := router.Wait(); err != nil {
		t.Fatalf("router exit: %v", err)
	}
	if _, err := client.Get(d.URL + "/healthz"); err == nil {
		t.Fatal("the router still takes connections after it stopped")
	}
}

// TestEvaluateSeesTheSandboxRootFS checks that exec-policy:evaluate for
// host sandbox judges the programs a sandbox would run, found by an
// executor in its root filesystem, not those of the approval service's
// machine: here the image has a program the host lacks and lacks ls.
func TestEvaluateSeesTheSandboxRootFS(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sh", "only-in-image"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 1, "--sandbox-rootfs", root, "--sandbox-pool", "0")
	d := c.dev

	evaluate := func(host string) []string {
		t.Helper()
		code, body := d.call("POST", "/api/v1/exec-policy:evaluate", d.Key, map[string]any{
			"command": "only-in-image --x && ls", "agent": "default", "host": host, "cwd": "/home/workspace",
			// A client's word on what a sandbox finds counts for nothing.
			"sandbox_resolution": map[string]any{"segments": []map[string]any{{"argv": []string{"ls"}, "resolved_path": "/usr/bin/ls"}}},
		})
		var r struct {
			Segments []struct {
				ResolvedPath string `json:"resolved_path"`
			} `json:"segments"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &r) != nil || len(r.Segments) != 2 {
			t.Fatalf("evaluate on host %s = %d %s", host, code, body)
		}
		return []string{r.Segments[0].ResolvedPath, r.Segments[1].ResolvedPath}
	}
	if got := evaluate("sandbox"); got[0] != "/usr/bin/only-in-image" || got[1] != "" {
		t.Errorf("host sandbox resolved %q, want only-in-image from the image and no ls", got)
	}
	if got := evaluate("gateway"); got[0] != "" || got[1] == "" {
		t.Errorf("host gateway resolved %q, want the approval host's ls and no only-in-image", got)
	}
}
